"""The MCP source's pure parts: its config section, a requestedSchema as a form and back, the
``ask`` arguments as an elicitation, and an elicitation as the tools' result."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError

from adapters.sources.mcp import ask as asks
from adapters.sources.mcp import form as forms
from adapters.sources.mcp import proxy
from adapters.sources.mcp.config import McpConfig, agent_tokens
from adapters.sources.mcp.server import agent_for, mcp_part
from bot.domain.errors import ConfigError
from bot.domain.model import Answer, AnswerMode, Kind, Meaning, Status
from bot.domain.ports import PromptView

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
AGENTS = {"ci": {"token_env": "CI_TOKEN", "destinations": ["web"]}, "b": {"token_env": "B"}}


# --- config -----------------------------------------------------------------------------------


def test_config_defaults_and_unknown_keys_refused() -> None:
    assert McpConfig().wait_seconds == 45
    assert McpConfig().agents == {}
    for bad in (
        {"wait": 3},
        {"agents": {"ci": {"token_env": "X", "token": "inline"}}},
        {"agents": {"ci": {"token_env": "X", "destinations": ["email:me"]}}},
        {"agents": {"bad name": {"token_env": "X"}}},
        {"wait_seconds": 0},
        {"wait_seconds": 601},
    ):
        with pytest.raises(ValidationError):
            McpConfig.model_validate(bad)


def test_tokens_come_from_the_environment_and_must_be_distinct() -> None:
    config = McpConfig.model_validate({"agents": AGENTS})
    assert agent_tokens(config, {"CI_TOKEN": "t1", "B": "t2"}) == {"t1": "ci", "t2": "b"}
    with pytest.raises(ConfigError, match=r"mcp\.agents\.b\.token_env: the variable B"):
        agent_tokens(config, {"CI_TOKEN": "t1"})
    with pytest.raises(ConfigError, match=r"mcp\.agents\.b\.token_env: the same token"):
        agent_tokens(config, {"CI_TOKEN": "t1", "B": "t1"})


def test_the_part_is_built_before_any_event_loop_runs() -> None:
    """The composition root may build it synchronously; it refuses a config it cannot serve."""
    config = McpConfig.model_validate({"agents": AGENTS})
    unused: Any = object()  # the Elicitations port: not called while building
    part = mcp_part(config, {"CI_TOKEN": "t1", "B": "t2"}, unused, unused)
    assert part.route.path == "/mcp"
    assert part.ready() == "mcp: the session manager is not running"
    with pytest.raises(ConfigError, match=r"mcp\.agents\.b\.token_env"):
        mcp_part(config, {"CI_TOKEN": "t1"}, unused, unused)


def test_agent_for_a_token() -> None:
    tokens = {"t1": "ci", "t2": "b"}
    assert agent_for("t2", tokens) == "b"
    assert agent_for("t3", tokens) is None
    assert agent_for("", tokens) is None


# --- forms ------------------------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Email"},
        "age": {"type": "integer", "minimum": 18},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean", "description": "Agree?"},
        "size": {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]},
        "tags": {
            "type": "array",
            "items": {"anyOf": [{"const": "a", "title": "Alpha"}, {"const": "b", "title": "Beta"}]},
            "maxItems": 1,
        },
    },
    "required": ["email", "age", "ok", "size"],
}


def test_a_schema_becomes_questions_people_answer() -> None:
    form = forms.parse_form(SCHEMA)
    by_id = {q.id: q for q in form.questions}
    assert by_id["email"].takes_text
    assert not by_id["email"].options
    assert [o.label for o in by_id["ok"].options] == ["Yes", "No"]
    assert by_id["ok"].question == "ok: Agree?"
    assert [o.label for o in by_id["size"].options] == ["Small", "Medium"]
    assert by_id["tags"].multi
    assert [o.label for o in by_id["tags"].options] == ["Alpha", "Beta", forms.LEAVE_EMPTY]
    assert [o.label for o in by_id["ratio"].options] == [forms.LEAVE_EMPTY]
    assert by_id["ratio"].takes_text


def test_answers_become_typed_content_checked_by_the_schema() -> None:
    form = forms.parse_form(SCHEMA)
    answers = {
        "email": {"selected": [], "text": "a@example.org"},
        "age": {"selected": [], "text": "42"},
        "ratio": {"selected": [forms.LEAVE_EMPTY], "text": None},
        "ok": {"selected": ["No"], "text": None},
        "size": {"selected": ["Medium"], "text": None},
        "tags": {"selected": ["Beta"], "text": None},
    }
    assert forms.content_of(form, answers) == {
        "email": "a@example.org",
        "age": 42,
        "ok": False,
        "size": "m",
        "tags": ["b"],
    }
    wrong = {**answers, "age": {"selected": [], "text": "twelve"}}
    problems = forms.content_of(form, wrong)
    assert isinstance(problems, list)
    assert [p.loc for p in problems] == ["age"]
    young = forms.content_of(form, {**answers, "age": {"selected": [], "text": "12"}})
    assert isinstance(young, list)
    assert "18" in young[0].message


@pytest.mark.parametrize(
    ("schema", "loc"),
    [
        ([], "form"),
        ({"type": "array", "properties": {"a": {"type": "string"}}}, "form.type"),
        ({"properties": {"a": {"type": "object"}}}, "form.properties.a.type"),
        ({"properties": {"a": {"type": "string", "format": "phone"}}}, "form.properties.a.format"),
        ({"properties": {"a": {"type": "string", "pattern": "("}}}, "form.properties.a.pattern"),
        ({"properties": {"a": {"type": "number", "minLength": 1}}}, "form.properties.a.minLength"),
        ({"properties": {"a": {"type": "string", "enum": []}}}, "form.properties.a.enum"),
        ({"properties": {"a": {"type": "string", "enum": ["x", "X"]}}}, "form.properties.a"),
        (
            {"properties": {"a": {"type": "array", "items": {"type": "string"}}}},
            "form.properties.a.items",
        ),
        ({"properties": {"a": {"type": "string"}}, "required": ["b"]}, "form.required"),
        (
            {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
            "form.additionalProperties",
        ),
    ],
)
def test_a_schema_outside_the_mcp_subset_is_named(schema: Any, loc: str) -> None:
    with pytest.raises(forms.SchemaError) as caught:
        forms.parse_form(schema)
    assert loc in [p.loc for p in caught.value.problems]


# --- ask --------------------------------------------------------------------------------------


def _ask(**kw: Any) -> Any:
    return asks.to_elicitation(question_id="q1", agent="ci", now=NOW, **{"question": "Ship?", **kw})


def test_options_make_an_approval_bound_to_what_was_shown() -> None:
    e = _ask(
        options=[
            asks.AskOption(id="y", label="Yes", meaning="approve"),
            asks.AskOption(id="n", label="No", meaning="reject", recommended=True),
        ],
        previews=[asks.AskPreview(type="diff", label="Change", text="-a\n+b")],
        timeout_seconds=60,
        on_timeout="n",
        workspace="acme",
        board="brd",
    )
    assert e.key == "mcp:q1"
    assert e.asker == "mcp:ci"
    assert e.kind is Kind.APPROVAL
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert [o.meaning for o in e.options] == [Meaning.APPROVE, Meaning.REJECT]
    assert e.subject is not None
    assert e.subject.digest.startswith("sha256:")
    assert e.subject.preview[0].text == "-a\n+b"
    assert e.deadlines.expires_at == NOW + timedelta(seconds=60)
    assert e.deadlines.on_timeout == "deny"
    assert e.options[1].outcome == "deny"
    assert (e.workspace, e.context.board_id) == ("acme", "brd")


def test_answer_modes() -> None:
    choose = [asks.AskOption(id="a", label="A")]
    assert _ask(options=choose).answer_mode is AnswerMode.SINGLE_CHOICE
    assert _ask(options=choose).kind is Kind.QUESTION
    both = _ask(options=choose, free_text=asks.FreeText(max_length=9))
    assert (both.answer_mode, both.max_length) == (AnswerMode.CHOICE_OR_TEXT, 9)
    assert _ask(free_text=asks.FreeText()).answer_mode is AnswerMode.FREE_TEXT
    with_form = _ask(form={"properties": {"a": {"type": "string"}}})
    assert with_form.form[0].id == "a"
    assert with_form.extra["form"] == {"properties": {"a": {"type": "string"}}}
    assert with_form.answer_mode is AnswerMode.CHOICE_OR_TEXT  # text, or leave it empty
    assert [o.label for o in with_form.options] == [forms.LEAVE_EMPTY]
    one_choice = _ask(form={"properties": {"b": {"type": "boolean"}}, "required": ["b"]})
    assert one_choice.answer_mode is AnswerMode.SINGLE_CHOICE
    assert [o.id for o in one_choice.options] == ["Yes", "No"]
    two = _ask(form={"properties": {"a": {"type": "string"}, "b": {"type": "boolean"}}})
    assert (two.answer_mode, two.options) == (AnswerMode.FREE_TEXT, ())


def test_an_id_out_of_bounds_is_named_as_the_tool_names_it() -> None:
    with pytest.raises(asks.AskError) as caught:
        _ask(options=[asks.AskOption(id="x" * 201, label="A")])
    assert caught.value.problems[0].loc == "options[0].id"


def test_route_for() -> None:
    allowed = ("web", "slack:C1")
    named = asks.route_for(workspace=None, board=None, destinations=["slack:C1"], allowed=allowed)
    assert named is not None
    assert named.destinations == ("slack:C1",)
    own = asks.route_for(workspace=None, board=None, destinations=None, allowed=allowed)
    assert own is not None
    assert own.destinations == allowed
    assert asks.route_for(workspace="w", board=None, destinations=None, allowed=allowed) is None
    assert asks.route_for(workspace=None, board=None, destinations=[], allowed=()) is None
    with pytest.raises(asks.AskError, match=r"destinations\[1\]"):
        asks.route_for(
            workspace=None, board=None, destinations=["web", "slack:C2"], allowed=allowed
        )


def _view(e: Any, status: Status, answer: Answer | None) -> PromptView:
    return PromptView(elicitation=e, status=status, answer=answer, version=1, link="", now=NOW)


def test_the_result_shape() -> None:
    e = _ask(options=[asks.AskOption(id="a", label="A")])
    assert asks.result_of(_view(e, Status.PENDING, None)) == {
        "id": "q1",
        "status": "pending",
        "answer": None,
    }
    given = Answer(option_ids=("a",), respondent="slack:U1", via="web", at=NOW)
    assert asks.result_of(_view(e, Status.ANSWERED, given))["answer"] == {
        "option_ids": ["a"],
        "text": None,
        "fields": {},
        "by": "slack:U1",
        "at": "2026-12-02T09:00:00Z",
    }
    assert asks.result_of(_view(e, Status.EXPIRED, None))["answer"] is None


def test_a_one_question_form_answered_by_an_option_or_a_text() -> None:
    e = _ask(form={"properties": {"b": {"type": "boolean"}}, "required": ["b"]})
    chose = Answer(option_ids=("No",), respondent="slack:U1", via="web", at=NOW)
    assert asks.result_of(_view(e, Status.ANSWERED, chose))["answer"]["fields"] == {"b": False}
    e = _ask(form={"properties": {"n": {"type": "number"}}, "required": ["n"]})
    wrote = Answer(text="2.5", respondent="slack:U1", via="web", at=NOW)
    assert asks.result_of(_view(e, Status.ANSWERED, wrote))["answer"]["fields"] == {"n": 2.5}


def test_a_form_answer_the_schema_refuses_is_named() -> None:
    e = _ask(form={"properties": {"n": {"type": "integer"}}, "required": ["n"]})
    given = Answer(
        respondent="slack:U1",
        via="web",
        at=NOW,
        fields={"answers": {"n": {"selected": [], "text": "many"}}},
    )
    answer = asks.result_of(_view(e, Status.ANSWERED, given))["answer"]
    assert answer["fields"] == {}
    assert answer["problems"][0]["field"] == "n"


# --- the proxy's mapping ------------------------------------------------------------------------


def _form_params(schema: dict[str, Any]) -> Any:
    return types.ElicitRequestFormParams(message="Settings?", requested_schema=schema)


def test_an_elicitation_as_ask_arguments() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert proxy.ask_arguments(_form_params(schema)) == {"question": "Settings?", "form": schema}
    confirm = proxy.ask_arguments(_form_params({"type": "object", "properties": {}}))
    assert [o["id"] for o in confirm["options"]] == ["accept", "decline"]
    url = types.ElicitRequestURLParams(
        message="Sign in", url="https://x.example/a", elicitation_id="1"
    )
    assert proxy.ask_arguments(url) == {"question": "Sign in", "url": "https://x.example/a"}
    # Accept says only that the direct message reached the person.
    assert proxy.elicit_result(url, {"status": "pending", "delivered": True}).action == "accept"
    for undelivered in ({"status": "pending", "delivered": False}, {"status": "cancelled"}):
        assert proxy.elicit_result(url, undelivered).action == "cancel"


def test_the_final_state_as_the_elicitation_result() -> None:
    form = _form_params({"type": "object", "properties": {"n": {"type": "integer"}}})
    answered: dict[str, Any] = {
        "option_ids": [],
        "text": None,
        "fields": {"n": 3},
        "by": "u",
        "at": "x",
    }
    result = proxy.elicit_result(form, {"status": "answered", "answer": answered})
    assert (result.action, result.content) == ("accept", {"n": 3})
    declined = {**answered, "option_ids": ["decline"], "fields": {}}
    assert proxy.elicit_result(form, {"status": "answered", "answer": declined}).action == "decline"
    bad = {**answered, "fields": {}, "problems": [{"field": "n", "message": "not an integer"}]}
    assert proxy.elicit_result(form, {"status": "answered", "answer": bad}).action == "cancel"
    for status in ("expired", "cancelled"):
        assert proxy.elicit_result(form, {"status": status, "answer": None}).action == "cancel"
    confirmed = {**answered, "option_ids": ["accept"], "fields": {}}
    accepted = proxy.elicit_result(form, {"status": "answered", "answer": confirmed})
    assert (accepted.action, accepted.content) == ("accept", {})
    url = types.ElicitRequestURLParams(message="m", url="https://x.example", elicitation_id="1")
    opened = proxy.elicit_result(url, {"status": "answered", "answer": confirmed})
    assert (opened.action, opened.content) == ("accept", None)


def test_the_proxys_agent_and_token() -> None:
    one = McpConfig.model_validate({"agents": {"ci": {"token_env": "T"}}})
    assert proxy.proxy_agent(one, {"T": "tok"}, None) == ("ci", "tok")
    with pytest.raises(ConfigError, match=r"mcp\.agents\.ci\.token_env"):
        proxy.proxy_agent(one, {}, "ci")
    with pytest.raises(ConfigError, match=r"mcp\.agents\.other: no such agent"):
        proxy.proxy_agent(one, {"T": "tok"}, "other")
    two = McpConfig.model_validate({"agents": AGENTS})
    with pytest.raises(ConfigError, match="--agent"):
        proxy.proxy_agent(two, {}, None)
    with pytest.raises(ConfigError, match="--agent"):
        proxy.proxy_agent(McpConfig(), {}, None)


def test_the_upstream_is_a_command_or_a_url() -> None:
    assert proxy._upstream(None, "http://x/mcp") == "http://x/mcp"
    params = proxy._upstream(["python", "-m", "srv"], None)
    assert not isinstance(params, str)
    assert (params.command, params.args) == ("python", ["-m", "srv"])
    for command, url in ((None, None), (["x"], "http://x"), ([], None)):
        with pytest.raises(ConfigError, match="mcp-proxy"):
            proxy._upstream(command, url)

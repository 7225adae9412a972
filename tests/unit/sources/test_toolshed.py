"""Toolshed (spec 002): the request and resolve schemas, the mapping, the runtime's poll shapes."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.shared.jsonbody import load_json
from adapters.sources.toolshed import (
    ASKER,
    SOURCE,
    parse_request,
    parse_resolution,
    poll_body,
    to_elicitation,
)
from adapters.sources.toolshed.parse import inbound_id, request_digest, resolve_body
from bot.domain import rules
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import PayloadRejected
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    Identity,
    Kind,
    Meaning,
    People,
    PreviewItem,
    Refusal,
    Status,
)
from bot.domain.ports import PromptView

NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
FIXTURES = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "sources" / "toolshed.json").read_text("utf-8")
)
REFUSED_FIELDS = {
    "executionId is required": ["executionId"],
    "executionId is a string": ["executionId"],
    "executionId is not empty": ["executionId"],
    "toolPath is required": ["toolPath"],
    "message is required": ["message"],
    "message is a string": ["message"],
    "args is an object": ["args"],
    "args is not null": ["args"],
    "type is approval or form": ["type"],
    "the body is an object": ["body"],
}
RESOLVE_REFUSED_FIELDS = {
    "approved is required": ["approved"],
    "approved is a boolean": ["approved"],
    "data is an object": ["data"],
    "the body is an object": ["body"],
}
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


def case(group: str, name: str) -> Any:
    return copy.deepcopy(FIXTURES[group][name])


def view(
    body: dict[str, Any], status: Status = Status.PENDING, answer: Answer | None = None
) -> PromptView:
    e = to_elicitation(parse_request(body), now=NOW)
    return PromptView(e, status, answer, 1, "http://127.0.0.1:8787/#x", NOW)


def answer(**fields: Any) -> Answer:
    return Answer.model_validate(
        {"respondent": "slack:U0ALICE", "via": "slack:C1", "at": NOW, **fields}
    )


# --- the fixtures -------------------------------------------------------------------------------


def test_every_refused_fixture_has_its_expected_fields() -> None:
    assert set(REFUSED_FIELDS) == set(FIXTURES["refused"])
    assert set(RESOLVE_REFUSED_FIELDS) == set(FIXTURES["resolve_refused"])


@pytest.mark.parametrize("name", sorted(FIXTURES["valid"]))
def test_valid_requests_parse(name: str) -> None:
    body = case("valid", name)
    request = parse_request(body)
    assert request.execution_id == body["executionId"]
    assert request.tool_path == body["toolPath"]
    assert request.message == body["message"]
    assert request.args == body.get("args")
    assert request.type == body.get("type", "approval")


@pytest.mark.parametrize("name", sorted(FIXTURES["refused"]))
def test_refused_requests_name_the_field(name: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_request(case("refused", name))
    assert [p.loc for p in exc.value.problems] == REFUSED_FIELDS[name]


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_request({"executionId": 7, "args": "x", "type": None})
    assert [(p.loc, p.message) for p in exc.value.problems] == [
        ("executionId", "must be a string"),
        ("toolPath", "is required"),
        ("message", "is required"),
        ("args", "must be an object"),
        ("type", 'must be "approval" or "form"'),
    ]


@pytest.mark.parametrize("name", sorted(FIXTURES["resolve_valid"]))
def test_valid_resolutions_parse(name: str) -> None:
    body = case("resolve_valid", name)
    resolution = parse_resolution(body)
    assert resolution.approved is body["approved"]
    assert resolution.data == body.get("data")


@pytest.mark.parametrize("name", sorted(FIXTURES["resolve_refused"]))
def test_refused_resolutions_name_the_field(name: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_resolution(case("resolve_refused", name))
    assert [p.loc for p in exc.value.problems] == RESOLVE_REFUSED_FIELDS[name]


# --- the mapping --------------------------------------------------------------------------------


def test_an_approval_offers_approve_and_deny_and_shows_the_tool_and_its_arguments() -> None:
    body = case("valid", "the spec's approval")
    e = to_elicitation(parse_request(body), now=NOW)

    assert (e.source, e.source_id, e.key) == (SOURCE, "abc-123", "toolshed:abc-123")
    assert e.asker == ASKER
    assert e.kind is Kind.APPROVAL
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert [(o.id, o.label, o.meaning) for o in e.options] == [
        ("approve", "Approve", Meaning.APPROVE),
        ("deny", "Deny", Meaning.REJECT),
    ]
    assert e.title == "Run github.issues.create?"
    assert e.question == 'Create issue "Fix login bug" in my-org/my-repo?'
    assert e.created_at == NOW
    assert e.subject is not None
    assert e.subject.id == "abc-123"
    assert e.subject.preview_complete
    assert e.subject.preview == (
        PreviewItem(type="field", label="Tool", value="github.issues.create"),
        PreviewItem(
            type="json",
            label="Arguments",
            text=json.dumps(body["args"], indent=2),
        ),
    )
    assert e.extra == {"executionId": "abc-123", "type": "approval"}


def test_a_form_offers_submit_and_decline_and_takes_a_written_answer() -> None:
    e = to_elicitation(parse_request(case("valid", "a form")), now=NOW)
    assert e.kind is Kind.QUESTION
    assert e.answer_mode is AnswerMode.CHOICE_OR_TEXT
    assert [(o.id, o.label) for o in e.options] == [("approve", "Submit"), ("deny", "Decline")]
    assert e.title == "Input for deploy.configure"
    written = rules.judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="staging", via="slack:C1"),
        People(),
        NOW,
    )
    assert isinstance(written, Answer)
    assert written.text == "staging"


def test_without_args_only_the_tool_is_previewed() -> None:
    e = to_elicitation(
        parse_request(case("valid", "type defaults to approval and args may be absent")), now=NOW
    )
    assert e.subject is not None
    assert e.subject.preview == (PreviewItem(type="field", label="Tool", value="fs.delete"),)
    assert e.kind is Kind.APPROVAL


def test_the_digest_covers_the_tool_and_its_arguments_not_the_wording() -> None:
    base = parse_request(case("valid", "the spec's approval"))
    reworded = parse_request({**case("valid", "the spec's approval"), "message": "Go?"})
    other_args = parse_request(
        {**case("valid", "the spec's approval"), "args": {"owner": "my-org", "repo": "other"}}
    )
    assert request_digest(base) == request_digest(reworded)
    assert request_digest(base) != request_digest(other_args)
    assert request_digest(base).startswith("sha256:")
    # The inbound id dedupes an identical resend; a reworded one is a revision.
    assert inbound_id(base) == inbound_id(parse_request(case("valid", "the spec's approval")))
    assert inbound_id(base) != inbound_id(reworded)
    assert inbound_id(base).startswith("abc-123:")


def test_the_runtime_itself_cannot_answer() -> None:
    e = to_elicitation(parse_request(case("valid", "the spec's approval")), now=NOW)
    runtime = Identity(platform="toolshed", user="runtime")
    result = rules.judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=runtime, option_ids=("approve",), via="x"),
        People(),
        NOW,
    )
    assert isinstance(result, Refusal)
    assert result.code.value == "asker"


# --- the poll shapes ----------------------------------------------------------------------------


def test_pending_poll_is_exactly_the_spec_shape() -> None:
    assert poll_body(view(case("valid", "the spec's approval"))) == {
        "executionId": "abc-123",
        "status": "pending",
    }


def test_resolved_poll_has_approved_instead_of_status() -> None:
    body = case("valid", "the spec's approval")
    approved = view(body, Status.ANSWERED, answer(option_ids=("approve",)))
    denied = view(body, Status.ANSWERED, answer(option_ids=("deny",)))
    assert poll_body(approved) == {"executionId": "abc-123", "approved": True}
    assert poll_body(denied) == {"executionId": "abc-123", "approved": False}


def test_resolved_poll_returns_data_given_with_the_answer() -> None:
    body = case("valid", "the spec's approval")
    with_data = view(
        body, Status.ANSWERED, answer(option_ids=("approve",), fields={"labels": ["bug"]})
    )
    assert poll_body(with_data) == {
        "executionId": "abc-123",
        "approved": True,
        "data": {"labels": ["bug"]},
    }


def test_a_form_always_returns_data_and_a_written_answer_is_its_text() -> None:
    body = case("valid", "a form")
    written = view(body, Status.ANSWERED, answer(text="staging, after the freeze"))
    submitted = view(body, Status.ANSWERED, answer(option_ids=("approve",)))
    declined = view(body, Status.ANSWERED, answer(option_ids=("deny",), text="not now"))
    assert poll_body(written) == {
        "executionId": "exe-form-1",
        "approved": True,
        "data": {"text": "staging, after the freeze"},
    }
    assert poll_body(submitted) == {"executionId": "exe-form-1", "approved": True, "data": {}}
    assert poll_body(declined) == {
        "executionId": "exe-form-1",
        "approved": False,
        "data": {"text": "not now"},
    }


@pytest.mark.parametrize("status", [Status.EXPIRED, Status.CANCELLED])
def test_closed_without_an_answer_reads_as_not_approved(status: Status) -> None:
    assert poll_body(view(case("valid", "the spec's approval"), status)) == {
        "executionId": "abc-123",
        "approved": False,
    }


def test_resolve_body_is_the_spec_shape() -> None:
    assert resolve_body("abc-123", True) == {
        "executionId": "abc-123",
        "approved": True,
        "resolved": True,
    }


@pytest.mark.parametrize(
    "raw", [b'{"executionId": "\\udc00"}', b'{"approved": Infinity}', b"\xfe", b"{]"]
)
def test_a_body_that_is_no_json_text_is_refused_as_body(raw: bytes) -> None:
    with pytest.raises(PayloadRejected) as exc:
        load_json(raw)
    assert [p.loc for p in exc.value.problems] == ["body"]

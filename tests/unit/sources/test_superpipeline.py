"""SuperPipeline ``elicitation.pending`` v1: the shared corpus, strictness, envelope, mapping."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.shared.cloudevents import CloudEvent, parse_http, parse_nats
from adapters.sources.superpipeline import (
    CE_TYPE,
    SOURCE,
    parse_body,
    to_elicitation,
    workspace_from_subject,
)
from bot.domain.errors import PayloadRejected
from bot.domain.model import (
    AnswerMode,
    Context,
    Elicitation,
    Kind,
    Meaning,
    Option,
    PreviewItem,
    Scope,
)
from tests.unit.sources.superpipeline_fixtures import REFUSED, VALID

TS = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
SUBJECT = "evt.acme.superpipeline.elicitation.pending"
STRUCTURED = {"Content-Type": "application/cloudevents+json; charset=utf-8"}
DATASCHEMA = (
    "https://raw.githubusercontent.com/SuperJackfruitLabs/treaty/main/schemas/"
    "superpipeline/elicitation.pending.v1.json"
)
REFUSED_LOCS = {
    "an elicitation option never asks for a comment": "data.options[2].needsComment",
    "scope is once, run or always": "data.options[0].scope",
    "agentId is required": "data.agentId",
    "freeText has a maxLength": "data.freeText.maxLength",
}


def envelope(data: Any, **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "specversion": "1.0",
        "id": "ce-0001",
        "source": "https://superpipeline.example.org",
        "type": CE_TYPE,
        "subject": SUBJECT,
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "dataschema": DATASCHEMA,
        "data": data,
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not ...}


def via_http(data: Any, **changes: Any) -> Elicitation:
    events, _ = parse_http(STRUCTURED, json.dumps(envelope(data, **changes)).encode())
    return to_elicitation(events[0])


def body(case: str = "options") -> dict[str, Any]:
    return copy.deepcopy(VALID[case])


def locs(exc: pytest.ExceptionInfo[PayloadRejected]) -> list[str]:
    return [p.loc for p in exc.value.problems]


# --- the corpus --------------------------------------------------------------------------------


def test_the_corpus_is_the_one_the_spec_describes() -> None:
    assert set(VALID) == {"options", "free-text", "no-options-no-question", "approval-request"}
    assert set(REFUSED) == set(REFUSED_LOCS)


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_case_parses_the_same_directly_and_through_http(case: str) -> None:
    direct = parse_body(body(case), workspace="acme")
    assert via_http(body(case)) == direct
    assert direct.source == SOURCE
    assert direct.source_id == VALID[case]["elicitationId"]
    assert direct.workspace == "acme"
    assert direct.asker == VALID[case]["agentId"]
    assert direct.created_at == TS
    assert direct.key == f"superpipeline:{VALID[case]['elicitationId']}"


def test_options_case() -> None:
    e = parse_body(body("options"), workspace=None)
    assert e.workspace is None
    assert e.kind is Kind.QUESTION
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert e.title == "Research this"
    assert e.question == "May I run the migration?"
    assert e.max_length is None
    assert e.subject is None
    assert e.approval_request_id is None
    assert e.options == (
        Option(id="allow_once", label="Allow once", meaning=Meaning.APPROVE, scope=Scope.ONCE),
        Option(
            id="allow_always",
            label="Always allow",
            meaning=Meaning.APPROVE,
            scope=Scope.ALWAYS,
            admin_only=True,
        ),
        Option(id="deny", label="Deny", meaning=Meaning.REJECT),
    )
    assert e.context == Context(
        board_id="brd_134a0ddb6d434478",
        board_name="Developer Experience",
        card_id="crd_0f3c9a2b7d4e4a11",
        card_title="Research this",
        run_id="run_0123456789abcdef",
        stage_key="research",
    )
    assert e.deadlines.remind_at is None
    assert e.deadlines.escalate_at is None
    assert e.extra == {
        "boardId": "brd_134a0ddb6d434478",
        "cardId": "crd_0f3c9a2b7d4e4a11",
        "runId": "run_0123456789abcdef",
        "stageKey": "research",
        "elicitationId": "eli_1a2b3c4d5e6f7081",
    }


def test_free_text_case() -> None:
    e = parse_body(body("free-text"), workspace=None)
    assert e.answer_mode is AnswerMode.FREE_TEXT
    assert e.kind is Kind.QUESTION
    assert e.max_length == 2000
    assert e.options == ()
    assert e.question == "Which branch should I base this on?"


def test_no_options_no_question_case_is_answered_by_a_reply() -> None:
    e = parse_body(body("no-options-no-question"), workspace=None)
    assert e.answer_mode is AnswerMode.FREE_TEXT
    assert e.max_length is None
    assert e.question == ""
    assert e.options == ()


def test_approval_request_case() -> None:
    e = via_http(body("approval-request"))
    assert e.workspace == "acme"
    assert e.kind is Kind.APPROVAL
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert e.approval_request_id == "apr_4d5e6f7081920314"
    assert e.title == "Developer Experience"
    assert e.asker == "prn_0123456789abcdef0123"
    assert e.context == Context(board_id=None, board_name="Developer Experience")
    assert [o.id for o in e.options if o.admin_only] == ["allow_always"]
    subject = e.subject
    assert subject is not None
    assert subject.id == "sub_7d6c5b4a39281706"
    assert subject.digest.startswith("sha256:4f2a0c1e")
    assert subject.schema_ == "stk-capability/v1"
    assert subject.revision == 1
    assert subject.expires_at == datetime(2026, 11, 11, 9, 30, tzinfo=UTC)
    assert subject.preview_complete is True
    assert subject.preview == (
        PreviewItem(type="text", label="Post", text="We shipped the decision envelope."),
        PreviewItem(type="field", label="Account", value="@example"),
        PreviewItem(type="link", label="Draft", url="https://example.com/draft"),
    )
    assert e.deadlines.remind_at == datetime(2026, 11, 10, 10, 30, tzinfo=UTC)
    assert e.deadlines.escalate_at is None
    assert e.extra["cardId"] == ""
    assert e.extra["boardId"] is None


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_case_names_the_field(case: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        via_http(copy.deepcopy(REFUSED[case]))
    assert locs(exc) == [REFUSED_LOCS[case]]
    with pytest.raises(PayloadRejected) as direct:
        parse_body(copy.deepcopy(REFUSED[case]), workspace=None)
    assert locs(direct) == [REFUSED_LOCS[case].removeprefix("data.")]


def test_refusal_messages_are_readable() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_body(copy.deepcopy(REFUSED["scope is once, run or always"]), workspace=None)
    assert exc.value.problems[0].message == "must be one of once, run, always"


# --- strictness --------------------------------------------------------------------------------

Change = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Change:
    """A change that sets ``a.b[0].c`` (``...`` deletes it)."""

    def change(document: dict[str, Any]) -> None:
        keys: list[Any] = []
        for part in path.replace("]", "").split("."):
            name, *indexes = part.split("[")
            keys.append(name)
            keys.extend(int(i) for i in indexes)
        target: Any = document
        for key in keys[:-1]:
            target = target[key]
        if value is ...:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value

    return change


def _approval(*changes: Change) -> Change:
    def change(document: dict[str, Any]) -> None:
        document.clear()
        document.update(body("approval-request"))
        for extra in changes:
            extra(document)

    return change


@pytest.mark.parametrize(
    ("change", "loc", "message"),
    [
        (_set("cardTitle", None), "cardTitle", "must not be null"),
        (_set("agentId", None), "agentId", "must not be null"),
        (_set("question", 5), "question", "must be a string"),
        (_set("question", ...), "question", "is required"),
        (_set("options", None), "options", "must not be null"),
        (_set("options", {}), "options", "must be an array"),
        (_set("options[0]", "allow_once"), "options[0]", "must be an object"),
        (_set("event", "elicitation.answered"), "event", 'must be "elicitation.pending"'),
        (_set("event", ...), "event", "is required"),
        (_set("boardId", ...), "boardId", "is required"),
        (_set("boardId", 7), "boardId", "must be a string"),
        (_set("options[1].meaning", "maybe"), "options[1].meaning", "must be one of"),
        (_set("options[1].needsComment", 0), "options[1].needsComment", "must be false"),
        (_set("options[1].needsComment", "false"), "options[1].needsComment", "must be false"),
        (_set("options[1].scope", None), "options[1].scope", "must not be null"),
        (_set("options[1].requires", "admin"), "options[1].requires", '"workspace-admin"'),
        (_set("options[1].label", ...), "options[1].label", "is required"),
        (_set("options[2].id", "allow_once"), "options[2].id", "distinct"),
        (_set("ts", "2026-11-10"), "ts", "RFC 3339"),
        (_set("ts", "2026-11-10T09:30:00"), "ts", "RFC 3339"),
        (_set("freeText", {"maxLength": 0}), "freeText.maxLength", "at least 1"),
        (_set("freeText", {"maxLength": "5"}), "freeText.maxLength", "must be an integer"),
        (_set("freeText", {"maxLength": 5.5}), "freeText.maxLength", "must be an integer"),
        (_set("freeText", None), "freeText", "must not be null"),
        (_set("deadline", {"remindAt": "tomorrow"}), "deadline.remindAt", "RFC 3339"),
        (_set("deadline", {"escalateAt": None}), "deadline.escalateAt", "must not be null"),
        (_set("approvalRequestId", None), "approvalRequestId", "must not be null"),
        (
            _approval(_set("approvalSubject.revision", "1")),
            "approvalSubject.revision",
            "must be an integer",
        ),
        (
            _approval(_set("approvalSubject.revision", True)),
            "approvalSubject.revision",
            "must be an integer",
        ),
        (
            _approval(_set("approvalSubject.revision", -1)),
            "approvalSubject.revision",
            "at least 0",
        ),
        (
            _approval(_set("approvalSubject.previewComplete", 1)),
            "approvalSubject.previewComplete",
            "must be a boolean",
        ),
        (
            _approval(_set("approvalSubject.digest", None)),
            "approvalSubject.digest",
            "must not be null",
        ),
        (
            _approval(_set("approvalSubject.expiresAt", ...)),
            "approvalSubject.expiresAt",
            "is required",
        ),
        (
            _approval(_set("approvalSubject.expiresAt", "soon")),
            "approvalSubject.expiresAt",
            "RFC 3339",
        ),
        (
            _approval(_set("approvalSubject.preview[0].type", "image")),
            "approvalSubject.preview[0].type",
            "must be one of text, field, link",
        ),
        (
            _approval(_set("approvalSubject.preview[0].type", ...)),
            "approvalSubject.preview[0].type",
            "is required",
        ),
        (
            _approval(_set("approvalSubject.preview[1].value", ...)),
            "approvalSubject.preview[1].value",
            "is required",
        ),
        (
            _approval(_set("approvalSubject.preview[2].label", ...)),
            "approvalSubject.preview[2].label",
            "is required",
        ),
        (
            _approval(_set("approvalSubject.preview[0].text", 3)),
            "approvalSubject.preview[0].text",
            "must be a string",
        ),
        (
            _approval(_set("approvalSubject.preview[0].label", None)),
            "approvalSubject.preview[0].label",
            "must not be null",
        ),
        (
            _approval(_set("approvalSubject.preview[1]", [])),
            "approvalSubject.preview[1]",
            "must be an object",
        ),
        (
            _approval(_set("approvalRequestId", "apr_other")),
            "approvalRequestId",
            "must equal elicitationId",
        ),
        (_approval(_set("cardId", "crd_1")), "cardId", 'must be ""'),
        (_approval(_set("runId", "run_1")), "runId", 'must be ""'),
    ],
)
def test_strictness(change: Change, loc: str, message: str) -> None:
    document = body()
    change(document)
    with pytest.raises(PayloadRejected) as exc:
        parse_body(document, workspace=None)
    assert locs(exc) == [loc]
    assert message in exc.value.problems[0].message


@pytest.mark.parametrize(
    "change",
    [
        _approval(_set("boardId", None)),
        _approval(_set("approvalSubject.expiresAt", None)),
        _approval(_set("approvalSubject.preview[0].label", ...)),
        _approval(_set("approvalSubject.preview", [])),
        _approval(_set("approvalSubject.revision", 0)),
        _set("deadline", {}),
        _set("deadline", {"escalateAt": "2026-11-10T12:00:00+01:00"}),
        _set("question", ""),
        _set("boardName", ""),
        _set("options[0].scope", ...),
        _set("ts", "2026-11-10 09:30:00.5+00:00"),
    ],
)
def test_allowed_values(change: Change) -> None:
    document = body()
    change(document)
    parse_body(document, workspace=None)


def test_a_whole_number_with_a_fraction_part_is_an_integer() -> None:
    # The spec's schema types these "integer", and JSON Schema's integer is any number with a
    # zero fractional part: 2000.0 is 2000 (test_strictness refuses 5.5, "5" and true).
    approval = body("approval-request")
    approval["approvalSubject"]["revision"] = 1.0
    subject = parse_body(approval, workspace=None).subject
    assert subject is not None
    assert subject.revision == 1
    assert type(subject.revision) is int
    free_text = body("free-text")
    free_text["freeText"] = {"maxLength": 2000.0}
    e = parse_body(free_text, workspace=None)
    assert e.max_length == 2000
    assert type(e.max_length) is int


def test_every_body_problem_is_reported_at_once() -> None:
    document = body("approval-request")
    document["cardTitle"] = None
    document["options"][0]["scope"] = "forever"
    document["options"][2]["id"] = "allow_once"
    document["approvalSubject"]["revision"] = True
    document["runId"] = "run_1"
    with pytest.raises(PayloadRejected) as exc:
        parse_body(document, workspace=None)
    assert sorted(locs(exc)) == [
        "approvalSubject.revision",
        "cardTitle",
        "options[0].scope",
        "options[2].id",
        "runId",
    ]


def test_unknown_properties_are_ignored_everywhere() -> None:
    document = body("approval-request")
    document["futureField"] = {"anything": [1, 2]}
    document["options"][0]["description"] = "new"
    document["approvalSubject"]["kind"] = "capability"
    document["approvalSubject"]["preview"][1]["format"] = "mono"
    document["deadline"]["expireAt"] = "later"
    document["freeText"] = {"maxLength": 10, "placeholder": "why?"}
    e = parse_body(document, workspace=None)
    assert e.answer_mode is AnswerMode.CHOICE_OR_TEXT
    assert e.max_length == 10
    assert e.subject is not None
    assert len(e.subject.preview) == 3


def test_free_text_with_options_offers_both() -> None:
    document = body("options")
    document["freeText"] = {"maxLength": 280}
    e = parse_body(document, workspace=None)
    assert e.answer_mode is AnswerMode.CHOICE_OR_TEXT
    assert e.max_length == 280


def test_an_approval_subject_alone_makes_an_approval() -> None:
    document = body("options")
    document["approvalSubject"] = body("approval-request")["approvalSubject"]
    e = parse_body(document, workspace=None)
    assert e.kind is Kind.APPROVAL
    assert e.approval_request_id is None


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        via_http([body()])
    assert locs(exc) == ["data"]


# --- envelope ----------------------------------------------------------------------------------


def test_other_type_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        via_http(body(), type="com.superjackfruit.superpipeline.elicitation.answered.v1")
    assert locs(exc) == ["type"]


@pytest.mark.parametrize(
    "subject",
    [
        "evt.acme.superpipeline.elicitation.answered",
        "evt..superpipeline.elicitation.pending",
        "evt.ac.me.superpipeline.elicitation.pending",
        "evt.*.superpipeline.elicitation.pending",
        "evt.>.superpipeline.elicitation.pending",
        "evt.ac me.superpipeline.elicitation.pending",
        "acme",
        "evt.acme.superpipeline.elicitation.pending.",
    ],
)
def test_subject_of_the_wrong_shape_is_refused(subject: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        via_http(body(), subject=subject)
    assert locs(exc) == ["subject"]
    with pytest.raises(PayloadRejected):
        workspace_from_subject(subject)


def test_missing_subject_means_no_workspace() -> None:
    assert via_http(body(), subject=...).workspace is None
    assert workspace_from_subject(None) is None
    assert workspace_from_subject("evt.ws_main-2.superpipeline.elicitation.pending") == "ws_main-2"


def test_missing_data_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        via_http(...)
    assert locs(exc) == ["data"]


def test_envelope_and_body_problems_are_reported_together() -> None:
    document = body()
    del document["agentId"]
    with pytest.raises(PayloadRejected) as exc:
        via_http(document, type="other.type", subject="evt.acme.other")
    assert locs(exc) == ["type", "subject", "data.agentId"]


def test_batch_with_one_bad_elicitation_is_refused_by_index() -> None:
    bad = body()
    bad["options"][0]["needsComment"] = True
    documents = [envelope(body(), id=f"ce-{n}") for n in range(3)]
    documents[1]["data"] = bad
    events, is_batch = parse_http(
        {"content-type": "application/cloudevents-batch+json"}, json.dumps(documents).encode()
    )
    assert is_batch
    problems = []
    for index, ce in enumerate(events):
        try:
            to_elicitation(ce)
        except PayloadRejected as exc:
            problems.extend(exc.prefixed(f"[{index}].").problems)
    assert [p.loc for p in problems] == ["[1].data.options[0].needsComment"]


def test_binary_http_and_nats_deliver_the_same_elicitation() -> None:
    headers = {
        "content-type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": "ce-0001",
        "ce-source": "https%3A%2F%2Fsuperpipeline.example.org",
        "ce-type": CE_TYPE,
        "ce-subject": SUBJECT,
    }
    raw = json.dumps(body("approval-request")).encode()
    from_http = to_elicitation(parse_http(headers, raw)[0][0])
    from_nats_binary = to_elicitation(parse_nats(headers, raw))
    structured = json.dumps(envelope(body("approval-request"))).encode()
    from_nats_structured = to_elicitation(parse_nats(None, structured))
    assert from_http == from_nats_binary == from_nats_structured
    assert from_http.workspace == "acme"


def test_to_elicitation_takes_a_cloud_event_built_by_hand() -> None:
    ce = CloudEvent(
        id="1",
        source="s",
        specversion="1.0",
        type=CE_TYPE,
        subject=None,
        time=None,
        datacontenttype=None,
        dataschema=None,
        data=body("free-text"),
        extensions={},
    )
    assert to_elicitation(ce).answer_mode is AnswerMode.FREE_TEXT


# --- property: any body is an Elicitation or a PayloadRejected ---------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)
_PATHS = st.sampled_from(
    [
        "event",
        "boardId",
        "cardId",
        "agentId",
        "ts",
        "options",
        "options[0]",
        "options[1].id",
        "options[1].needsComment",
        "options[2].scope",
        "approvalRequestId",
        "approvalSubject",
        "approvalSubject.revision",
        "approvalSubject.expiresAt",
        "approvalSubject.preview",
        "approvalSubject.preview[0]",
        "approvalSubject.preview[1].type",
        "deadline",
        "deadline.remindAt",
        "freeText",
    ]
)


@settings(max_examples=300, deadline=None)
@given(changes=st.lists(st.tuples(_PATHS, _JSON | st.just(...)), max_size=4))
def test_any_body_is_an_elicitation_or_refused(changes: list[tuple[str, Any]]) -> None:
    document = body("approval-request")
    for path, value in changes:
        try:
            _set(path, value)(document)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the parent
    problems: list[str] = []
    try:
        e = parse_body(document, workspace=None)
    except PayloadRejected as exc:
        problems = [str(p) for p in exc.problems]
    else:
        assert e.source_id == document["elicitationId"]
        return
    assert problems
    assert all(p.split(": ", 1)[1] for p in problems)

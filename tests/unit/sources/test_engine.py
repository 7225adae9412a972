"""The engine's ask delivery (spec 001): validation, mapping, expiry, route, acceptance."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.shared.jsonbody import load_json
from adapters.sources.common import digest as action_digest
from adapters.sources.engine import (
    MAX_BODY_BYTES,
    NO_DEADLINE_TEXT,
    acceptance,
    delivery_route,
    parse_delivery,
)
from adapters.sources.engine.parse import mention_identity
from adapters.sources.engine.routes import delivery_body
from bot.domain import rules
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import PayloadRejected
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    ElicitationKey,
    Identity,
    Kind,
    Meaning,
    People,
    Refusal,
    RefusalCode,
    RouteMatch,
)
from bot.domain.records import DeliveryState, DeliveryView, Purpose
from bot.domain.refs import ref_from_json

NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
FIXTURES = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "sources" / "engine.json").read_text("utf-8")
)
REFUSED_FIELDS = {
    "id is required": ["id"],
    "id is not empty": ["id"],
    "ask is required": ["ask"],
    "ask is an object": ["ask"],
    "destinations are required": ["destinations"],
    "a destination is web, slack:<id> or matrix:<id>": ["destinations[1]"],
    "followup_seconds is required": ["followup_seconds"],
    "followup_seconds is 0 or 5 to 900": ["followup_seconds"],
    "followup_seconds is at most 900": ["followup_seconds"],
    "followup_seconds is whole seconds": ["followup_seconds"],
    "kind is question, approval or task": ["ask.kind"],
    "choices are strings": ["ask.choices[1]"],
    "a choice is not empty": ["ask.choices[1]"],
    "choices are distinct": ["ask.choices[2]"],
    "an action binds an approval": ["ask.action"],
    "an explicit expiry is within 90 days": ["ask.expires_at"],
    "a bound action approval is never open-ended": ["ask.expires_at"],
    "expires_at is RFC 3339": ["ask.expires_at"],
    "at most five attachments": ["ask.attachment_ids"],
    "blocking is a boolean": ["ask.blocking"],
    "mentions are identities or objects": ["ask.mentions[0]"],
    "an ask shows something": ["ask.body"],
    "the body is an object": ["body"],
}
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


def case(group: str, name: str) -> Any:
    return copy.deepcopy(FIXTURES[group][name])


def locs(exc: pytest.ExceptionInfo[PayloadRejected]) -> list[str]:
    return [p.loc for p in exc.value.problems]


# --- the fixtures -------------------------------------------------------------------------------


def test_every_refused_fixture_has_its_expected_fields() -> None:
    assert set(REFUSED_FIELDS) == set(FIXTURES["refused"])


@pytest.mark.parametrize("name", sorted(FIXTURES["valid"]))
def test_valid_deliveries_parse(name: str) -> None:
    body = case("valid", name)
    request = parse_delivery(body, now=NOW)
    e = request.elicitation
    assert request.id == body["id"] == e.source_id
    assert e.key == f"engine:{body['id']}"
    assert request.destinations == tuple(body["destinations"])
    assert request.route.followup_seconds == body["followup_seconds"]
    assert request.route.destinations == (tuple(body["destinations"]) or ("web",))
    assert e.created_at == NOW
    assert e.extra["id"] == body["id"]


@pytest.mark.parametrize("name", sorted(FIXTURES["refused"]))
def test_refused_deliveries_name_the_field(name: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_delivery(case("refused", name), now=NOW)
    assert locs(exc) == REFUSED_FIELDS[name]


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_delivery(
            {
                "ask": {"kind": "poll", "body": 3, "choices": "yes"},
                "destinations": ["sms:1"],
                "followup_seconds": -1,
            },
            now=NOW,
        )
    assert locs(exc) == [
        "id",
        "destinations[0]",
        "followup_seconds",
        "ask.body",
        "ask.kind",
        "ask.choices",
    ]


# --- body size ----------------------------------------------------------------------------------


def with_body(text: str) -> dict[str, Any]:
    body: dict[str, Any] = case("valid", "a question with choices")
    body["ask"]["body"] = text
    return body


def test_a_body_of_exactly_32_kib_of_utf8_is_accepted() -> None:
    text = "é" * (MAX_BODY_BYTES // 2)  # two bytes each: 16,384 characters, 32,768 bytes
    assert parse_delivery(with_body(text), now=NOW).elicitation.question == text


def test_a_body_over_32_kib_of_utf8_bytes_is_refused_though_short_in_characters() -> None:
    text = "€" * 10_923  # three bytes each: 32,769 bytes in 10,923 characters
    with pytest.raises(PayloadRejected) as exc:
        parse_delivery(with_body(text), now=NOW)
    [problem] = exc.value.problems
    assert problem.loc == "ask.body"
    assert "32,769 bytes" in problem.message
    assert "32,768" in problem.message


# --- mapping ------------------------------------------------------------------------------------


def test_choices_are_the_exact_answer_strings() -> None:
    e = parse_delivery(case("valid", "a question with choices"), now=NOW).elicitation
    assert e.kind is Kind.QUESTION
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    assert [(o.id, o.label, o.meaning) for o in e.options] == [
        ("eu-west-1", "eu-west-1", Meaning.CHOOSE),
        ("us-east-1", "us-east-1", Meaning.CHOOSE),
    ]
    assert e.title == "Which region?"
    assert e.question == "Deploy the **api** service to which region?"
    assert e.context.conversation_id == "cnv_7a1b"
    assert e.asker == "engine"

    chosen = rules.judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("eu-west-1",), via="x"),
        People(),
        NOW,
    )
    assert isinstance(chosen, Answer)
    assert chosen.option_ids == ("eu-west-1",)
    for attempt in (
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("EU-WEST-1",), via="x"),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("maybe",), via="x"),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="eu-west-1", via="x"),
    ):
        refused = rules.judge(e, attempt, People(), NOW)
        assert isinstance(refused, Refusal), attempt
        assert refused.code in (RefusalCode.NOT_OFFERED, RefusalCode.EMPTY)


def test_the_ask_fields_are_kept_for_the_engine() -> None:
    e = parse_delivery(case("valid", "a question with choices"), now=NOW).elicitation
    assert e.extra == {
        "id": "dlv_question_01",
        "kind": "question",
        "expires_at": NO_DEADLINE_TEXT,
        "destinations": ["slack:C0ASK", "matrix:!room:example.org", "web"],
        "followup_seconds": 300,
        "shared_key": "deploy-region",
        "blocking": True,
        "choices": ["eu-west-1", "us-east-1"],
        "mentions": ["slack:U0ALICE", {"id": "matrix:@bob:example.org"}, {"id": "prn_4f2a"}],
        "conversation_id": "cnv_7a1b",
    }


def test_a_bound_action_is_the_approval_subject() -> None:
    body = case("valid", "a bound action approval")
    e = parse_delivery(body, now=NOW).elicitation
    assert e.kind is Kind.APPROVAL
    assert [(o.id, o.meaning) for o in e.options] == [
        ("approve", Meaning.APPROVE),
        ("deny", Meaning.REJECT),
    ]
    assert e.subject is not None
    assert e.subject.digest == action_digest(body["ask"]["action"])
    assert e.subject.expires_at == NOW + timedelta(days=7)
    assert json.loads(e.subject.preview[0].text or "") == body["ask"]["action"]
    # Reordered keys are the same action; another value is another one.
    reordered = dict(reversed(list(body["ask"]["action"].items())))
    assert action_digest(reordered) == e.subject.digest
    assert action_digest({**reordered, "version": "1.4.3"}) != e.subject.digest


def test_an_action_without_kind_is_an_approval() -> None:
    body = case("valid", "a bound action approval")
    del body["ask"]["kind"]
    assert parse_delivery(body, now=NOW).elicitation.kind is Kind.APPROVAL


def test_an_approval_without_choices_offers_approve_and_deny() -> None:
    e = parse_delivery(case("valid", "an approval without choices or action"), now=NOW).elicitation
    assert [(o.id, o.label) for o in e.options] == [("approve", "Approve"), ("deny", "Deny")]
    assert e.subject is None


def test_a_task_without_choices_takes_a_written_answer() -> None:
    e = parse_delivery(
        case("valid", "a task taking a written answer, explicit expiry"), now=NOW
    ).elicitation
    assert e.kind is Kind.TASK
    assert e.answer_mode is AnswerMode.FREE_TEXT
    assert e.options == ()
    assert e.extra["attachment_ids"] == ["att_1", "att_2"]
    assert e.extra["target"] == {"kind": "agent", "id": "agt_ops"}


# --- expiry -------------------------------------------------------------------------------------


def test_an_ordinary_ask_has_no_deadline_by_default() -> None:
    e = parse_delivery(case("valid", "a question with choices"), now=NOW).elicitation
    assert e.deadlines.expires_at is None
    assert e.extra["expires_at"] == "9999-01-01T00:00:00Z"


def test_the_no_deadline_value_given_explicitly_is_no_deadline() -> None:
    e = parse_delivery(case("valid", "the no-deadline value given explicitly"), now=NOW).elicitation
    assert e.deadlines.expires_at is None
    assert e.extra["expires_at"] == NO_DEADLINE_TEXT


def test_a_bound_action_approval_defaults_to_seven_days() -> None:
    e = parse_delivery(case("valid", "a bound action approval"), now=NOW).elicitation
    assert e.deadlines.expires_at == datetime(2026, 11, 17, 9, 30, tzinfo=UTC)
    assert e.extra["expires_at"] == "2026-11-17T09:30:00Z"


def test_an_explicit_expiry_is_kept_in_utc() -> None:
    e = parse_delivery(
        case("valid", "a task taking a written answer, explicit expiry"), now=NOW
    ).elicitation
    assert e.deadlines.expires_at == datetime(2026, 12, 1, 16, 0, tzinfo=UTC)
    assert e.extra["expires_at"] == "2026-12-01T16:00:00Z"


@pytest.mark.parametrize(
    ("offset", "accepted"),
    [(timedelta(days=90), True), (timedelta(days=90, seconds=1), False)],
)
def test_an_explicit_expiry_is_at_most_90_days_ahead(offset: timedelta, accepted: bool) -> None:
    body = case("valid", "a bound action approval")
    body["ask"]["expires_at"] = (NOW + offset).isoformat().replace("+00:00", "Z")
    if accepted:
        e = parse_delivery(body, now=NOW).elicitation
        assert e.deadlines.expires_at == NOW + offset
    else:
        with pytest.raises(PayloadRejected) as exc:
            parse_delivery(body, now=NOW)
        assert locs(exc) == ["ask.expires_at"]


# --- people -------------------------------------------------------------------------------------


def test_the_sender_is_the_asker_and_cannot_answer() -> None:
    body = case("valid", "null optional fields and unknown properties")
    e = parse_delivery(body, now=NOW).elicitation
    assert e.asker == "slack:U0AGENTUSER"
    assert e.title == "Lunch?"
    assert e.question == ""
    sender = Identity(platform="slack", user="U0AGENTUSER")
    refused = rules.judge(
        e, Attempt(shown=SHOWN_WHOLE, respondent=sender, text="yes", via="x"), People(), NOW
    )
    assert isinstance(refused, Refusal)
    assert refused.code is RefusalCode.ASKER


def test_a_sender_inside_the_ask_must_agree_with_the_one_beside_it() -> None:
    body = case("valid", "null optional fields and unknown properties")
    body["ask"]["sender_id"] = "slack:U0SOMEONEELSE"
    with pytest.raises(PayloadRejected) as exc:
        parse_delivery(body, now=NOW)
    assert locs(exc) == ["ask.sender_id"]


def test_mentions_address_chat_people_and_grant_nothing() -> None:
    request = parse_delivery(case("valid", "a question with choices"), now=NOW)
    assert request.route.mention == ("slack:U0ALICE", "matrix:@bob:example.org")
    # Being mentioned makes nobody an admin, an answerer of a withheld option or the asker.
    e = request.elicitation
    assert e.asker == "engine"
    assert all(not o.admin_only for o in e.options)


@pytest.mark.parametrize(
    ("mention", "identity"),
    [
        ("slack:U1", "slack:U1"),
        ({"id": "matrix:@a:b"}, "matrix:@a:b"),
        ({"id": "prn_1"}, None),
        ("web", None),
        ("slack:", None),
        ({"name": "Alice"}, None),
    ],
)
def test_mention_identity(mention: Any, identity: str | None) -> None:
    assert mention_identity(mention) == identity


# --- the route ----------------------------------------------------------------------------------


def test_the_route_is_the_requests_own() -> None:
    route = parse_delivery(case("valid", "a question with choices"), now=NOW).route
    assert route.destinations == ("slack:C0ASK", "matrix:!room:example.org", "web")
    assert route.followup_seconds == 300
    assert route.match == RouteMatch(source="engine")


def test_no_destinations_keep_the_ask_in_the_web_inbox_only() -> None:
    assert delivery_route([], 0).destinations == ("web",)
    body = case("valid", "a task taking a written answer, explicit expiry")
    assert parse_delivery(body, now=NOW).route.destinations == ("web",)


def test_followup_seconds_as_a_whole_float_is_accepted() -> None:
    body = case("valid", "a question with choices")
    body["followup_seconds"] = 5.0
    assert parse_delivery(body, now=NOW).route.followup_seconds == 5


# --- acceptance ---------------------------------------------------------------------------------


def row(position: int, state: str, destination: str = "", **more: Any) -> DeliveryView:
    return DeliveryView(
        id=position,
        elicitation_key=ElicitationKey("engine:d"),
        destination=destination or f"slack:C{position}",
        position=position,
        purpose=Purpose(more.pop("purpose", "primary")),
        state=DeliveryState(state),
        ref=ref_from_json(more.pop("ref", None)),
        posted_at=None,
        created_at=NOW,
        error=more.pop("error", None),
    )


@pytest.mark.parametrize(
    ("states", "followup", "expected", "positions"),
    [
        (["planned", "waiting"], 300, "waiting", []),
        (["posting", "waiting"], 300, "waiting", []),
        (["posted", "waiting"], 300, "accepted", [0]),
        (["posted", "posted"], 300, "accepted", [0]),
        (["failed", "waiting"], 300, "waiting", []),
        (["failed", "posting"], 300, "waiting", []),
        (["failed", "posted"], 300, "accepted", [1]),
        (["failed", "failed"], 300, "failed", [0, 1]),
        (["failed"], 0, "failed", [0]),
        (["posted", "posting"], 0, "waiting", []),
        (["posted", "failed"], 0, "accepted", [0]),
        (["failed", "posted"], 0, "accepted", [1]),
        (["posted", "posted"], 0, "accepted", [0, 1]),
    ],
)
def test_acceptance(states: list[str], followup: int, expected: str, positions: list[int]) -> None:
    rows = [row(i, s) for i, s in reversed(list(enumerate(states)))]
    rows.append(row(9, "posted", purpose="escalation"))
    result = acceptance(rows, followup)
    assert result.state == expected
    assert [r.position for r in result.deliveries] == positions


def test_delivery_body_is_the_platform_message_id() -> None:
    slack = row(0, "posted", ref={"channel": "C1", "ts": "1.2", "key": "C1/1.2"})
    web = row(1, "posted", "web", ref={"inbox": "engine:d"})
    assert delivery_body(slack, "http://x/#engine:d") == {
        "destination": "slack:C0",
        "ref": {"channel": "C1", "ts": "1.2"},
    }
    assert delivery_body(web, "http://x/#engine:d") == {
        "destination": "web",
        "ref": {"inbox": "engine:d", "url": "http://x/#engine:d"},
    }


# --- the body as JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"id": "\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"followup_seconds": NaN}', "NaN is not a JSON value"),
        (b"\xff{}", "not valid UTF-8"),
        (b"{", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, ""),
    ],
)
def test_a_body_that_is_no_json_text_is_refused_as_body(raw: bytes, message: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        load_json(raw)
    [problem] = exc.value.problems
    assert problem.loc == "body"
    assert message in problem.message


def test_json_text_is_loaded() -> None:
    assert load_json('{"id": "dlv_é"}'.encode()) == {"id": "dlv_é"}

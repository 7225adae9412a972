"""Pinework questions (spec 003): liberal reading, mapping, pages, closing, exact write-backs."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.pinework import parse
from adapters.sources.pinework.sink import PineworkSecretSink, PineworkSink
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import PayloadRejected, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    Identity,
    Kind,
    People,
    Refusal,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.replies import ChoiceReply, HelpReply, MultiChoiceReply, parse_reply
from bot.domain.rules import judge

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "sources" / "pinework.json").read_text(
        encoding="utf-8"
    )
)
VALID: dict[str, Any] = FIXTURES["valid"]
REFUSED: dict[str, Any] = FIXTURES["refused"]
BASE = "https://pinework.example.org/"
NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
TOKEN = "pw-token-CANARY-0123456789"
ACCOUNT = parse.account_key(BASE, "ws_main")
SECRET = "sk_live_CANARY_secret_value_42"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


def question(case: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(VALID[case])
    data.update(changes)
    return data


def mapped(case: str, **changes: Any) -> Any:
    q = parse.parse_question(question(case, **changes))
    return parse.to_elicitation(q, base_url=BASE, workspace="ws_main", now=NOW)


def view(case: str, status: Status = Status.ANSWERED, answer: Answer | None = None) -> PromptView:
    return PromptView(mapped(case), status, answer, 2, "http://x/#k", NOW)


def answer(*options: str, text: str | None = None, **more: Any) -> Answer:
    fields: dict[str, Any] = {"respondent": "slack:U0ALICE", "via": "slack:C1", "at": NOW}
    fields.update(more)
    return Answer(option_ids=options, text=text, **fields)


# --- reading -----------------------------------------------------------------------------------


def test_a_free_text_question_maps_field_for_field() -> None:
    e = mapped("free_text")
    assert (e.source, e.source_id, e.key) == (
        "pinework",
        "qst_AbCdEfGh12345678",
        "pinework:qst_AbCdEfGh12345678",
    )
    assert e.workspace == "ws_main"
    assert (e.context.task_id, e.context.run_id, e.context.conversation_id) == (
        "tsk_PIN42",
        "run_7f3a9c",
        None,
    )
    assert e.asker == "agt_9e8d7c6b5a493827"
    assert e.kind is Kind.QUESTION
    assert e.question == "Ship the drop in this PR or the next one?"
    assert e.answer_mode is AnswerMode.FREE_TEXT
    assert e.options == ()
    assert e.created_at == datetime(2026, 11, 10, 9, 0, tzinfo=UTC)
    assert e.extra == {
        "account": "https://pinework.example.org#ws_main",
        "baseUrl": "https://pinework.example.org",
        "questionId": "qst_AbCdEfGh12345678",
        "answerMode": "free_text",
        "sessionId": "ses_19b2",
    }


@pytest.mark.parametrize(
    ("case", "mode"),
    [
        ("free_text", AnswerMode.FREE_TEXT),
        ("single_select", AnswerMode.SINGLE_CHOICE),
        ("multi_select", AnswerMode.MULTI_CHOICE),
        ("secret_input", AnswerMode.SECRET),
    ],
)
def test_answer_modes_map(case: str, mode: AnswerMode) -> None:
    assert mapped(case).answer_mode is mode


def test_select_options_keep_their_keys_and_labels() -> None:
    e = mapped("multi_select")
    assert [(o.id, o.label) for o in e.options] == [
        ("a", "Unit tests"),
        ("b", "Integration tests"),
        ("c", "Load test"),
    ]
    assert e.question == "Which checks should run before the merge?", "from `question`"


def test_the_text_comes_from_text_then_question_then_body() -> None:
    assert mapped("system_asked_with_extras").question == "Keep the paused run?"
    assert mapped("free_text", text=None, question="Q?", body="B?").question == "Q?"
    assert mapped("free_text", text=None, body="B?").question == "B?"
    assert mapped("free_text", text=None).question == ""


def test_a_secret_question_shows_what_is_asked_never_a_value() -> None:
    e = mapped("secret_input")
    assert e.answer_mode is AnswerMode.SECRET
    assert e.max_length == parse.SECRET_MAX
    assert e.question.startswith("The deploy needs a Stripe key.\n\n**Secret requested**\n")
    for line in (
        "- Name: stripe-live",
        "- Provider: stripe",
        "- Given to the agent as: STRIPE_API_KEY",
    ):
        assert line in e.question


def test_reading_is_liberal() -> None:
    e = mapped("system_asked_with_extras")
    assert [(o.id, o.label) for o in e.options] == [("keep", "Keep it"), ("drop", "drop")]
    assert e.asker == "pinework:system", "a system ask has no agent id"
    assert e.created_at == NOW, "an unreadable createdAt falls back to now"
    assert e.workspace == "ws_main", "no workspaceId: the configured workspace"


@pytest.mark.parametrize("reason", sorted(REFUSED))
def test_unusable_questions_are_refused_naming_the_field(reason: str) -> None:
    case = REFUSED[reason]
    with pytest.raises(PayloadRejected) as exc:
        parse.parse_question(case["question"])
    assert case["field"] in [p.loc for p in exc.value.problems], exc.value.problems


def test_the_inbound_id_changes_only_when_what_we_show_changes() -> None:
    first = parse.inbound_id(mapped("single_select"))
    assert first.startswith("qst_Single0000000001:")
    assert parse.inbound_id(mapped("single_select", updatedAt="2026-11-10T10:00:00Z")) == first
    assert parse.inbound_id(mapped("single_select", unknownField=1)) == first
    unreadable = parse.parse_question(question("single_select", createdAt="yesterday"))
    later = parse.to_elicitation(
        unreadable, base_url=BASE, workspace="ws_main", now=NOW.replace(hour=11)
    )
    assert parse.inbound_id(later) == parse.inbound_id(
        mapped("single_select", createdAt="yesterday")
    )
    assert parse.inbound_id(mapped("single_select", text="Which region, then?")) != first
    options = [{"key": "eu", "label": "Europe"}, {"key": "ap", "label": "Asia"}]
    assert parse.inbound_id(mapped("single_select", options=options)) != first


# --- pages -------------------------------------------------------------------------------------


def test_a_page_follows_next_cursor() -> None:
    page = parse.read_page({"data": [{"id": "qst_1"}], "nextCursor": "cur_2"})
    assert (len(page.questions), page.starting_after) == (1, "cur_2")
    assert (
        parse.read_page({"data": [{"id": "qst_1"}] * 100, "nextCursor": None}).starting_after
        is None
    )


def test_a_page_without_cursor_continues_after_the_last_id_when_more() -> None:
    items = [{"id": f"qst_{i}"} for i in range(100)]
    assert parse.read_page({"items": items}).starting_after == "qst_99"
    assert parse.read_page({"items": items[:40]}).starting_after is None
    assert parse.read_page({"items": items[:3], "hasMore": True}).starting_after == "qst_2"
    assert parse.read_page({"data": items, "hasMore": False}).starting_after is None
    assert parse.read_page(items[:2]).starting_after is None


@pytest.mark.parametrize("body", [{"questions": []}, "nope", None, {"data": "x"}])
def test_a_page_without_questions_is_an_error(body: Any) -> None:
    with pytest.raises(ValueError, match="'data' or 'items'"):
        parse.read_page(body)


# --- thread replies and the answer body ----------------------------------------------------------


def test_a_thread_reply_on_a_single_select_must_name_one_option() -> None:
    """The answer route takes exactly one key for single_select (spec, "Answer modes"): a reply
    naming none is told how to answer; one naming an option answers with its key."""
    e = mapped("single_select")
    assert e.answer_mode is AnswerMode.SINGLE_CHOICE
    reply = parse_reply(e, "Go with Europe, but only after 18:00")
    assert isinstance(reply, HelpReply)
    assert "one option" in reply.message
    assert isinstance(parse_reply(e, "europe"), ChoiceReply)
    written = judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Europe", via="slack:C1"),
        People(),
        NOW,
    )
    assert isinstance(written, Refusal)
    assert written.message == "Choose one of the options."


def test_a_multi_select_reply_takes_a_note_after_the_options() -> None:
    e = mapped("multi_select")
    assert e.takes_note
    first, second = e.options[0], e.options[1]
    reply = parse_reply(e, f"1, {second.label}\nbut only after 18:00")
    assert isinstance(reply, MultiChoiceReply)
    assert reply == MultiChoiceReply((first.id, second.id), "but only after 18:00")
    assert isinstance(parse_reply(e, "no option here\nnote"), HelpReply)


@pytest.mark.parametrize(
    ("case", "given", "body"),
    [
        ("free_text", answer(text="Next one"), {"text": "Next one", "selected": None}),
        ("single_select", answer("eu"), {"text": None, "selected": ["eu"]}),
        (
            "multi_select",
            answer("a", "c", text="skip b"),
            {"text": "skip b", "selected": ["a", "c"]},
        ),
        ("multi_select", answer("b"), {"text": None, "selected": ["b"]}),
    ],
)
def test_the_answer_body_is_exact(case: str, given: Answer, body: dict[str, Any]) -> None:
    assert parse.answer_body(view(case, Status.ANSWERED, given)) == {"answer": body}


@pytest.mark.parametrize(
    ("status", "given"),
    [
        (Status.PENDING, None),
        (Status.CANCELLED, answer(text="[system:run_ended]", respondent="system", via="pinework")),
        (
            Status.ANSWERED,
            answer(text="from pinework", respondent="pinework:usr_bob", via="pinework"),
        ),
        (Status.ANSWERED, answer(secret=True)),
        (Status.EXPIRED, None),
    ],
)
def test_nothing_is_written_back_that_pinework_has_or_must_not_get(
    status: Status, given: Answer | None
) -> None:
    assert parse.answer_body(view("free_text", status, given)) is None


# --- resolved upstream -------------------------------------------------------------------------


def test_an_open_question_closes_nothing() -> None:
    q = parse.parse_question(question("free_text"))
    assert parse.upstream_close(q, mapped("free_text"), NOW) is None


def test_an_answer_given_in_pinework_closes_ours_as_answered_there() -> None:
    q = parse.parse_question(
        question(
            "multi_select",
            status="resolved",
            answer={"text": "b only", "selected": ["b"]},
            answeredBy={"type": "user", "id": "usr_bob"},
            answeredAt="2026-11-10T09:20:00Z",
        )
    )
    status, closing = parse.upstream_close(q, mapped("multi_select"), NOW) or (None, None)
    assert status is Status.ANSWERED
    assert closing == Answer(
        option_ids=("b",),
        text="b only",
        respondent="pinework:usr_bob",
        principal="usr_bob",
        display_name="usr_bob",
        via="pinework",
        at=datetime(2026, 11, 10, 9, 20, tzinfo=UTC),
    )


def test_a_system_close_cancels_ours_with_its_reason() -> None:
    q = parse.parse_question(
        question(
            "free_text",
            status="resolved",
            answer={"text": "[system:run_ended]", "selected": None},
            answeredBy=None,
            updatedAt="2026-11-10T09:25:00Z",
        )
    )
    status, closing = parse.upstream_close(q, mapped("free_text"), NOW) or (None, None)
    assert status is Status.CANCELLED
    assert closing is not None
    assert (closing.text, closing.respondent, closing.via) == (
        "[system:run_ended]",
        "system",
        "pinework",
    )
    assert closing.at == datetime(2026, 11, 10, 9, 25, tzinfo=UTC)


def test_a_secret_question_answered_or_closed_upstream_keeps_no_text() -> None:
    e = mapped("secret_input")
    answered = parse.parse_question(
        question(
            "secret_input",
            status="resolved",
            answer={"secretId": "sec_1"},
            answeredBy={"id": "usr_bob"},
        )
    )
    status, closing = parse.upstream_close(answered, e, NOW) or (None, None)
    assert status is Status.ANSWERED
    assert closing is not None
    assert (closing.secret, closing.text) == (True, None)
    closed = parse.parse_question(question("secret_input", status="resolved", answer=None))
    status, closing = parse.upstream_close(closed, e, NOW) or (None, None)
    assert status is Status.CANCELLED
    assert closing is not None
    assert closing.text == parse.SYSTEM_CLOSE


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"error": {"code": "question_resolved", "message": "x"}}, "question_resolved"),
        ({"code": "invalid_answer"}, "invalid_answer"),
        ({"error": "answer_mode_mismatch"}, "answer_mode_mismatch"),
        ({"errors": [{"code": "invalid_option_key"}]}, "invalid_option_key"),
        ({"detail": "nope"}, None),
        ([], None),
    ],
)
def test_error_codes_are_read_from_any_usual_shape(body: Any, code: str | None) -> None:
    assert parse.error_code(body) == code


# --- the sinks ---------------------------------------------------------------------------------


class Upstream:
    """A scripted Pinework for MockTransport: replies in order; records every request."""

    def __init__(self, *replies: tuple[int, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status, body = self.replies.pop(0) if self.replies else (200, {})
        return httpx.Response(status, json=body, headers={"Retry-After": "3"})


async def write_back(upstream: Upstream, v: PromptView, key: str = "elicitbot:k:closed") -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
        await PineworkSink(client, {ACCOUNT: TOKEN}).deliver(v, idempotency_key=key)


async def send_secret(upstream: Upstream, v: PromptView, value: str = SECRET) -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as client:
        await PineworkSecretSink(client, {ACCOUNT: TOKEN}).deliver_secret(
            v, value, idempotency_key="elicitbot:k:secret"
        )


async def test_the_answer_route_gets_the_exact_body_token_and_idempotency_key() -> None:
    upstream = Upstream((200, {"question": {}}))
    await write_back(
        upstream, view("single_select", answer=answer("us")), key="elicitbot:pinework:q:closed"
    )
    [sent] = upstream.requests
    assert sent.method == "POST"
    assert (
        str(sent.url) == "https://pinework.example.org/api/v1/questions/qst_Single0000000001/answer"
    )
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["Idempotency-Key"] == "elicitbot:pinework:q:closed"
    assert json.loads(sent.content) == {"answer": {"text": None, "selected": ["us"]}}


async def test_nothing_to_write_sends_nothing() -> None:
    upstream = Upstream()
    await write_back(upstream, view("free_text", Status.CANCELLED))
    await write_back(upstream, view("secret_input", answer=answer(secret=True)))
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [
        (400, "invalid_option_key", "not one of the question's options"),
        (400, "answer_mode_mismatch", "does not fit the question's answer mode"),
        (400, "invalid_answer", "must not be empty"),
        (403, "agent_cannot_answer_question", "a person's token"),
        (404, "question_not_found", "gone from Pinework"),
        (409, "question_needs_secret", "secret route"),
        (401, None, "HTTP 401"),
    ],
)
async def test_refusals_fail_for_good_with_a_sentence(
    status: int, code: str | None, words: str
) -> None:
    upstream = Upstream((status, {"error": {"code": code}} if code else {}))
    with pytest.raises(PermanentDeliveryError) as exc:
        await write_back(upstream, view("free_text", answer=answer(text="ship")))
    assert words in str(exc.value)
    if code:
        assert code in str(exc.value)
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_5xx_and_429_are_retried_later(status: int) -> None:
    with pytest.raises(TransientDeliveryError) as exc:
        await write_back(Upstream((status, {})), view("free_text", answer=answer(text="ship")))
    assert exc.value.retry_after == 3.0


async def test_a_connection_error_is_retried_later() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(TransientDeliveryError, match="unreachable"):
            await PineworkSink(client, {ACCOUNT: TOKEN}).deliver(
                view("free_text", answer=answer(text="ship")), idempotency_key="k"
            )


def resolved(text: str | None, selected: list[str] | None, by: str | None) -> dict[str, Any]:
    return {
        "question": question(
            "multi_select",
            status="resolved",
            answer={"text": text, "selected": selected},
            answeredBy={"type": "user", "id": by} if by else None,
        )
    }


async def test_question_resolved_with_our_answer_already_there_is_done() -> None:
    upstream = Upstream(
        (409, {"error": {"code": "question_resolved"}}),
        (200, resolved("skip b", ["a", "c"], "usr_elicitbot")),
    )
    await write_back(upstream, view("multi_select", answer=answer("a", "c", text="skip b")))
    assert [(r.method, r.url.path) for r in upstream.requests] == [
        ("POST", "/api/v1/questions/qst_Multi00000000001/answer"),
        ("GET", "/api/v1/questions/qst_Multi00000000001"),
    ]
    assert upstream.requests[1].headers["Authorization"] == f"Bearer {TOKEN}"


async def test_question_resolved_by_someone_else_takes_their_answer_and_says_so() -> None:
    upstream = Upstream(
        (409, {"error": {"code": "question_resolved"}}), (200, resolved(None, ["b"], "usr_bob"))
    )
    with pytest.raises(PermanentDeliveryError) as exc:
        await write_back(upstream, view("multi_select", answer=answer("a")))
    assert "resolved in Pinework by usr_bob" in str(exc.value)
    assert "“b”" in str(exc.value)


async def test_question_resolved_by_the_system_says_so() -> None:
    upstream = Upstream(
        (409, {"error": {"code": "question_resolved"}}),
        (200, resolved("[system:run_ended]", None, None)),
    )
    with pytest.raises(PermanentDeliveryError, match=r"by the system .*\[system:run_ended\]"):
        await write_back(upstream, view("multi_select", answer=answer("a")))


async def test_question_resolved_but_unreadable_is_retried() -> None:
    upstream = Upstream((409, {"error": {"code": "question_resolved"}}), (500, {}))
    with pytest.raises(TransientDeliveryError):
        await write_back(upstream, view("multi_select", answer=answer("a")))


async def test_an_account_no_longer_configured_fails_for_good() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(Upstream())) as client:
        with pytest.raises(PermanentDeliveryError, match=r"no \[\[sources\.pinework\]\] entry"):
            await PineworkSink(client, {}).deliver(
                view("free_text", answer=answer(text="x")), idempotency_key="k"
            )


async def test_the_secret_goes_to_the_secret_route_only() -> None:
    upstream = Upstream((200, {}))
    await send_secret(upstream, view("secret_input", Status.PENDING))
    [sent] = upstream.requests
    assert (sent.method, str(sent.url)) == (
        "POST",
        "https://pinework.example.org/api/v1/questions/qst_Secret000000001/secret",
    )
    assert json.loads(sent.content) == {"value": SECRET}
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["Idempotency-Key"] == "elicitbot:k:secret"


@pytest.mark.parametrize(
    ("status", "code", "error", "words"),
    [
        (409, "question_resolved", PermanentDeliveryError, "already resolved"),
        (409, "question_not_secret_input", PermanentDeliveryError, "does not ask for a secret"),
        (409, "secret.duplicate_name", PermanentDeliveryError, "already exists"),
        (409, "secret_provider_unbrokerable", PermanentDeliveryError, "no longer broker"),
        (409, "secret_input_requires_agent", PermanentDeliveryError, "no longer exists"),
        (403, "http_exception", PermanentDeliveryError, "refused elicitbot's credential"),
        (404, "question_not_found", PermanentDeliveryError, "gone from Pinework"),
        (503, None, TransientDeliveryError, "HTTP 503"),
    ],
)
async def test_secret_route_errors_never_carry_the_secret(
    status: int, code: str | None, error: type[Exception], words: str
) -> None:
    upstream = Upstream((status, {"error": {"code": code}} if code else {}))
    with pytest.raises(error) as exc:
        await send_secret(upstream, view("secret_input", Status.PENDING))
    assert words in str(exc.value)
    assert SECRET not in str(exc.value)
    assert SECRET not in repr(exc.value.__cause__) + repr(exc.value.__context__)


async def test_a_secret_connection_error_carries_no_request() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(TransientDeliveryError) as exc:
            await PineworkSecretSink(client, {ACCOUNT: TOKEN}).deliver_secret(
                view("secret_input", Status.PENDING), SECRET, idempotency_key="k"
            )
    assert exc.value.__cause__ is None
    assert exc.value.__suppress_context__


@pytest.mark.parametrize("value", ["", "x" * (parse.SECRET_MAX + 1)])
async def test_a_secret_outside_1_to_10000_characters_is_not_sent(value: str) -> None:
    upstream = Upstream()
    with pytest.raises(PermanentDeliveryError, match="1 to 10,000"):
        await send_secret(upstream, view("secret_input", Status.PENDING), value)
    assert upstream.requests == []


async def test_a_secret_for_another_mode_is_not_sent() -> None:
    upstream = Upstream()
    with pytest.raises(PermanentDeliveryError, match="does not ask for a secret"):
        await send_secret(upstream, view("free_text", Status.PENDING))
    assert upstream.requests == []


def test_the_sinks_never_show_their_tokens() -> None:
    sink = PineworkSink(httpx.AsyncClient(), {ACCOUNT: TOKEN})
    assert TOKEN not in repr(sink)
    assert ACCOUNT in repr(sink)

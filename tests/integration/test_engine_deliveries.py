"""``POST /v1/deliveries`` end to end on SQLite and PostgreSQL: the reply comes after the chat
platform accepted the post, with its message refs; the same id posts nothing new; errors.

The outbox dispatcher runs in the background (as in ``serve``) and posts to recording fakes while
the route waits; time for backoff is the test's FakeClock, so a retry happens only when the test
moves the clock.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.engine import NO_DEADLINE_TEXT, EngineSink, engine_router
from adapters.sources.engine.parse import MAX_BODY_BYTES
from bot.app.http import Runtime, authorised, create_app
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import (
    Answer,
    Attempt,
    ElicitationKey,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Route,
    RouteMatch,
    Status,
)
from bot.domain.ports import AnswerSink
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeWebhook
from tests.unit.sources.test_engine import REFUSED_FIELDS

FIXTURES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "sources" / "engine.json").read_text("utf-8")
)
TOKEN = "engine-intake-token-93ab"
PROBLEM = "application/problem+json"
SLACK = "slack:C0ASK"
MATRIX = "matrix:!room:example.org"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
CONFIG_ROUTE = Route(destinations=("slack:C0CONFIG",))
"""A catch-all config route: engine asks naming destinations ignore it and follow their own;
an ask with ``"destinations": []`` takes it ("in the workspace only")."""
OTHER_ROUTE = Route(match=RouteMatch(source="superpipeline"), destinations=("slack:C0SP",))
"""A config route that matches no engine ask."""
WAIT_S = 10.0


@dataclass
class Rig:
    store: SqlStore
    clock: FakeClock
    slack: FakeChat
    matrix: FakeChat
    service: Service
    dispatcher: Dispatcher
    client: httpx.AsyncClient


@pytest.fixture
async def rig(store: SqlStore, clock: FakeClock) -> AsyncIterator[Rig]:
    async for r in make_rig(store, clock, WAIT_S):
        yield r


async def make_rig(
    store: SqlStore,
    clock: FakeClock,
    wait_seconds: float,
    sinks: Mapping[str, AnswerSink] | None = None,
    *,
    routes: Sequence[Route] = (CONFIG_ROUTE,),
    platforms: Sequence[str] | None = ("slack", "matrix"),
    running: Sequence[str] = ("slack", "matrix"),
) -> AsyncIterator[Rig]:
    """``running``: the chat platforms the outbox has; ``platforms``: those the route is told of."""
    slack, matrix = FakeChat("slack"), FakeChat("matrix")
    chats = {"slack": slack, "matrix": matrix}
    dispatcher = Dispatcher(
        store,
        clock,
        {name: chat for name, chat in chats.items() if name in running},
        sinks or {},
        lambda key: f"http://inbox/#{key}",
    )
    service = Service(
        store,
        clock,
        People(),
        list(routes),
        on_change=dispatcher.wake,
        link_for=lambda key: f"http://inbox/#{key}",
    )
    runtime = Runtime(store=store, elicitations=service, intake_token=TOKEN)
    runtime.routers.append(
        engine_router(
            service,
            lambda request: authorised(runtime, request),
            wait_seconds=wait_seconds,
            clock=clock,
            platforms=platforms,
        )
    )
    stop = asyncio.Event()
    task = asyncio.create_task(dispatcher.run(stop, idle_seconds=0.02))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(runtime)),
            base_url="http://elicitbot.test",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client:
            yield Rig(store, clock, slack, matrix, service, dispatcher, client)
    finally:
        stop.set()
        dispatcher.wake()
        await asyncio.wait_for(task, timeout=10)


def delivery(name: str = "a question with choices", **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(FIXTURES["valid"][name])
    body.update(changes)
    return body


async def nothing_stored(rig: Rig) -> None:
    for table in ("elicitation", "inbound", "delivery", "outbox", "audit", "deadline"):
        assert await rig.store.count(table) == 0, table


# --- native acceptance ------------------------------------------------------------------------


async def test_the_reply_comes_after_the_first_platform_accepted_with_its_ref(rig: Rig) -> None:
    response = await rig.client.post("/v1/deliveries", json=delivery())

    assert response.status_code == 200, response.text
    assert response.json() == {
        "id": "dlv_question_01",
        "elicitation": "engine:dlv_question_01",
        "deliveries": [
            {"destination": SLACK, "ref": {"channel": "C0ASK", "ts": "1700000000.000001"}}
        ],
    }
    [post] = rig.slack.posted
    assert post.destination == SLACK
    assert post.view.elicitation.title == "Which region?"
    # The follow-ups wait their turn; the config's route is not used.
    assert rig.matrix.posted == []
    rows = await rig.store.deliveries(ElicitationKey("engine:dlv_question_01"))
    assert [(r.destination, r.state) for r in rows] == [
        (SLACK, "posted"),
        (MATRIX, "waiting"),
        ("web", "waiting"),
    ]
    stored = await rig.store.get(ElicitationKey("engine:dlv_question_01"))
    assert stored is not None
    assert stored.route.destinations == (SLACK, MATRIX, "web")
    assert stored.route.followup_seconds == 300


async def test_the_same_id_again_returns_the_same_body_and_posts_nothing(rig: Rig) -> None:
    first = await rig.client.post("/v1/deliveries", json=delivery())
    again = await rig.client.post("/v1/deliveries", json=delivery())
    changed = await rig.client.post(
        "/v1/deliveries",
        json=delivery(destinations=[MATRIX], followup_seconds=0, ask={"title": "Other?"}),
    )

    assert first.status_code == again.status_code == changed.status_code == 200
    assert again.json() == first.json()
    assert changed.json() == first.json()
    assert len(rig.slack.posted) == 1
    assert rig.matrix.posted == []
    assert await rig.store.count("elicitation") == 1
    assert await rig.store.count("delivery") == 3


async def test_without_follow_up_every_destination_is_posted_and_listed(rig: Rig) -> None:
    body = delivery(destinations=[MATRIX, SLACK], followup_seconds=0)

    response = await rig.client.post("/v1/deliveries", json=body)

    assert response.status_code == 200
    assert response.json()["deliveries"] == [
        {"destination": MATRIX, "ref": {"room_id": "!room:example.org", "event_id": "$fake000001"}},
        {"destination": SLACK, "ref": {"channel": "C0ASK", "ts": "1700000000.000001"}},
    ]
    assert len(rig.matrix.posted) == len(rig.slack.posted) == 1


async def test_no_destinations_take_the_matching_config_route(rig: Rig) -> None:
    name = "a task taking a written answer, explicit expiry"

    response = await rig.client.post("/v1/deliveries", json=delivery(name))

    assert response.status_code == 200, response.text
    assert response.json() == {
        "id": "dlv_task_01",
        "elicitation": "engine:dlv_task_01",
        "deliveries": [
            {
                "destination": "slack:C0CONFIG",
                "ref": {"channel": "C0CONFIG", "ts": "1700000000.000001"},
            }
        ],
    }
    rows = await rig.store.deliveries(ElicitationKey("engine:dlv_task_01"))
    assert [(r.destination, r.state) for r in rows] == [("slack:C0CONFIG", "posted")]
    assert rig.matrix.posted == []


async def test_no_destinations_and_no_matching_route_keep_the_ask_in_the_web_inbox(
    store: SqlStore, clock: FakeClock
) -> None:
    name = "a task taking a written answer, explicit expiry"
    async for rig in make_rig(store, clock, WAIT_S, routes=[OTHER_ROUTE]):
        response = await rig.client.post("/v1/deliveries", json=delivery(name))

        assert response.status_code == 200, response.text
        assert response.json() == {
            "id": "dlv_task_01",
            "elicitation": "engine:dlv_task_01",
            "deliveries": [
                {
                    "destination": "web",
                    "ref": {
                        "inbox": "engine:dlv_task_01",
                        "url": "http://inbox/#engine:dlv_task_01",
                    },
                }
            ],
        }
        rows = await rig.store.deliveries(ElicitationKey("engine:dlv_task_01"))
        assert [(r.destination, r.state) for r in rows] == [("web", "posted")]
        assert rig.slack.posted == rig.matrix.posted == []


# --- failures -----------------------------------------------------------------------------------


async def test_a_permanently_failed_only_destination_is_a_502_and_the_ask_stays(rig: Rig) -> None:
    rig.slack.fail_next(1, PermanentDeliveryError("channel_not_found"), methods=["post"])
    body = delivery(destinations=[SLACK], followup_seconds=0)

    response = await rig.client.post("/v1/deliveries", json=body)
    again = await rig.client.post("/v1/deliveries", json=body)

    assert response.status_code == again.status_code == 502
    assert response.headers["content-type"].startswith(PROBLEM)
    problem = response.json()
    assert problem["status"] == 502
    assert problem["errors"] == [{"field": "destinations[0]", "message": "channel_not_found"}]
    assert (problem["id"], problem["elicitation"]) == ("dlv_question_01", "engine:dlv_question_01")
    assert again.json() == problem
    assert [c.method for c in rig.slack.calls] == ["post"]
    stored = await rig.store.get(ElicitationKey("engine:dlv_question_01"))
    assert stored is not None
    assert stored.status is Status.PENDING


async def test_a_platform_this_deployment_does_not_run_is_a_422_and_nothing_is_stored(
    store: SqlStore, clock: FakeClock
) -> None:
    async for rig in make_rig(
        store, clock, WAIT_S, routes=[OTHER_ROUTE], platforms=["matrix"], running=["matrix"]
    ):
        body = delivery(destinations=[MATRIX, "slack:C1"], followup_seconds=0)

        response = await rig.client.post("/v1/deliveries", json=body)
        again = await rig.client.post("/v1/deliveries", json=body)

        assert response.status_code == again.status_code == 422
        assert response.headers["content-type"].startswith(PROBLEM)
        assert response.json()["errors"] == [
            {"field": "destinations[1]", "message": "slack is not configured"}
        ]
        assert again.json() == response.json()
        await nothing_stored(rig)
        # The same id, asked again "in the workspace only", is a new ask and is delivered.
        workspace = await rig.client.post(
            "/v1/deliveries", json=delivery(destinations=[], followup_seconds=0)
        )
        assert workspace.status_code == 200, workspace.text
        assert [d["destination"] for d in workspace.json()["deliveries"]] == ["web"]


async def test_an_unconfigured_platform_found_by_the_outbox_is_a_422_every_time(
    store: SqlStore, clock: FakeClock
) -> None:
    async for rig in make_rig(store, clock, WAIT_S, platforms=None, running=["matrix"]):
        body = delivery(destinations=["slack:C1"], followup_seconds=0)

        response = await rig.client.post("/v1/deliveries", json=body)
        again = await rig.client.post(
            "/v1/deliveries", json=delivery(destinations=[], followup_seconds=0)
        )

        assert response.status_code == again.status_code == 422
        problem = response.json()
        assert problem["errors"] == [
            {"field": "destinations[0]", "message": "slack is not configured"}
        ]
        assert "slack is not configured" in problem["detail"]
        assert again.json() == problem


async def test_a_failed_first_destination_is_passed_over_for_the_next(rig: Rig) -> None:
    rig.matrix.fail_next(1, PermanentDeliveryError("M_FORBIDDEN"), methods=["post"])

    response = await rig.client.post(
        "/v1/deliveries", json=delivery(destinations=[MATRIX, SLACK], followup_seconds=0)
    )

    assert response.status_code == 200
    assert response.json()["deliveries"] == [
        {"destination": SLACK, "ref": {"channel": "C0ASK", "ts": "1700000000.000001"}}
    ]


async def test_with_follow_up_a_failed_first_destination_falls_back_at_once(rig: Rig) -> None:
    rig.slack.fail_next(1, PermanentDeliveryError("is_archived"), methods=["post"])

    response = await rig.client.post("/v1/deliveries", json=delivery())

    assert response.status_code == 200
    assert response.json()["deliveries"] == [
        {"destination": MATRIX, "ref": {"room_id": "!room:example.org", "event_id": "$fake000001"}}
    ]
    rows = await rig.store.deliveries(ElicitationKey("engine:dlv_question_01"))
    assert [(r.destination, r.state) for r in rows] == [
        (SLACK, "failed"),
        (MATRIX, "posted"),
        ("web", "waiting"),
    ]


async def test_no_acceptance_within_the_wait_is_a_202_checkpoint_then_the_refs(
    store: SqlStore, clock: FakeClock
) -> None:
    async for rig in make_rig(store, clock, wait_seconds=0.3):
        rig.slack.fail_next(1, TransientDeliveryError("ratelimited", retry_after=30))

        first = await rig.client.post("/v1/deliveries", json=delivery())

        assert first.status_code == 202
        assert first.json() == {
            "id": "dlv_question_01",
            "elicitation": "engine:dlv_question_01",
            "deliveries": [],
        }
        assert rig.slack.posted == []
        rig.clock.advance(31)  # past Retry-After: the outbox posts it now
        rig.dispatcher.wake()
        for _ in range(500):  # until the post is recorded, not only sent (under load they part)
            rows = await rig.store.deliveries(ElicitationKey("engine:dlv_question_01"))
            if any(r.ref is not None for r in rows):
                break
            await asyncio.sleep(0.02)

        second = await rig.client.post("/v1/deliveries", json=delivery())

        assert second.status_code == 200
        assert second.json()["deliveries"] == [
            {"destination": SLACK, "ref": {"channel": "C0ASK", "ts": "1700000000.000001"}}
        ]
        assert len(rig.slack.posted) == 1
        assert await rig.store.count("elicitation") == 1


# --- refused requests ---------------------------------------------------------------------------


async def test_every_refused_delivery_is_a_400_naming_the_field_and_stores_nothing(
    rig: Rig,
) -> None:
    for name, body in FIXTURES["refused"].items():
        response = await rig.client.post("/v1/deliveries", json=body)

        assert response.status_code == 400, name
        assert response.headers["content-type"].startswith(PROBLEM)
        assert [e["field"] for e in response.json()["errors"]] == REFUSED_FIELDS[name], name
    await nothing_stored(rig)
    assert rig.slack.calls == rig.matrix.calls == []


async def test_a_body_over_32_kib_is_refused_and_one_of_exactly_32_kib_is_delivered(
    rig: Rig,
) -> None:
    over = delivery()
    over["ask"]["body"] = "x" * (MAX_BODY_BYTES - 1) + "é"  # 32,769 bytes

    refused = await rig.client.post("/v1/deliveries", json=over)

    assert refused.status_code == 400
    [error] = refused.json()["errors"]
    assert error["field"] == "ask.body"
    await nothing_stored(rig)

    exact = delivery()
    exact["ask"]["body"] = "x" * (MAX_BODY_BYTES - 2) + "é"  # 32,768 bytes
    accepted = await rig.client.post("/v1/deliveries", json=exact)
    assert accepted.status_code == 200
    [post] = rig.slack.posted
    assert len(post.view.elicitation.question.encode()) == MAX_BODY_BYTES


async def test_the_bearer_token_is_required(rig: Rig) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer nope"}):
        response = await rig.client.post("/v1/deliveries", json=delivery(), headers=headers)
        assert response.status_code == 401
    await nothing_stored(rig)


async def test_bodies_that_are_not_json_are_refused(rig: Rig) -> None:
    not_json = await rig.client.post(
        "/v1/deliveries", content=b"{", headers={"Content-Type": "application/json"}
    )
    form = await rig.client.post(
        "/v1/deliveries",
        content=b"id=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert not_json.status_code == 400
    assert [e["field"] for e in not_json.json()["errors"]] == ["body"]
    assert form.status_code == 415
    await nothing_stored(rig)


# --- answers and deadlines ----------------------------------------------------------------------


async def test_only_an_offered_choice_answers_and_it_is_recorded_once(rig: Rig) -> None:
    assert (await rig.client.post("/v1/deliveries", json=delivery())).status_code == 200
    key = ElicitationKey("engine:dlv_question_01")

    for attempt in (
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("ap-south-1",), via=SLACK),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("EU-WEST-1",), via=SLACK),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="somewhere in Europe", via=SLACK),
    ):
        outcome = await rig.service.answer(key, attempt)
        assert not outcome.won
        assert isinstance(outcome.result, Refusal)
        assert outcome.result.code in (RefusalCode.NOT_OFFERED, RefusalCode.EMPTY)

    won = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("eu-west-1",), via=SLACK)
    )
    assert won.won
    assert isinstance(won.result, Answer)
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED
    assert stored.answer is not None
    assert stored.answer.option_ids == ("eu-west-1",)
    assert await rig.store.count("answer") == 1


async def test_the_sender_cannot_answer_its_own_ask(rig: Rig) -> None:
    name = "null optional fields and unknown properties"
    assert (await rig.client.post("/v1/deliveries", json=delivery(name))).status_code == 200

    outcome = await rig.service.answer(
        ElicitationKey("engine:dlv_nulls_01"),
        Attempt(
            shown=SHOWN_WHOLE,
            respondent=Identity(platform="slack", user="U0AGENTUSER"),
            text="yes",
            via="web",
        ),
    )

    assert isinstance(outcome.result, Refusal)
    assert outcome.result.code is RefusalCode.ASKER


async def test_expiry_defaults_are_the_stored_deadlines(rig: Rig) -> None:
    ordinary = await rig.client.post("/v1/deliveries", json=delivery())
    bound = await rig.client.post("/v1/deliveries", json=delivery("a bound action approval"))

    assert ordinary.status_code == bound.status_code == 200

    async def expiries(key: ElicitationKey) -> list[Any]:
        return [d.due_at for d in await rig.store.deadlines(key) if d.kind == "expire"]

    assert await expiries(ElicitationKey("engine:dlv_question_01")) == []  # 9999-01-01: no deadline
    assert await expiries(ElicitationKey("engine:dlv_action_01")) == [
        rig.clock.now() + timedelta(days=7)
    ]


# --- the read-back and the answer webhook (issue 13) ---------------------------------------------

BOB = Identity(platform="slack", user="U0BOB", display_name="Bob")


@pytest.fixture
def hook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as receiver:
        yield receiver


@pytest.fixture
async def hooked(store: SqlStore, clock: FakeClock, hook: FakeWebhook) -> AsyncIterator[Rig]:
    """The rig with ``sources.engine.answer_webhook`` set to the fake receiver."""
    async with httpx.AsyncClient() as client:
        async for r in make_rig(store, clock, WAIT_S, {"engine": EngineSink(hook.url, client)}):
            yield r


async def settled_writeback(rig: Rig, key: ElicitationKey) -> Any:
    """The writeback row once the dispatcher is done with it (done or failed)."""
    rows: list[Any] = []
    for _ in range(500):
        rows = [r for r in await rig.store.outbox(key) if r.kind == "writeback"]
        if rows and rows[0].state in ("done", "failed"):
            return rows[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"the writeback of {key} never settled: {rows}")


async def test_no_deadline_reads_back_as_9999_and_a_deadline_as_itself(rig: Rig) -> None:
    name = "a task taking a written answer, explicit expiry"
    for body in (delivery(), delivery(name), delivery("a bound action approval")):
        assert (await rig.client.post("/v1/deliveries", json=body)).status_code == 200

    async def expires(delivery_id: str) -> Any:
        response = await rig.client.get(f"/v1/deliveries/{delivery_id}")
        assert response.status_code == 200, response.text
        return response.json()["expires_at"]

    assert await expires("dlv_question_01") == NO_DEADLINE_TEXT == "9999-01-01T00:00:00Z"
    assert await expires("dlv_task_01") == "2026-12-01T16:00:00Z"  # given as 17:00+01:00
    seven_days = (rig.clock.now() + timedelta(days=7)).isoformat().replace("+00:00", "Z")
    assert await expires("dlv_action_01") == seven_days


async def test_the_read_back_has_no_decision_while_pending_then_the_typed_one(rig: Rig) -> None:
    assert (await rig.client.post("/v1/deliveries", json=delivery())).status_code == 200

    pending = (await rig.client.get("/v1/deliveries/dlv_question_01")).json()
    assert pending["status"] == "pending"
    assert "decision" not in pending
    won = await rig.service.answer(
        ElicitationKey("engine:dlv_question_01"),
        Attempt(shown=SHOWN_WHOLE, respondent=BOB, option_ids=("eu-west-1",), via=SLACK),
    )
    assert won.won

    answered = (await rig.client.get("/v1/deliveries/dlv_question_01")).json()
    assert answered["status"] == "answered"
    assert answered["decision"]["type"] == "choice"
    assert answered["decision"]["answer"] == "eu-west-1"
    assert answered["decision"]["responder_id"] == "slack:U0BOB"


async def test_the_read_back_of_an_unknown_id_is_a_404_and_the_token_is_required(
    rig: Rig,
) -> None:
    missing = await rig.client.get("/v1/deliveries/dlv_nope")
    denied = await rig.client.get("/v1/deliveries/dlv_nope", headers={"Authorization": ""})
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith(PROBLEM)
    assert denied.status_code == 401


async def test_an_answer_over_32_kib_of_utf8_is_refused_in_bytes_and_one_at_it_is_kept(
    rig: Rig,
) -> None:
    name = "a task taking a written answer, explicit expiry"
    assert (await rig.client.post("/v1/deliveries", json=delivery(name))).status_code == 200
    key = ElicitationKey("engine:dlv_task_01")
    over = "€" * 10_923  # 32,769 bytes in 10,923 characters
    exact = "€" * 10_922 + "é"  # 32,768 bytes

    refused = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=BOB, text=over, via="web")
    )
    kept = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=BOB, text=exact, via="web")
    )

    assert isinstance(refused.result, Refusal)
    assert refused.result.code is RefusalCode.TOO_LONG
    assert "32,769 bytes" in refused.result.message
    assert "32,768 bytes (32 KiB)" in refused.result.message
    assert kept.won
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.text == exact


async def test_the_answer_webhook_gets_the_answer_once_with_a_stable_key(
    hooked: Rig, hook: FakeWebhook
) -> None:
    rig = hooked
    assert (await rig.client.post("/v1/deliveries", json=delivery())).status_code == 200
    key = ElicitationKey("engine:dlv_question_01")
    hook.script([503])  # the first try is retried with the same key
    won = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=BOB, option_ids=("us-east-1",), via=SLACK)
    )
    assert won.won
    for _ in range(500):  # the 503 is recorded as a retry (claim given back) before time moves
        rows = [r for r in await rig.store.outbox(key) if r.kind == "writeback"]
        if rows and rows[0].last_error and rows[0].claimed_by is None:
            break
        await asyncio.sleep(0.02)
    rig.clock.advance(60)
    rig.dispatcher.wake()
    row = await settled_writeback(rig, key)
    rig.clock.advance(3600)
    rig.dispatcher.wake()
    await asyncio.sleep(0.2)  # nothing more is sent

    first, second = hook.recorded()
    assert (first.status, second.status) == (503, 200)
    assert row.state == "done"
    assert first.path == "/hook"
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert first.headers["idempotency-key"] == f"elicitbot:{key}:closed"
    assert first.body == second.body
    read = await rig.client.get("/v1/deliveries/dlv_question_01")
    assert second.body == read.json()
    assert second.body["status"] == "answered"
    assert second.body["decision"]["answer"] == "us-east-1"
    assert second.body["expires_at"] == NO_DEADLINE_TEXT


async def test_a_4xx_from_the_answer_webhook_fails_the_writeback_for_good(
    hooked: Rig, hook: FakeWebhook
) -> None:
    rig = hooked
    hook.script([], default=422)
    assert (await rig.client.post("/v1/deliveries", json=delivery())).status_code == 200
    key = ElicitationKey("engine:dlv_question_01")
    won = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=BOB, option_ids=("us-east-1",), via=SLACK)
    )
    assert won.won

    row = await settled_writeback(rig, key)

    assert row.state == "failed"
    assert "engine answer webhook answered HTTP 422" in (row.last_error or "")
    assert len(hook.recorded()) == 1


async def test_without_an_answer_webhook_nothing_is_posted(
    store: SqlStore, clock: FakeClock, hook: FakeWebhook
) -> None:
    async with httpx.AsyncClient() as client:
        async for rig in make_rig(store, clock, WAIT_S, {"engine": EngineSink(None, client)}):
            assert (await rig.client.post("/v1/deliveries", json=delivery())).status_code == 200
            key = ElicitationKey("engine:dlv_question_01")
            won = await rig.service.answer(
                key,
                Attempt(shown=SHOWN_WHOLE, respondent=BOB, option_ids=("eu-west-1",), via=SLACK),
            )
            assert won.won

            row = await settled_writeback(rig, key)

            assert row.state == "done"
            assert hook.recorded() == []
            read = await rig.client.get("/v1/deliveries/dlv_question_01")
            assert read.json()["decision"]["answer"] == "eu-west-1"


async def test_an_ask_already_expired_answers_200_with_its_status_not_a_502(rig: Rig) -> None:
    # An expiry already past fires at intake: the copies are skipped, nothing refused them.
    past = (rig.clock.now() - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    body = delivery(destinations=[SLACK], followup_seconds=0)
    body["ask"]["expires_at"] = past

    first = await rig.client.post("/v1/deliveries", json=body)
    again = await rig.client.post("/v1/deliveries", json=delivery(destinations=[]))

    assert first.status_code == again.status_code == 200, first.text
    assert (
        first.json()
        == again.json()
        == {
            "id": "dlv_question_01",
            "elicitation": "engine:dlv_question_01",
            "status": "expired",
            "deliveries": [],
        }
    )
    assert rig.slack.posted == []

"""The outbox end to end: Service -> Store -> Dispatcher -> chat fake and answer sink.

Every test runs on SQLite and PostgreSQL: the service and the dispatcher depend on the store port
only. Time is a FakeClock: a retry is due only
once the clock passes its backoff, so "not before" is asserted by running the dispatcher early,
never by sleeping.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest

from adapters.sources.superpipeline.parse import parse_body
from adapters.sources.superpipeline.sink import SuperPipelineSink
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
    Status,
)
from bot.domain.ports import AnswerSink, PromptView
from bot.domain.records import AuditEntry, EffectView, NoticeKind, WritebackState
from bot.domain.store import Store
from bot.outbox import Dispatcher, writeback_key
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeSink, FakeWebhook, Update
from tests.unit.sources.superpipeline_fixtures import VALID

C1 = "slack:C1"
C2 = "slack:C2"
ROUTE = Route(destinations=(C1, C2))
AGENT = "agt_9e8d7c6b5a493827"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
BOB = Identity(platform="slack", user="U0BOB", display_name="Bob")
AGENT_USER = Identity(platform="slack", user="U0AGENTUSER")
PEOPLE = People(
    admins=frozenset({"slack:U0ADMIN"}),
    principals={
        "slack:U0ALICE": "usr_alice",
        "slack:U0BOB": "usr_bob",
        "slack:U0AGENTUSER": AGENT,
    },
)


@dataclass
class Rig:
    store: Store
    clock: FakeClock
    chat: FakeChat
    service: Service
    dispatcher: Dispatcher


def make_rig(store: Store, clock: FakeClock, sink: AnswerSink) -> Rig:
    chat = FakeChat("slack")
    dispatcher = Dispatcher(
        store,
        clock,
        {"slack": chat},
        {"superpipeline": sink},
        lambda key: f"http://127.0.0.1:8787/#{key}",
    )
    service = Service(store, clock, PEOPLE, [ROUTE], on_change=dispatcher.wake)
    return Rig(store, clock, chat, service, dispatcher)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """Each test here runs on every store behind the port (ids ``sqlite``, ``postgresql``)."""
    s = SqlStore.from_url(db_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def sink() -> FakeSink:
    return FakeSink()


@pytest.fixture
async def rig(store: Store, clock: FakeClock, sink: FakeSink) -> Rig:
    return make_rig(store, clock, sink)


@pytest.fixture
def webhook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as hook:
        yield hook


@pytest.fixture
async def webhook_rig(store: Store, clock: FakeClock, webhook: FakeWebhook) -> AsyncIterator[Rig]:
    async with httpx.AsyncClient() as client:
        yield make_rig(store, clock, SuperPipelineSink(webhook.url, client))


async def intake(
    rig: Rig, case: str = "options", inbound_id: str = "ce-1", **changes: Any
) -> ElicitationKey:
    data = copy.deepcopy(VALID[case])
    data.update(changes)
    e = parse_body(data, workspace="acme")
    [outcome] = await rig.service.intake([Inbound("ce:/superpipeline/test", inbound_id, e, {})])
    assert outcome.result in ("accepted", "updated"), outcome
    return outcome.key


async def posted(rig: Rig, case: str = "options", **changes: Any) -> ElicitationKey:
    """An elicitation taken in and posted to both channels."""
    key = await intake(rig, case, inbound_id=f"ce-{case}-{changes}", **changes)
    before = len(rig.chat.posted)
    assert await rig.dispatcher.run_once() == 2
    assert len(rig.chat.posted) == before + 2
    return key


def attempt(who: Identity, *options: str, via: str = C1) -> Attempt:
    return Attempt(shown=SHOWN_WHOLE, respondent=who, option_ids=options, via=via)


async def outbox(store: Store, key: ElicitationKey, kind: str) -> list[EffectView]:
    return [r for r in await store.outbox(key) if r.kind == kind]


async def audit(store: Store, key: ElicitationKey, action: str) -> list[AuditEntry]:
    return [a for a in await store.audit(key) if a.action == action]


def writeback_states(updates: list[Update]) -> list[WritebackState | None]:
    """Where the write-back stood in each update's view ("Sending…", accepted, refused)."""
    return [None if u.view.writeback is None else u.view.writeback.state for u in updates]


# --------------------------------------------------------------------------- posting


async def test_intake_posts_to_both_destinations_and_stores_the_refs(rig: Rig) -> None:
    key = await intake(rig)

    assert await rig.dispatcher.run_once() == 2

    assert sorted(p.destination for p in rig.chat.posted) == [C1, C2]
    assert all(p.view.status is Status.PENDING and p.view.version == 1 for p in rig.chat.posted)
    assert all(p.view.elicitation.key == key for p in rig.chat.posted)
    assert not any(p.uncertain for p in rig.chat.posted)
    assert len({p.idempotency_key for p in rig.chat.posted}) == 2
    deliveries = {d.destination: d for d in await rig.store.deliveries(key)}
    assert set(deliveries) == {C1, C2}
    for p in rig.chat.posted:
        assert deliveries[p.destination].state == "posted"
        assert deliveries[p.destination].ref == p.ref
        assert deliveries[p.destination].posted_at == rig.clock.now()
    assert [r.state for r in await outbox(rig.store, key, "post")] == ["done", "done"]

    rig.clock.advance(3600)
    assert await rig.dispatcher.run_once() == 0
    assert len(rig.chat.calls) == 2


@pytest.mark.parametrize(
    ("retry_after", "earliest", "latest"),
    [(None, 1.0, 2.0), (30.0, 30.0, 31.0)],
    ids=["backoff", "retry-after"],
)
async def test_transient_failure_is_retried_after_its_delay_and_not_before(
    rig: Rig, retry_after: float | None, earliest: float, latest: float
) -> None:
    key = await intake(rig)
    rig.chat.fail_next(1, TransientDeliveryError("rate limited", retry_after=retry_after))
    start = rig.clock.now()

    assert await rig.dispatcher.run_once() == 2

    [failed] = [c for c in rig.chat.calls if c.failed is not None]
    [ok] = rig.chat.posted
    assert failed.destination != ok.destination
    [row] = [r for r in await outbox(rig.store, key, "post") if r.target == failed.destination]
    assert (row.state, row.attempts) == ("pending", 1)
    assert "rate limited" in (row.last_error or "")
    # Backoff without Retry-After: 2 s * (0.5 + jitter/2); with it: Retry-After + jitter.
    assert start + timedelta(seconds=earliest) <= row.next_attempt_at
    assert row.next_attempt_at < start + timedelta(seconds=latest)
    delivery = next(d for d in await rig.store.deliveries(key) if d.id == row.delivery_id)
    assert delivery.state == "posting"
    assert delivery.ref is None

    rig.clock.advance(earliest - 0.05)
    assert await rig.dispatcher.run_once() == 0
    assert len(rig.chat.calls) == 2

    rig.clock.advance(latest - earliest + 0.1)
    assert await rig.dispatcher.run_once() == 1

    retried = rig.chat.posted[-1]
    assert retried.destination == failed.destination
    assert retried.idempotency_key == failed.idempotency_key
    assert retried.uncertain, "a retried post must look for an earlier copy first"
    [row] = [r for r in await outbox(rig.store, key, "post") if r.target == failed.destination]
    assert (row.state, row.attempts) == ("done", 2)
    deliveries = {d.destination: d for d in await rig.store.deliveries(key)}
    assert deliveries[failed.destination].state == "posted"
    assert deliveries[failed.destination].ref == retried.ref


async def test_a_post_cut_off_by_a_crash_is_redone_with_its_key_and_adopted(rig: Rig) -> None:
    """reliability.md §8.4: the platform accepted the post, the process died before the ref was
    stored. When the claim's lease runs out the row is taken again, as ``uncertain``, with the
    same key, so the platform (here: by key, like a Matrix txn id) returns the same message."""
    key = await intake(rig)
    dead = await rig.store.claim_outbox(rig.clock.now(), "dead-replica")
    assert len(dead) == 2
    first = dead[0]
    stored = await rig.store.get(key)
    assert stored is not None
    rendered = PromptView(
        stored.elicitation, stored.status, None, stored.version, "", rig.clock.now()
    )
    orphan = await rig.chat.post(
        first.target, rendered, idempotency_key=f"elicitbot-{first.id}", uncertain=None
    )

    assert await rig.dispatcher.run_once() == 0  # still leased to the dead replica
    rig.clock.advance(61)
    assert await rig.dispatcher.run_once() == 2

    assert len(rig.chat.posted) == 2, "one message per destination, the orphan adopted"
    redone = [c for c in rig.chat.calls if c.idempotency_key == f"elicitbot-{first.id}"]
    # The retake looks for its message from the first attempt on (the dead replica's claim).
    assert [c.uncertain for c in redone] == [None, dead[0].first_attempt_at]
    assert dead[0].first_attempt_at is not None
    deliveries = {d.id: d for d in await rig.store.deliveries(key)}
    assert deliveries[first.delivery_id or -1].ref == orphan
    assert {d.state for d in deliveries.values()} == {"posted"}
    rows = await outbox(rig.store, key, "post")
    assert [(r.state, r.attempts) for r in rows] == [("done", 2), ("done", 2)]


async def test_permanent_failure_marks_the_delivery_failed_and_audits_it(rig: Rig) -> None:
    key = await intake(rig)
    rig.chat.fail_next(1, PermanentDeliveryError("channel_not_found"))

    assert await rig.dispatcher.run_once() == 2

    [failed] = [c for c in rig.chat.calls if c.failed is not None]
    [row] = [r for r in await outbox(rig.store, key, "post") if r.target == failed.destination]
    assert row.state == "failed"
    assert "channel_not_found" in (row.last_error or "")
    deliveries = {d.destination: d for d in await rig.store.deliveries(key)}
    assert deliveries[failed.destination].state == "failed"
    assert "channel_not_found" in (deliveries[failed.destination].error or "")
    assert deliveries[failed.destination].ref is None
    other = C2 if failed.destination == C1 else C1
    assert deliveries[other].state == "posted"
    [record] = await audit(rig.store, key, "post_failed")
    assert (record.detail or {})["target"] == failed.destination
    assert "channel_not_found" in (record.detail or {})["error"]

    rig.clock.advance(86_400)
    assert await rig.dispatcher.run_once() == 0
    assert len(rig.chat.calls) == 2


# --------------------------------------------------------------------------- answers


async def test_answer_updates_every_copy_once_and_writes_back_once(
    rig: Rig, sink: FakeSink
) -> None:
    key = await posted(rig)
    refs = {p.destination: p.ref for p in rig.chat.posted}

    outcome = await rig.service.answer(key, attempt(ALICE, "allow_once"))

    assert outcome.won
    # The answer goes upstream first: no copy is rewritten before the source accepted it.
    assert await outbox(rig.store, key, "update") == []
    assert await rig.dispatcher.run_once() == 1
    [delivered] = sink.delivered
    assert delivered.idempotency_key == writeback_key(key)
    assert delivered.view.status is Status.ANSWERED
    assert delivered.view.answer == outcome.result
    assert rig.chat.updated == []

    # Accepted: every copy is rewritten once, and says "Answered".
    assert await rig.dispatcher.run_once() == 2
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    assert writeback_states(rig.chat.updated) == [WritebackState.ACCEPTED] * 2
    for u in rig.chat.updated:
        assert u.ref == refs[u.destination]
        assert u.view.status is Status.ANSWERED
        assert u.view.answer is not None
        assert u.view.answer.respondent == "slack:U0ALICE"
        assert u.view.answer.option_ids == ("allow_once",)
    assert [r.state for r in await outbox(rig.store, key, "update")] == ["done", "done"]
    assert [r.state for r in await outbox(rig.store, key, "writeback")] == ["done"]

    rig.clock.advance(3600)
    assert await rig.dispatcher.run_once() == 0
    assert len(rig.chat.updated) == 2
    assert len(sink.attempts) == 1


async def test_a_failed_write_back_is_retried_with_the_same_key(rig: Rig, sink: FakeSink) -> None:
    key = await posted(rig)
    sink.fail_next(2, TransientDeliveryError("upstream 503"))
    assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won

    for _ in range(3):
        await rig.dispatcher.run_once()
        rig.clock.advance(10)

    assert sink.attempts == [writeback_key(key)] * 3
    assert len(sink.delivered) == 1
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("done", 3)


async def test_two_racing_answers_have_exactly_one_winner(rig: Rig, sink: FakeSink) -> None:
    for round_ in range(5):
        key = await posted(rig, elicitationId=f"eli_race{round_:04d}")
        alice, bob = await asyncio.gather(
            rig.service.answer(key, attempt(ALICE, "allow_once", via=C1)),
            rig.service.answer(key, attempt(BOB, "deny", via=C2)),
        )

        assert [alice.won, bob.won].count(True) == 1, (alice, bob)
        winner, loser = (alice, bob) if alice.won else (bob, alice)
        winner_name = "Alice" if alice.won else "Bob"
        assert isinstance(winner.result, Answer)
        assert isinstance(loser.result, Refusal)
        assert loser.result.code is RefusalCode.ALREADY_ANSWERED
        assert f"Already answered by {winner_name}" in loser.result.message
        stored = await rig.store.get(key)
        assert stored is not None
        assert stored.status is Status.ANSWERED
        assert stored.answer == winner.result
        assert len(await audit(rig.store, key, "answer")) == 1
        [refusal] = await audit(rig.store, key, "refusal")
        assert refusal.code == "already_answered"
        assert refusal.actor == ("slack:U0BOB" if alice.won else "slack:U0ALICE")
        assert len(await outbox(rig.store, key, "writeback")) == 1

        before = len(rig.chat.updated)
        assert await rig.dispatcher.run_once() == 1  # the write-back, then the copies
        assert [d.idempotency_key for d in sink.delivered][-1] == writeback_key(key)
        assert await rig.dispatcher.run_once() == 2
        assert len(rig.chat.updated) == before + 2

    assert len(sink.delivered) == 5


async def test_a_refusal_is_audited_and_changes_nothing(rig: Rig, sink: FakeSink) -> None:
    key = await posted(rig)
    before = await rig.store.get(key)
    rows_before = await rig.store.outbox(key)

    outcome = await rig.service.answer(key, attempt(BOB, "allow_always"))

    assert not outcome.won
    assert isinstance(outcome.result, Refusal)
    assert outcome.result.code is RefusalCode.NOT_ADMIN
    [refusal] = await audit(rig.store, key, "refusal")
    assert refusal.actor == "slack:U0BOB"
    assert refusal.code == "not_admin"
    assert (refusal.detail or {})["options"] == ["allow_always"]
    assert await rig.store.get(key) == before
    assert await rig.store.outbox(key) == rows_before
    assert await audit(rig.store, key, "answer") == []
    rig.clock.advance(60)
    assert await rig.dispatcher.run_once() == 0
    assert rig.chat.updated == []
    assert sink.attempts == []

    # The slot was not consumed: a valid answer still wins.
    assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won


async def test_the_asker_is_refused_and_the_elicitation_stays_pending(rig: Rig) -> None:
    key = await posted(rig)

    outcome = await rig.service.answer(key, attempt(AGENT_USER, "allow_once"))

    assert not outcome.won
    assert isinstance(outcome.result, Refusal)
    assert outcome.result.code is RefusalCode.ASKER
    stored = await rig.store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.version) == (Status.PENDING, None, 1)
    [refusal] = await audit(rig.store, key, "refusal")
    assert (refusal.actor, refusal.code) == ("slack:U0AGENTUSER", "asker")
    assert await outbox(rig.store, key, "writeback") == []
    assert (await rig.service.answer(key, attempt(ALICE, "allow_once"))).won


async def test_two_revisions_before_the_dispatcher_runs_give_one_update_per_copy(
    rig: Rig,
) -> None:
    key = await posted(rig)

    await intake(rig, inbound_id="ce-rev-1", question="May I run migration 0002?")
    await intake(rig, inbound_id="ce-rev-2", question="May I run migration 0003?")

    assert len(await outbox(rig.store, key, "update")) == 2
    assert await rig.dispatcher.run_once() == 2
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    for u in rig.chat.updated:
        assert u.view.version == 3
        assert u.view.elicitation.question == "May I run migration 0003?"
        assert u.view.status is Status.PENDING
    assert len(rig.chat.posted) == 2
    rig.clock.advance(60)
    assert await rig.dispatcher.run_once() == 0


# --------------------------------------------------------------------------- the webhook


async def answered(rig: Rig, case: str, option: str) -> ElicitationKey:
    key = await posted(rig, case)
    rig.clock.advance(60)  # answered at 09:31:00Z
    assert (await rig.service.answer(key, attempt(ALICE, option))).won
    return key


async def test_webhook_503_503_200_retries_with_the_same_key_and_body(
    webhook_rig: Rig, webhook: FakeWebhook
) -> None:
    rig = webhook_rig
    webhook.script([503, 503, 200])
    key = await answered(rig, "approval-request", "allow_once")

    await rig.dispatcher.run_once()
    assert len(webhook.recorded()) == 1
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("pending", 1)
    assert "503" in (row.last_error or "")
    # Not through at once: the copies now say "Sending…" (and never "Answered" before the 200).
    assert await rig.dispatcher.run_once() == 2
    assert writeback_states(rig.chat.updated) == [WritebackState.SENDING] * 2
    assert {u.view.status for u in rig.chat.updated} == {Status.ANSWERED}

    rig.clock.advance(2.01)  # backoff(1) < 2 s
    assert await rig.dispatcher.run_once() == 1
    assert len(webhook.recorded()) == 2
    rig.clock.advance(4.01)  # backoff(2) < 4 s
    assert await rig.dispatcher.run_once() == 1
    # Accepted: the copies are rewritten once more, and now say "Answered".
    assert await rig.dispatcher.run_once() == 2
    assert len(rig.chat.updated) == 4
    assert writeback_states(rig.chat.updated[2:]) == [WritebackState.ACCEPTED] * 2

    requests = webhook.recorded()
    assert [r.status for r in requests] == [503, 503, 200]
    assert {r.headers["idempotency-key"] for r in requests} == {writeback_key(key)}
    assert {r.raw for r in requests} == {requests[0].raw}
    assert all(r.path == "/hook" for r in requests)
    assert all(r.headers["content-type"].startswith("application/json") for r in requests)
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("done", 3)
    assert requests[0].body == {
        "event": "elicitation.answered",
        "version": 1,
        "idempotencyKey": writeback_key(key),
        "elicitationId": "apr_4d5e6f7081920314",
        "approvalRequestId": "apr_4d5e6f7081920314",
        "workspace": "acme",
        "boardId": None,
        "cardId": "",
        "runId": "",
        "stageKey": "",
        "status": "answered",
        "answer": {
            "optionIds": ["allow_once"],
            "options": [
                {"id": "allow_once", "label": "Allow once", "meaning": "approve", "scope": "once"}
            ],
            "text": None,
            "secret": False,
        },
        "answeredBy": {"id": "slack:U0ALICE", "principal": "usr_alice", "displayName": "Alice"},
        "answeredVia": C1,
        "answeredAt": "2026-11-10T09:31:00Z",
        "approvals": [],
        "approvalSubject": {
            "id": "sub_7d6c5b4a39281706",
            "digest": "sha256:4f2a0c1e9b8d7f6a5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7",
            "revision": 1,
        },
    }

    rig.clock.advance(3600)
    assert await rig.dispatcher.run_once() == 0
    assert len(webhook.recorded()) == 3


async def test_webhook_409_is_done_after_one_request(
    webhook_rig: Rig, webhook: FakeWebhook
) -> None:
    rig = webhook_rig
    webhook.script([409])
    key = await answered(rig, "options", "deny")

    await rig.dispatcher.run_once()

    [request] = webhook.recorded()
    assert request.status == 409
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("done", 1)
    # SuperPipeline has it: accepted, so each copy is rewritten once, as answered.
    assert await rig.dispatcher.run_once() == 2
    assert {u.view.status for u in rig.chat.updated} == {Status.ANSWERED}
    assert writeback_states(rig.chat.updated) == [WritebackState.ACCEPTED] * 2
    body = request.body
    assert request.headers["idempotency-key"] == writeback_key(key)
    assert body["elicitationId"] == "eli_1a2b3c4d5e6f7081"
    assert body["approvalRequestId"] is None
    assert body["approvalSubject"] is None
    assert (body["workspace"], body["boardId"], body["cardId"]) == (
        "acme",
        "brd_134a0ddb6d434478",
        "crd_0f3c9a2b7d4e4a11",
    )
    assert (body["runId"], body["stageKey"]) == ("run_0123456789abcdef", "research")
    assert body["status"] == "answered"
    assert body["answer"]["optionIds"] == ["deny"]
    assert body["answer"]["options"] == [
        {"id": "deny", "label": "Deny", "meaning": "reject", "scope": None}
    ]
    assert body["answeredBy"]["id"] == "slack:U0ALICE"
    assert body["answeredBy"]["principal"] == "usr_alice"
    assert body["answeredVia"] == C1
    assert body["answeredAt"] == "2026-11-10T09:31:00Z"

    rig.clock.advance(3600)
    assert await rig.dispatcher.run_once() == 0
    assert len(webhook.recorded()) == 1


async def test_webhook_400_fails_the_row_after_one_request(
    webhook_rig: Rig, webhook: FakeWebhook
) -> None:
    rig = webhook_rig
    webhook.script([400])
    key = await answered(rig, "options", "allow_once")

    await rig.dispatcher.run_once()

    [request] = webhook.recorded()
    assert request.status == 400
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("failed", 1)
    assert "400" in (row.last_error or "")
    # A 4xx is a refusal of the answer: the question is open again (SuperPipeline still waits).
    [record] = await audit(rig.store, key, "writeback_refused")
    assert "400" in (record.detail or {})["error"]
    assert (record.detail or {})["reopened"] is True
    assert await audit(rig.store, key, "writeback_failed") == []
    stored = await rig.store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer) == (Status.PENDING, None)
    assert stored.writeback is not None
    assert (stored.writeback.state, stored.writeback.reopened) == (WritebackState.REFUSED, True)
    assert stored.writeback.refused is not None
    assert stored.writeback.refused.respondent == "slack:U0ALICE"

    # Every copy says so, and Alice is told in the thread of the copy she answered in.
    assert await rig.dispatcher.run_once() == 3
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    assert {u.view.status for u in rig.chat.updated} == {Status.PENDING}
    assert writeback_states(rig.chat.updated) == [WritebackState.REFUSED] * 2
    [told] = rig.chat.notified
    assert (told.destination, told.notice.user) == (C1, "slack:U0ALICE")
    assert told.notice.kind is NoticeKind.REFUSAL
    assert told.notice.thread == next(p.ref for p in rig.chat.posted if p.destination == C1)
    assert "The question is open again" in told.notice.text

    rig.clock.advance(86_400)
    assert await rig.dispatcher.run_once() == 0
    assert len(webhook.recorded()) == 1

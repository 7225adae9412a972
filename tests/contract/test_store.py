"""The store contract: every test runs on SQLite (file, WAL) and on PostgreSQL.

Intake dedupe and revisions, first-answer-wins, outbox and deadline claims (fenced, leased) and the
reads, all through :class:`store.sql.SqlStore` and nothing else.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta

import pytest
from sqlalchemy.exc import DBAPIError, StatementError

from bot.domain.model import (
    Answer,
    AnswerMode,
    ApprovalSubject,
    Deadlines,
    Elicitation,
    ElicitationKey,
    Kind,
    Meaning,
    Option,
    Route,
    Status,
)
from bot.domain.payloads import PostPayload, WritebackPayload
from bot.domain.planning import display_hash
from bot.domain.records import (
    DeliveryView,
    EffectKind,
    EffectView,
    IntakeItem,
    OutboxItem,
    WritebackState,
)
from bot.domain.refs import MatrixRef, SlackRef
from store.sql import SqlStore
from tests.conftest import FakeClock

SOURCE = "superpipeline"
SLACK = "slack:C0APPROVALS"
MATRIX = "matrix:!room:example.org"
SLACK_2 = "slack:C0ESCALATE"
OPTIONS = (
    Option(id="yes", label="Yes", meaning=Meaning.APPROVE),
    Option(id="no", label="No", meaning=Meaning.REJECT),
)
TWO_NOW = Route(destinations=(SLACK, MATRIX))
THREE_NOW = Route(destinations=(SLACK, MATRIX, SLACK_2))
THREE_FOLLOWUP = Route(destinations=(SLACK, MATRIX, SLACK_2), followup_seconds=60)


def at(base: datetime, **delta: float) -> datetime:
    return base + timedelta(**delta)


def make(
    created: datetime,
    source_id: str = "eli_0001",
    *,
    question: str = "May I run the migration?",
    source: str = SOURCE,
    remind: float | None = None,
    escalate: float | None = None,
    expires: float | None = None,
    subject_expires: float | None = None,
) -> Elicitation:
    """An elicitation created at ``created``; deadlines are seconds after it."""

    def after(seconds: float | None) -> datetime | None:
        return None if seconds is None else at(created, seconds=seconds)

    subject = None
    if subject_expires is not None:
        subject = ApprovalSubject.model_validate(
            {
                "id": "sub_1",
                "digest": "sha256:00ff",
                "schema": "stk-capability/v1",
                "revision": 1,
                "expires_at": after(subject_expires),
            }
        )
    return Elicitation(
        source=source,
        source_id=source_id,
        workspace="acme",
        asker="agt_9e8d7c6b5a493827",
        kind=Kind.APPROVAL if subject else Kind.QUESTION,
        question=question,
        answer_mode=AnswerMode.SINGLE_CHOICE,
        options=OPTIONS,
        subject=subject,
        deadlines=Deadlines(
            remind_at=after(remind), escalate_at=after(escalate), expires_at=after(expires)
        ),
        created_at=created,
    )


def item(e: Elicitation, inbound_id: str, route: Route = TWO_NOW) -> IntakeItem:
    return IntakeItem(
        channel=f"ce:{e.source}",
        inbound_id=inbound_id,
        elicitation=e,
        route=route,
        display_hash=display_hash(e),
        audit={"inbound": inbound_id},
    )


def answer(who: str, now: datetime, *options: str, via: str = SLACK) -> Answer:
    return Answer(option_ids=options or ("yes",), respondent=who, via=via, at=now)


async def accept(
    store: SqlStore, e: Elicitation, now: datetime, route: Route = TWO_NOW, inbound: str = "ev-1"
) -> ElicitationKey:
    [outcome] = await store.intake([item(e, inbound, route)], now)
    assert outcome.result == "accepted"
    return outcome.key


def kinds(rows: list[EffectView]) -> Counter[str]:
    return Counter(r.kind for r in rows)


def by_destination(rows: list[DeliveryView]) -> dict[str, DeliveryView]:
    return {r.destination: r for r in rows}


async def post_all(
    store: SqlStore, now: datetime, claimer: str = "w1", *, only: set[str] | None = None
) -> list[OutboxItem]:
    """Claim every due row; complete the posts (to ``only`` destinations, if given)."""
    claimed = await store.claim_outbox(now, claimer, limit=100)
    for it in claimed:
        if it.kind == "post" and (only is None or it.target in only):
            assert await store.complete_outbox(it, claimer, now, ref=SlackRef("C0", f"ts-{it.id}"))
    return claimed


def pending_updates(rows: list[EffectView]) -> Counter[int | None]:
    return Counter(r.delivery_id for r in rows if r.kind == "update" and r.state == "pending")


# -- intake --------------------------------------------------------------------------------------


async def test_new_elicitation_is_accepted_with_one_post_per_destination(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    e = make(now, remind=600, expires=3600)
    [outcome] = await store.intake([item(e, "ev-1", TWO_NOW)], now)

    assert outcome.key == e.key == f"{SOURCE}:eli_0001"
    assert outcome.result == "accepted"
    stored = await store.get(e.key)
    assert stored is not None
    assert stored.status is Status.PENDING
    assert stored.version == 1
    assert stored.answer is None
    assert stored.elicitation == e
    assert stored.route == TWO_NOW
    assert stored.created_at == now
    deliveries = await store.deliveries(e.key)
    assert [(d.destination, d.position, d.state) for d in deliveries] == [
        (SLACK, 0, "planned"),
        (MATRIX, 1, "planned"),
    ]
    outbox = await store.outbox(e.key)
    assert [(o.kind, o.target, o.delivery_id, o.state) for o in outbox] == [
        ("post", SLACK, deliveries[0].id, "pending"),
        ("post", MATRIX, deliveries[1].id, "pending"),
    ]
    assert [(d.kind, d.due_at, d.state) for d in await store.deadlines(e.key)] == [
        ("remind", at(now, seconds=600), "pending"),
        ("expire", at(now, seconds=3600), "pending"),
    ]
    [audit] = await store.audit(e.key)
    assert (audit.action, audit.detail) == ("intake", {"inbound": "ev-1"})


async def test_same_inbound_id_again_is_a_duplicate(store: SqlStore, clock: FakeClock) -> None:
    e = make(clock.now())
    await accept(store, e, clock.now())
    clock.advance(5)

    [outcome] = await store.intake([item(make(clock.now(), question="other"), "ev-1")], clock.now())

    assert (outcome.key, outcome.result) == (e.key, "duplicate")
    assert await store.count("elicitation") == 1
    assert await store.count("delivery") == 2
    assert kinds(await store.outbox()) == {"post": 2}
    stored = await store.get(e.key)
    assert stored is not None
    assert (stored.version, stored.elicitation.question) == (1, e.question)


async def test_new_inbound_id_with_identical_content_is_unchanged(
    store: SqlStore, clock: FakeClock
) -> None:
    e = make(clock.now(), remind=600)
    await accept(store, e, clock.now())
    await post_all(store, clock.now())
    before = await store.outbox()
    clock.advance(5)

    [outcome] = await store.intake([item(e, "ev-2")], clock.now())

    assert (outcome.key, outcome.result) == (e.key, "unchanged")
    assert await store.outbox() == before
    stored = await store.get(e.key)
    assert stored is not None
    assert stored.version == 1
    assert [d.kind for d in await store.deadlines(e.key)] == ["remind"]
    assert [a.action for a in await store.audit(e.key)] == ["intake"]


async def test_changed_question_is_an_update_to_every_posted_copy_coalesced(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    e = make(t0, remind=600, expires=3600)
    await accept(store, e, t0, THREE_NOW)
    # Slack and Matrix are posted; the third copy is still being posted (claimed, not done).
    await post_all(store, t0, only={SLACK, MATRIX})
    ds = by_destination(await store.deliveries(e.key))
    assert [ds[d].state for d in (SLACK, MATRIX, SLACK_2)] == ["posted", "posted", "posting"]
    now = clock.advance(30)

    v2 = make(t0, question="May I run the migration on staging?", remind=1200, expires=7200)
    [outcome] = await store.intake([item(v2, "ev-2", THREE_NOW)], now)

    assert (outcome.key, outcome.result) == (e.key, "updated")
    stored = await store.get(e.key)
    assert stored is not None
    assert (stored.version, stored.elicitation.question) == (2, v2.question)
    assert stored.elicitation.deadlines.expires_at == at(t0, seconds=7200)
    assert stored.updated_at == now
    assert pending_updates(await store.outbox(e.key)) == {
        ds[SLACK].id: 1,
        ds[MATRIX].id: 1,
    }
    updates = [o for o in await store.outbox(e.key) if o.kind == "update"]
    assert {o.target for o in updates} == {SLACK, MATRIX}
    # Deadlines are replaced by the revision's.
    assert [(d.kind, d.due_at, d.state) for d in await store.deadlines(e.key)] == [
        ("remind", at(t0, seconds=1200), "pending"),
        ("expire", at(t0, seconds=7200), "pending"),
    ]
    assert [a.action for a in await store.audit(e.key)] == ["intake", "revised"]

    # A third change before the update is claimed: version 3, still one pending update per copy.
    v3 = make(t0, question="May I run the migration on prod?", remind=1200, expires=7200)
    [third] = await store.intake([item(v3, "ev-3", THREE_NOW)], clock.advance(1))
    assert third.result == "updated"
    stored = await store.get(e.key)
    assert stored is not None
    assert stored.version == 3
    assert pending_updates(await store.outbox(e.key)) == {
        ds[SLACK].id: 1,
        ds[MATRIX].id: 1,
    }

    # Once claimed, a further change needs a new update per copy.
    claimed = await store.claim_outbox(clock.now(), "w2")
    assert sorted(i.delivery_id or 0 for i in claimed if i.kind == "update") == sorted(
        [ds[SLACK].id, ds[MATRIX].id]
    )
    v4 = make(t0, question="May I run it?", remind=1200, expires=7200)
    [fourth] = await store.intake([item(v4, "ev-4", THREE_NOW)], clock.advance(1))
    assert fourth.result == "updated"
    assert pending_updates(await store.outbox(e.key)) == {
        ds[SLACK].id: 1,
        ds[MATRIX].id: 1,
    }
    assert kinds(await store.outbox(e.key)) == {"post": 3, "update": 4}


async def test_revised_expiry_decides_whether_an_answer_is_late(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    await accept(store, make(t0, expires=600), t0)
    [outcome] = await store.intake([item(make(t0, expires=1200, question="Later?"), "ev-2")], t0)
    assert outcome.result == "updated"

    now = clock.advance(900)  # after the first expiry, before the revised one
    result = await store.record_answer(
        ElicitationKey(f"{SOURCE}:eli_0001"),
        answer("slack:U0ALICE", now),
        now,
        approving=False,
        audit={},
    )

    assert result.won


async def test_revision_of_an_answered_elicitation_changes_nothing(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0)
    assert (
        await store.record_answer(key, answer("slack:U1", t0), t0, approving=False, audit={})
    ).won
    before = await store.outbox(key)

    [outcome] = await store.intake([item(make(t0, question="changed"), "ev-2")], clock.advance(5))

    assert outcome.result == "unchanged"
    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.elicitation.question) == (Status.ANSWERED, make(t0).question)
    assert await store.outbox(key) == before


async def test_a_batch_is_all_or_nothing(store: SqlStore, clock: FakeClock) -> None:
    now = clock.now()
    first, second, third = (make(now, f"eli_{n}", remind=60) for n in (1, 2, 3))
    # The third item carries an invalid row: a naive due time (past the model's validation),
    # which the store refuses to bind.
    naive = Deadlines.model_construct(remind_at=datetime(2026, 11, 10, 9, 31))  # noqa: DTZ001
    broken = third.model_copy(update={"deadlines": naive})
    batch = [item(first, "ev-1"), item(second, "ev-2"), item(broken, "ev-3")]

    # SQLAlchemy wraps the column type's refusal in a StatementError; PostgreSQL's group insert
    # binds each column itself (store.sql.many_rows.ManyRows), so there it comes bare.
    with pytest.raises((StatementError, ValueError)):
        await store.intake(batch, now)

    for table in ("elicitation", "inbound", "delivery", "outbox", "deadline", "audit"):
        assert await store.count(table) == 0, table
    # The inbound ids of the first two were not kept either: they are new, not duplicates.
    outcomes = await store.intake(batch[:2], now)
    assert [o.result for o in outcomes] == ["accepted", "accepted"]
    assert await store.count("elicitation") == 2


async def test_a_batch_fails_whole_on_a_source_id_too_long_for_postgresql(
    pg_url: str, clock: FakeClock
) -> None:
    store = SqlStore.from_url(pg_url)
    try:
        now = clock.now()
        batch = [
            item(make(now, "eli_1"), "ev-1"),
            item(make(now, "eli_2"), "ev-2"),
            item(make(now, "x" * 361), "ev-3"),  # the column is VARCHAR(360)
        ]
        with pytest.raises(DBAPIError):
            await store.intake(batch, now)
        for table in ("elicitation", "inbound", "delivery", "outbox", "audit"):
            assert await store.count(table) == 0, table
    finally:
        await store.close()


async def test_followup_route_posts_only_the_first_destination_now(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    key = await accept(store, make(now), now, THREE_FOLLOWUP)

    deliveries = await store.deliveries(key)
    assert [(d.destination, d.position, d.state) for d in deliveries] == [
        (SLACK, 0, "planned"),
        (MATRIX, 1, "waiting"),
        (SLACK_2, 2, "waiting"),
    ]
    assert [(o.kind, o.target) for o in await store.outbox(key)] == [("post", SLACK)]


async def test_route_without_followup_posts_every_destination_now(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    key = await accept(store, make(now), now, THREE_NOW)

    assert [d.state for d in await store.deliveries(key)] == ["planned"] * 3
    assert [(o.kind, o.target) for o in await store.outbox(key)] == [
        ("post", SLACK),
        ("post", MATRIX),
        ("post", SLACK_2),
    ]


# -- answers -------------------------------------------------------------------------------------


async def test_first_answer_wins_and_the_second_learns_it(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now()), clock.now())
    now = clock.advance(10)
    alice = answer("slack:U0ALICE", now, "yes")
    bob = answer("matrix:@bob:example.org", now, "no", via=MATRIX)

    first = await store.record_answer(key, alice, now, approving=True, audit={"n": 1})
    second = await store.record_answer(key, bob, clock.advance(1), approving=False, audit={})

    assert (first.won, first.status, first.answer) == (True, Status.ANSWERED, alice)
    assert (second.won, second.status, second.answer) == (False, Status.ANSWERED, alice)
    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.version) == (Status.ANSWERED, alice, 2)
    assert stored.updated_at == now
    assert await store.count("answer") == 1
    assert [a.action for a in await store.audit(key)] == ["intake", "answer"]


async def test_answer_at_or_after_expiry_is_refused(store: SqlStore, clock: FakeClock) -> None:
    key = await accept(store, make(clock.now(), expires=3600), clock.now())

    for now in (clock.advance(3600), clock.advance(1)):
        result = await store.record_answer(
            key, answer("slack:U0ALICE", now), now, approving=False, audit={}
        )
        assert (result.won, result.status, result.answer) == (False, Status.PENDING, None)

    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.version) == (Status.PENDING, None, 1)
    assert await store.count("answer") == 0
    assert "writeback" not in kinds(await store.outbox(key))


async def test_approval_after_subject_expiry_is_refused_but_a_rejection_wins(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now(), subject_expires=600, expires=3600), clock.now())
    now = clock.advance(600)

    approve = await store.record_answer(
        key, answer("slack:U0ALICE", now, "yes"), now, approving=True, audit={}
    )
    assert (approve.won, approve.status) == (False, Status.PENDING)

    reject = answer("slack:U0BOB", now, "no")
    result = await store.record_answer(key, reject, now, approving=False, audit={})
    assert (result.won, result.status, result.answer) == (True, Status.ANSWERED, reject)


async def test_approval_before_subject_expiry_wins(store: SqlStore, clock: FakeClock) -> None:
    key = await accept(store, make(clock.now(), subject_expires=600), clock.now())
    now = clock.advance(599)

    result = await store.record_answer(
        key, answer("slack:U0ALICE", now, "yes"), now, approving=True, audit={}
    )

    assert result.won


async def test_an_answer_fenced_on_a_version_loses_to_a_revision_in_between(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, subject_expires=3600), t0)
    read = await store.get(key)
    assert read is not None
    # A new revision of the request lands after the judgement read version 1.
    [revised] = await store.intake([item(make(t0, question="Run it on prod?"), "ev-2")], t0)
    assert revised.result == "updated"
    now = clock.advance(5)
    alice = answer("slack:U0ALICE", now, "yes")

    stale = await store.record_answer(
        key, alice, now, approving=True, audit={}, version=read.version
    )

    assert (stale.won, stale.status, stale.answer) == (False, Status.PENDING, None)
    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.version) == (Status.PENDING, None, 2)
    assert await store.count("answer") == 0
    assert "writeback" not in kinds(await store.outbox(key))
    assert [a.action for a in await store.audit(key)] == ["intake", "revised"]

    current = await store.record_answer(
        key, alice, now, approving=True, audit={}, version=stored.version
    )
    assert (current.won, current.status, current.answer) == (True, Status.ANSWERED, alice)
    assert await store.count("answer") == 1


async def test_a_win_closes_everything_in_one_transaction(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60, escalate=600, expires=3600), t0, THREE_FOLLOWUP)
    await post_all(store, t0)  # the Slack copy is posted; the other two wait for the follow-up
    # The remind deadline has already fired: it must stay fired, not become cancelled.
    # The posted Slack copy also planned its follow-up (THREE_FOLLOWUP), due at the same time.
    due = await store.claim_deadlines(clock.advance(60), "sched")
    assert sorted(d.kind for d in due) == ["followup", "remind"]
    [remind] = [d for d in due if d.kind == "remind"]
    assert await store.mark_fired(remind.id, "sched", clock.now())
    now = clock.advance(30)
    alice = answer("slack:U0ALICE", now)

    assert (await store.record_answer(key, alice, now, approving=True, audit={"ui": "btn"})).won

    assert [(d.kind, d.state) for d in await store.deadlines(key)] == [
        ("remind", "fired"),
        ("followup", "cancelled"),
        ("escalate", "cancelled"),
        ("expire", "cancelled"),
    ]
    ds = by_destination(await store.deliveries(key))
    assert [ds[d].state for d in (SLACK, MATRIX, SLACK_2)] == ["posted", "skipped", "skipped"]
    # The source is told first; the posted copy is rewritten once it accepted the answer.
    outbox = await store.outbox(key)
    assert kinds(outbox) == {"post": 1, "writeback": 1}
    [writeback] = [o for o in outbox if o.kind == "writeback"]
    assert (writeback.target, writeback.state, writeback.next_attempt_at) == (
        "source",
        "pending",
        now,
    )
    stored = await store.get(key)
    assert stored is not None
    wb = stored.writeback
    assert wb is not None
    assert (wb.state, wb.round) == (WritebackState.SENDING, 1)
    # What the close put aside is kept, for a refusal to revive.
    assert sorted(wb.skipped) == sorted((ds[MATRIX].id, ds[SLACK_2].id))
    cancelled = [d.id for d in await store.deadlines(key) if d.state == "cancelled"]
    assert sorted(wb.cancelled) == sorted(cancelled)
    assert (stored.status, stored.answer) == (Status.ANSWERED, alice)
    answers = [a for a in await store.audit(key) if a.action == "answer"]
    assert [(a.actor, a.detail, a.at) for a in answers] == [("slack:U0ALICE", {"ui": "btn"}, now)]

    [claimed] = await store.claim_outbox(now, "w1")
    assert (claimed.kind, claimed.payload) == ("writeback", WritebackPayload(round=1))
    assert await store.complete_outbox(claimed, "w1", now)
    outbox = await store.outbox(key)
    assert kinds(outbox) == {"post": 1, "update": 1, "writeback": 1}
    [update] = [o for o in outbox if o.kind == "update"]
    assert (update.delivery_id, update.target, update.state) == (
        ds[SLACK].id,
        SLACK,
        "pending",
    )
    accepted = await store.get(key)
    assert accepted is not None
    assert accepted.writeback is not None
    assert accepted.writeback.state is WritebackState.ACCEPTED
    assert await store.claim_deadlines(clock.advance(3600), "sched") == []


async def test_close_elicitation_wins_once(store: SqlStore, clock: FakeClock) -> None:
    key = await accept(store, make(clock.now(), expires=60), clock.now())
    now = clock.advance(60)

    assert await store.close_elicitation(key, Status.EXPIRED, now, answer=None, audit={"by": "t"})
    assert not await store.close_elicitation(
        key, Status.CANCELLED, clock.advance(1), answer=None, audit={}
    )

    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.version) == (Status.EXPIRED, None, 2)
    assert kinds(await store.outbox(key))["writeback"] == 1
    assert [a.action for a in await store.audit(key)] == ["intake", "expired"]
    assert {d.state for d in await store.deadlines(key)} == {"cancelled"}
    late = await store.record_answer(
        key, answer("slack:U0ALICE", now), now, approving=False, audit={}
    )
    assert (late.won, late.status, late.answer) == (False, Status.EXPIRED, None)


async def test_close_with_a_system_decision_keeps_the_decision(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now(), expires=60), clock.now())
    now = clock.advance(60)
    decision = Answer(option_ids=("no",), respondent="system", via="timeout", at=now)

    assert await store.close_elicitation(key, Status.EXPIRED, now, answer=decision, audit={})

    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer) == (Status.EXPIRED, decision)
    loser = await store.record_answer(
        key, answer("slack:U0ALICE", now), now, approving=False, audit={}
    )
    assert (loser.won, loser.answer) == (False, decision)


async def test_refusal_is_audited(store: SqlStore, clock: FakeClock) -> None:
    key = await accept(store, make(clock.now()), clock.now())

    await store.record_refusal(key, "slack:U0AGENT", "asker", clock.now(), {"x": 1})
    await store.record_refusal(key, "slack:U0MALLORY", "not_admin", clock.now(), {})

    refusals = [a for a in await store.audit(key) if a.action == "refusal"]
    assert [(a.actor, a.code) for a in refusals] == [
        ("slack:U0AGENT", "asker"),
        ("slack:U0MALLORY", "not_admin"),
    ]
    assert [a.detail for a in refusals] == [{"x": 1}, None]
    assert [o for o in await store.outbox(key) if o.kind == "notify"] == []
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING


# -- outbox --------------------------------------------------------------------------------------


async def test_claim_outbox_claims_each_due_row_once(store: SqlStore, clock: FakeClock) -> None:
    now = clock.now()
    key = await accept(store, make(now), now, THREE_NOW)

    claimed = await store.claim_outbox(now, "w1", limit=2)
    rest = await store.claim_outbox(now, "w2")
    again = await store.claim_outbox(now, "w3")

    assert [(i.target, i.kind, i.attempts) for i in claimed] == [
        (SLACK, "post", 1),
        (MATRIX, "post", 1),
    ]
    assert [i.target for i in rest] == [SLACK_2]
    assert again == []
    assert {o.claimed_by for o in await store.outbox(key)} == {"w1", "w2"}
    assert [d.state for d in await store.deliveries(key)] == ["posting"] * 3


async def test_rows_not_yet_due_are_not_claimed(store: SqlStore, clock: FakeClock) -> None:
    now = clock.now()
    await accept(store, make(now), now)

    assert await store.claim_outbox(at(now, seconds=-1), "w1") == []
    assert len(await store.claim_outbox(now, "w1")) == 2


async def test_two_concurrent_claimers_get_disjoint_sets(
    db_url: str, store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    await store.intake([item(make(now, f"eli_{n}"), f"ev-{n}", THREE_NOW) for n in range(10)], now)
    all_ids = {o.id for o in await store.outbox()}
    assert len(all_ids) == 30
    a, b = SqlStore.from_url(db_url), SqlStore.from_url(db_url)
    try:
        got: dict[str, list[int]] = {"a": [], "b": []}
        for _ in range(15):
            batch_a, batch_b = await asyncio.gather(
                a.claim_outbox(now, "a", limit=4), b.claim_outbox(now, "b", limit=4)
            )
            # One post per channel in flight, whoever claims it: three channels, three posts.
            lanes = [i.lane for i in batch_a + batch_b]
            assert len(lanes) == len(set(lanes)) <= 3
            got["a"] += [i.id for i in batch_a]
            got["b"] += [i.id for i in batch_b]
            for owner, batch in (("a", batch_a), ("b", batch_b)):
                for done in batch:
                    assert await store.complete_outbox(done, owner, now)
    finally:
        await asyncio.gather(a.close(), b.close())

    assert not set(got["a"]) & set(got["b"])
    assert len(got["a"]) + len(got["b"]) == 30
    assert set(got["a"]) | set(got["b"]) == all_ids
    owners = {o.id: o.claimed_by for o in await store.outbox()}
    assert all(owners[i] == "a" for i in got["a"])
    assert all(owners[i] == "b" for i in got["b"])


async def test_complete_post_records_the_ref_and_the_delivery_is_posted(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now()), clock.now())
    slack, matrix = await store.claim_outbox(clock.now(), "w1")
    now = clock.advance(2)

    assert await store.complete_outbox(slack, "w1", now, ref=SlackRef("C0", "1.2"))

    ds = by_destination(await store.deliveries(key))
    assert (ds[SLACK].state, ds[SLACK].ref, ds[SLACK].posted_at) == (
        "posted",
        SlackRef("C0", "1.2"),
        now,
    )
    assert ds[MATRIX].state == "posting"
    rows = {o.id: o for o in await store.outbox(key)}
    assert (rows[slack.id].state, rows[slack.id].done_at) == ("done", now)
    assert rows[matrix.id].state == "claimed"
    # Done rows are never claimed again, even long after their lease; a retaken row keeps the
    # time of its first attempt (an uncertain post looks for itself from then on).
    assert await store.claim_outbox(clock.advance(3600), "w2") == [
        OutboxItem(
            matrix.id,
            key,
            EffectKind.POST,
            MATRIX,
            matrix.delivery_id,
            PostPayload(),
            2,
            version=1,
            lane=f"chat:{MATRIX}",
            first_attempt_at=matrix.first_attempt_at,
        )
    ]
    assert matrix.first_attempt_at == now - timedelta(seconds=2)


async def test_complete_by_another_claimer_is_refused(store: SqlStore, clock: FakeClock) -> None:
    key = await accept(store, make(clock.now()), clock.now())
    slack, _ = await store.claim_outbox(clock.now(), "w1")

    assert not await store.complete_outbox(slack, "w2", clock.now(), ref=SlackRef("C0", "x"))

    ds = by_destination(await store.deliveries(key))
    assert (ds[SLACK].state, ds[SLACK].ref) == ("posting", None)
    rows = {o.id: o for o in await store.outbox(key)}
    assert (rows[slack.id].state, rows[slack.id].claimed_by) == ("claimed", "w1")
    assert await store.complete_outbox(slack, "w1", clock.now(), ref=SlackRef("C0", "y"))
    assert not await store.complete_outbox(slack, "w1", clock.now(), ref=SlackRef("C0", "z"))
    assert by_destination(await store.deliveries(key))[SLACK].ref == SlackRef("C0", "y")


async def test_retry_makes_the_row_due_again_at_the_given_time(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, THREE_FOLLOWUP)
    [post] = await store.claim_outbox(t0, "w1")
    retry_at = at(t0, seconds=30)

    await store.retry_outbox(post, "w1", "429 Retry-After: 30", retry_at)

    [row] = await store.outbox(key)
    assert (row.state, row.claimed_by, row.last_error) == (
        "pending",
        None,
        "429 Retry-After: 30",
    )
    assert await store.next_outbox_at() == retry_at
    assert await store.claim_outbox(at(t0, seconds=29), "w2") == []
    [again] = await store.claim_outbox(retry_at, "w2")
    assert (again.id, again.attempts) == (post.id, 2)


async def test_retry_by_another_claimer_changes_nothing(store: SqlStore, clock: FakeClock) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, THREE_FOLLOWUP)
    [post] = await store.claim_outbox(t0, "w1")

    await store.retry_outbox(post, "intruder", "boom", t0)

    [row] = await store.outbox(key)
    assert (row.state, row.claimed_by, row.last_error) == ("claimed", "w1", None)


async def test_fail_marks_the_delivery_failed_with_an_audit_row(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now()), clock.now())
    slack, _ = await store.claim_outbox(clock.now(), "w1")
    now = clock.advance(3)

    await store.fail_outbox(slack, "w1", "channel_not_found", now)

    ds = by_destination(await store.deliveries(key))
    assert (ds[SLACK].state, ds[SLACK].error) == ("failed", "channel_not_found")
    assert ds[MATRIX].state == "posting"
    rows = {o.id: o for o in await store.outbox(key)}
    assert (rows[slack.id].state, rows[slack.id].last_error, rows[slack.id].done_at) == (
        "failed",
        "channel_not_found",
        now,
    )
    [failed] = [a for a in await store.audit(key) if a.action == "post_failed"]
    assert failed.detail == {"target": SLACK, "error": "channel_not_found"}
    assert failed.at == now
    assert [i.id for i in await store.claim_outbox(clock.advance(3600), "w2")] == [
        o for o in rows if o != slack.id
    ]


async def test_fail_by_a_claimer_that_lost_its_lease_changes_nothing(
    store: SqlStore, clock: FakeClock
) -> None:
    key = await accept(store, make(clock.now()), clock.now(), THREE_FOLLOWUP)
    [stale] = await store.claim_outbox(clock.now(), "w1", lease=timedelta(seconds=10))
    [fresh] = await store.claim_outbox(clock.advance(11), "w2")
    assert await store.complete_outbox(fresh, "w2", clock.now(), ref=SlackRef("C0", "1.1"))

    await store.fail_outbox(stale, "w1", "timeout", clock.advance(1))

    [delivery] = [d for d in await store.deliveries(key) if d.destination == SLACK]
    assert (delivery.state, delivery.ref) == ("posted", SlackRef("C0", "1.1"))
    assert "post_failed" not in [a.action for a in await store.audit(key)]


async def test_an_expired_lease_is_claimable_again_and_fences_the_old_claimer(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    await accept(store, make(t0), t0, THREE_FOLLOWUP)
    [first] = await store.claim_outbox(t0, "w1", lease=timedelta(seconds=60))

    assert await store.claim_outbox(at(t0, seconds=60), "w2") == []  # the lease still holds
    [second] = await store.claim_outbox(at(t0, seconds=61), "w2")

    assert (second.id, second.attempts) == (first.id, 2)
    assert not await store.complete_outbox(
        first, "w1", at(t0, seconds=62), ref=SlackRef("C0", "old")
    )
    assert await store.complete_outbox(second, "w2", at(t0, seconds=62), ref=SlackRef("C0", "new"))


async def test_release_claims_gives_rows_back(store: SqlStore, clock: FakeClock) -> None:
    now = clock.now()
    key = await accept(store, make(now), now, THREE_NOW)
    mine = await store.claim_outbox(now, "w1", limit=2)
    theirs = await store.claim_outbox(now, "w2")
    assert (len(mine), len(theirs)) == (2, 1)

    assert await store.release_claims("nobody") == 0
    assert await store.release_claims("w1") == 2

    by_id = {o.id: o for o in await store.outbox(key)}
    assert [(by_id[i.id].state, by_id[i.id].claimed_by) for i in mine] == [("pending", None)] * 2
    assert by_id[theirs[0].id].state == "claimed"
    assert sorted(i.id for i in await store.claim_outbox(now, "w3")) == sorted(i.id for i in mine)
    assert await store.release_claims() == 3
    assert {o.state for o in await store.outbox(key)} == {"pending"}


async def test_post_completed_after_the_answer_enqueues_an_update_for_that_copy(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0)
    slack, matrix = await store.claim_outbox(t0, "w1")
    assert await store.complete_outbox(slack, "w1", t0, ref=SlackRef("C0", "1"))
    now = clock.advance(5)
    assert (
        await store.record_answer(key, answer("slack:U1", now), now, approving=True, audit={})
    ).won
    ds = by_destination(await store.deliveries(key))
    # No copy is rewritten before the source accepted the answer, which is on its way.
    assert pending_updates(await store.outbox(key)) == {}
    [writeback] = await store.claim_outbox(now, "w1")
    assert writeback.kind == "writeback"

    assert await store.complete_outbox(
        matrix, "w1", clock.advance(1), ref=MatrixRef("!room:example.org", "$e")
    )

    # The late copy is brought up to date (it was rendered before the answer).
    assert pending_updates(await store.outbox(key)) == {ds[MATRIX].id: 1}

    assert await store.complete_outbox(writeback, "w1", clock.advance(1))

    # Accepted: every posted copy is rewritten, the Matrix one's update coalesced.
    assert pending_updates(await store.outbox(key)) == {ds[SLACK].id: 1, ds[MATRIX].id: 1}
    rows = [o for o in await store.outbox(key) if o.delivery_id == ds[MATRIX].id]
    assert [(o.kind, o.target, o.state) for o in rows] == [
        ("post", MATRIX, "done"),
        ("update", MATRIX, "pending"),
    ]


async def test_late_post_does_not_re_update_copies_already_brought_up_to_date(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0)
    slack, matrix = await store.claim_outbox(t0, "w1")
    assert await store.complete_outbox(slack, "w1", t0, ref=SlackRef("C0", "1"))
    now = clock.advance(5)
    assert (
        await store.record_answer(key, answer("slack:U1", now), now, approving=True, audit={})
    ).won
    [writeback] = await store.claim_outbox(now, "w1")
    assert writeback.kind == "writeback"
    assert await store.complete_outbox(writeback, "w1", now)  # the source accepted it
    [update] = [i for i in await store.claim_outbox(now, "w1") if i.kind == "update"]
    assert await store.complete_outbox(update, "w1", now)  # the Slack copy shows the answer

    assert await store.complete_outbox(
        matrix, "w1", clock.advance(1), ref=MatrixRef("!room:example.org", "$e")
    )

    updates = Counter(o.target for o in await store.outbox(key) if o.kind == "update")
    assert updates == {SLACK: 1, MATRIX: 1}


async def test_post_completed_after_a_revision_enqueues_an_update_for_that_copy(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, THREE_FOLLOWUP)
    [post] = await store.claim_outbox(t0, "w1")  # rendered from version 1 by the worker
    [outcome] = await store.intake([item(make(t0, question="v2"), "ev-2", THREE_FOLLOWUP)], t0)
    assert outcome.result == "updated"

    assert await store.complete_outbox(post, "w1", clock.advance(1), ref=SlackRef("C0", "1"))

    assert pending_updates(await store.outbox(key)) == {post.delivery_id: 1}


# -- deadlines -----------------------------------------------------------------------------------


async def test_claim_deadlines_returns_only_due_pending_unclaimed_rows(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    open_key = await accept(store, make(t0, "eli_open", remind=60, escalate=70), t0)
    done_key = await accept(store, make(t0, "eli_done", remind=60), t0, inbound="ev-2")
    assert (
        await store.record_answer(done_key, answer("slack:U1", t0), t0, approving=False, audit={})
    ).won

    assert await store.claim_deadlines(at(t0, seconds=59), "s1") == []
    [remind] = await store.claim_deadlines(at(t0, seconds=60), "s1")
    assert (remind.elicitation_key, remind.kind, remind.due_at) == (
        open_key,
        "remind",
        at(t0, seconds=60),
    )
    # Claimed (lease 30 s): nobody else gets it, even once the next one is due.
    [escalate] = await store.claim_deadlines(at(t0, seconds=70), "s2", limit=10)
    assert escalate.kind == "escalate"
    assert await store.claim_deadlines(at(t0, seconds=70), "s3") == []
    # Fired rows are never claimed again; a claim whose lease ran out is.
    assert await store.mark_fired(remind.id, "s1", at(t0, seconds=71))
    [reclaimed] = await store.claim_deadlines(at(t0, seconds=101), "s3")
    assert reclaimed.id == escalate.id
    rows = {d.id: d for d in await store.deadlines(open_key)}
    assert (rows[remind.id].state, rows[remind.id].fired_at) == (
        "fired",
        at(t0, seconds=71),
    )
    assert (rows[escalate.id].claimed_by, rows[escalate.id].state) == ("s3", "pending")


async def test_claim_deadlines_orders_by_due_time_and_honours_the_limit(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    await store.intake(
        [item(make(t0, f"eli_{n}", remind=100 - n), f"ev-{n}") for n in range(5)], t0
    )

    first = await store.claim_deadlines(at(t0, seconds=200), "s1", limit=3)
    rest = await store.claim_deadlines(at(t0, seconds=200), "s2", limit=3)

    assert [d.due_at for d in first] == [at(t0, seconds=s) for s in (96, 97, 98)]
    assert [d.due_at for d in rest] == [at(t0, seconds=s) for s in (99, 100)]


async def test_mark_fired_is_fenced_on_the_claimer(store: SqlStore, clock: FakeClock) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    [stale] = await store.claim_deadlines(at(t0, seconds=60), "s1", lease=timedelta(seconds=30))
    [fresh] = await store.claim_deadlines(at(t0, seconds=91), "s2")
    assert fresh.id == stale.id

    assert not await store.mark_fired(stale.id, "s1", at(t0, seconds=92))
    assert await store.mark_fired(fresh.id, "s2", at(t0, seconds=92))
    assert not await store.mark_fired(fresh.id, "s2", at(t0, seconds=93))

    [row] = await store.deadlines(key)
    assert (row.state, row.claimed_by, row.fired_at) == (
        "fired",
        "s2",
        at(t0, seconds=92),
    )


async def test_mark_fired_refuses_a_deadline_cancelled_meanwhile(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    [due] = await store.claim_deadlines(at(t0, seconds=60), "s1")
    assert (
        await store.record_answer(key, answer("slack:U1", t0), t0, approving=False, audit={})
    ).won

    assert not await store.mark_fired(due.id, "s1", at(t0, seconds=61))
    assert [d.state for d in await store.deadlines(key)] == ["cancelled"]


# -- reads ---------------------------------------------------------------------------------------


async def test_resolve_key_by_full_key_and_by_bare_source_id(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    await store.intake(
        [
            item(make(now, "eli_only"), "ev-1"),
            item(make(now, "shared_id"), "ev-2"),
            item(make(now, "shared_id", source="handup"), "ev-3"),
        ],
        now,
    )

    assert await store.resolve_key(f"{SOURCE}:eli_only") == f"{SOURCE}:eli_only"
    assert await store.resolve_key("eli_only") == f"{SOURCE}:eli_only"
    assert await store.resolve_key("handup:shared_id") == "handup:shared_id"
    assert await store.resolve_key("shared_id") is None  # ambiguous without its source
    assert await store.resolve_key("eli_missing") is None
    assert await store.get(ElicitationKey("handup:missing")) is None


async def test_list_elicitations_newest_first_with_cursor_and_status(
    store: SqlStore, clock: FakeClock
) -> None:
    keys = []
    for n in range(5):
        now = clock.advance(60)
        keys.append(await accept(store, make(now, f"eli_{n}"), now, inbound=f"ev-{n}"))
    # Two more created in the same instant: ties are ordered by key, newest-first still holds.
    tie = clock.now()
    outcomes = await store.intake(
        [item(make(tie, "eli_tie_a"), "ev-a"), item(make(tie, "eli_tie_b"), "ev-b")], tie
    )
    keys += [o.key for o in outcomes]
    expected = [keys[6], keys[5], keys[4], keys[3], keys[2], keys[1], keys[0]]
    assert (
        await store.record_answer(keys[2], answer("slack:U1", tie), tie, approving=False, audit={})
    ).won

    pages: list[list[str]] = []
    after: str | None = None
    while True:
        page: list[str] = [
            s.elicitation.key for s in await store.list_elicitations(after=after, limit=3)
        ]
        if not page:
            break
        pages.append(page)
        after = page[-1]

    assert pages == [expected[0:3], expected[3:6], expected[6:]]
    pending = [s.elicitation.key for s in await store.list_elicitations(status="pending")]
    assert pending == [k for k in expected if k != keys[2]]
    answered = await store.list_elicitations(status="answered")
    assert [(s.elicitation.key, s.status) for s in answered] == [(keys[2], Status.ANSWERED)]
    second_page = await store.list_elicitations(status="pending", after=expected[1], limit=2)
    assert [s.elicitation.key for s in second_page] == [expected[2], expected[3]]


async def test_reads_of_deliveries_deadlines_and_audit(store: SqlStore, clock: FakeClock) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, expires=300, remind=100, escalate=200), t0, THREE_FOLLOWUP)
    other = await accept(store, make(t0, "eli_other", remind=50), t0, inbound="ev-2")
    await store.record_refusal(key, "slack:U0AGENT", "asker", at(t0, seconds=1), {})

    deliveries = await store.deliveries(key)
    assert [d.destination for d in deliveries] == [SLACK, MATRIX, SLACK_2]
    assert all(d.elicitation_key == key and d.purpose == "primary" for d in deliveries)
    assert await store.delivery(deliveries[1].id) == deliveries[1]
    assert await store.delivery(10_000) is None
    assert [(d.kind, d.due_at) for d in await store.deadlines(key)] == [
        ("remind", at(t0, seconds=100)),
        ("escalate", at(t0, seconds=200)),
        ("expire", at(t0, seconds=300)),
    ]
    assert [(a.action, a.at) for a in await store.audit(key)] == [
        ("intake", t0),
        ("refusal", at(t0, seconds=1)),
    ]
    assert [a.action for a in await store.audit(other)] == ["intake"]
    assert [o.elicitation_key for o in await store.outbox()] == [key, other, other]
    assert await store.next_outbox_at() == t0


async def test_first_time_records_a_chat_event_id_once(store: SqlStore, clock: FakeClock) -> None:
    assert await store.first_time("slack", "Ev01", clock.now())
    assert not await store.first_time("slack", "Ev01", clock.now())
    assert await store.first_time("matrix", "Ev01", clock.now())


async def test_key_for_message_finds_the_elicitation_of_a_posted_copy(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0)
    slack, _ = await store.claim_outbox(t0, "w1")
    assert await store.key_for_message("C0/1.2") is None
    await store.complete_outbox(slack, "w1", t0, ref=SlackRef("C0", "1.2"))
    assert await store.key_for_message("C0/1.2") == key


async def test_a_duplicate_inbound_id_names_the_elicitation_it_was_first_stored_as(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    first = await accept(store, make(t0, "eli_first"), t0, inbound="ev-same")
    [outcome] = await store.intake([item(make(t0, "eli_other"), "ev-same")], t0)
    assert (outcome.key, outcome.result) == (first, "duplicate")

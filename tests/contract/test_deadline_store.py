"""The store's deadline operations, on SQLite and on PostgreSQL (every test runs on both).

Planning at intake and at post acceptance, firing claimed deadlines (fenced on the claim, decided
on the elicitation as it stands), follow-up and fallback, escalation copies, expiry (also at
intake), claims, and the Timekeeper driving it all with a FakeClock.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from bot.domain import deadlines as dl
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
    People,
    Route,
    Status,
)
from bot.domain.payloads import WritebackPayload
from bot.domain.planning import display_hash
from bot.domain.records import DueDeadline, IntakeItem, OutboxItem
from bot.domain.refs import SlackRef
from bot.domain.store import Store
from bot.timekeeper import Timekeeper
from store.sql import SqlStore
from tests.conftest import FakeClock

SLACK = "slack:C0APPROVALS"
MATRIX = "matrix:!room:example.org"
ONCALL = "slack:C0ONCALL"
OPTIONS = (
    Option(id="yes", label="Yes", meaning=Meaning.APPROVE),
    Option(id="no", label="No", meaning=Meaning.REJECT),
)
TWO = Route(destinations=(SLACK, MATRIX), mention=("slack:U0ALICE",), escalate_to=(ONCALL,))
FOLLOW = Route(destinations=(SLACK, MATRIX, "web"), followup_seconds=60)
ADMINS = frozenset({"slack:U0ADMIN"})
decide = partial(dl.fire, admins=ADMINS)


def make(
    created: datetime,
    source_id: str = "eli_0001",
    *,
    question: str = "May I run the migration?",
    on_timeout: str | None = None,
    subject_expires: datetime | None = None,
    **seconds: float,
) -> Elicitation:
    """``seconds``: remind / escalate / expires, in seconds after ``created``."""

    def after(name: str) -> datetime | None:
        value = seconds.get(name)
        return None if value is None else created + timedelta(seconds=value)

    subject = None
    if subject_expires is not None:
        subject = ApprovalSubject.model_validate(
            {
                "id": "sub_1",
                "digest": "sha256:00ff",
                "schema": "stk-capability/v1",
                "revision": 1,
                "expires_at": subject_expires,
            }
        )
    return Elicitation(
        source="superpipeline",
        source_id=source_id,
        workspace="acme",
        asker="agt_9e8d7c6b5a493827",
        kind=Kind.APPROVAL,
        question=question,
        answer_mode=AnswerMode.SINGLE_CHOICE,
        options=OPTIONS,
        subject=subject,
        deadlines=Deadlines(
            remind_at=after("remind"),
            escalate_at=after("escalate"),
            expires_at=after("expires"),
            on_timeout=on_timeout,
        ),
        created_at=created,
    )


def item(e: Elicitation, route: Route = TWO, inbound: str | None = None) -> IntakeItem:
    return IntakeItem(
        channel="ce:superpipeline",
        inbound_id=inbound or f"ev-{e.source_id}-{display_hash(e)[:8]}",
        elicitation=e,
        route=route,
        display_hash=display_hash(e),
    )


async def accept(
    store: SqlStore, e: Elicitation, now: datetime, route: Route = TWO
) -> ElicitationKey:
    [outcome] = await store.intake([item(e, route)], now)
    assert outcome.result == "accepted"
    return outcome.key


async def post_all(store: SqlStore, now: datetime, claimer: str = "w1") -> list[OutboxItem]:
    """Claim every due outbox row and complete the posts (the platform accepted them), round
    after round: a channel's lane has one post in flight at a time."""
    claimed: list[OutboxItem] = []
    while True:
        round_ = await store.claim_outbox(now, claimer, limit=100)
        claimed += round_
        posts = [it for it in round_ if it.kind == "post"]
        for it in posts:
            ref = SlackRef(it.target, f"ts-{it.id}")
            assert await store.complete_outbox(it, claimer, now, ref=ref)
        if not posts:
            return claimed


async def fire_due(store: Store, now: datetime, claimer: str = "tk") -> list[Any]:
    due = await store.claim_deadlines(now, claimer, limit=100)
    return await store.fire_deadlines(due, claimer, now, decide)


async def deadline_rows(store: SqlStore, key: ElicitationKey) -> list[tuple[str, datetime, str]]:
    """(kind, due, state) by due time, then in the order they were planned."""
    rows = sorted(await store.deadlines(key), key=lambda d: (d.due_at, d.id))
    return [(d.kind, d.due_at, d.state) for d in rows]


async def outbox_of(
    store: SqlStore, key: ElicitationKey, kind: str, state: str = "pending"
) -> list[Any]:
    return [o for o in await store.outbox(key) if o.kind == kind and o.state == state]


def at(base: datetime, seconds: float) -> datetime:
    return base + timedelta(seconds=seconds)


# --------------------------------------------------------------------------- planning


async def test_intake_plans_the_subjects_expiry_and_a_revision_replaces_the_plan(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    e = make(t0, remind=60, escalate=120, expires=600, subject_expires=at(t0, 300))
    key = await accept(store, e, t0)

    assert await deadline_rows(store, key) == [
        ("remind", at(t0, 60), "pending"),
        ("escalate", at(t0, 120), "pending"),
        ("subject_expired", at(t0, 300), "pending"),
        ("expire", at(t0, 600), "pending"),
    ]

    revised = make(
        t0, question="v2", remind=90, expires=900, subject_expires=at(t0, 400)
    )  # no escalation any more
    [outcome] = await store.intake([item(revised)], clock.advance(1))
    assert outcome.result == "updated"
    assert await deadline_rows(store, key) == [
        ("remind", at(t0, 90), "pending"),
        ("subject_expired", at(t0, 400), "pending"),
        ("expire", at(t0, 900), "pending"),
    ]


@pytest.mark.parametrize(
    ("on_timeout", "recorded"), [(None, None), ("expire", None), ("deny", ("no",))]
)
async def test_an_elicitation_already_expired_at_intake_is_stored_expired_and_never_posted(
    store: SqlStore, clock: FakeClock, on_timeout: str | None, recorded: tuple[str, ...] | None
) -> None:
    t0 = clock.now()
    e = make(at(t0, -3600), remind=60, expires=3599, on_timeout=on_timeout)

    key = await accept(store, e, t0)

    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.EXPIRED
    if recorded is None:
        assert stored.answer is None
    else:
        assert stored.answer is not None
        assert (stored.answer.option_ids, stored.answer.respondent) == (recorded, "system")
    assert [d.state for d in await store.deliveries(key)] == ["skipped", "skipped"]
    assert await store.deadlines(key) == []  # no reminder, no expiry to fire later
    assert Counter(o.kind for o in await store.outbox(key)) == {"writeback": 1}
    assert [a.action for a in await store.audit(key)] == ["intake", "expired"]
    assert await fire_due(store, clock.advance(3600)) == []


async def test_a_revision_to_an_expiry_already_past_closes_it(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, expires=600), t0)
    await post_all(store, t0)

    [outcome] = await store.intake([item(make(t0, question="v2", expires=5))], clock.advance(10))

    assert outcome.result == "updated"
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.EXPIRED
    assert len(await outbox_of(store, key, "writeback")) == 1
    assert {d.state for d in await store.deadlines(key)} == {"cancelled"}


async def test_a_post_accepted_by_its_platform_plans_the_follow_up(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, FOLLOW)
    assert [d.state for d in await store.deliveries(key)] == ["planned", "waiting", "waiting"]
    assert await store.deadlines(key) == []

    accepted = clock.advance(2)
    await post_all(store, accepted)

    assert await deadline_rows(store, key) == [("followup", at(accepted, 60), "pending")]
    [row] = await store.deadlines(key)
    first = (await store.deliveries(key))[0]
    assert row.detail == {"after": first.id}


async def test_no_follow_up_when_off_for_the_last_destination_or_after_an_answer(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    off = await accept(store, make(t0, "eli_off"), t0, TWO)
    one = await accept(store, make(t0, "eli_one"), t0, Route(destinations=(SLACK,)))
    await post_all(store, t0)  # one post of a channel in flight at a time: round after round
    answered = await accept(store, make(t0, "eli_answered"), t0, FOLLOW)
    [late_post] = await store.claim_outbox(t0, "w1", limit=100)
    won = await store.record_answer(
        answered,
        Answer(option_ids=("no",), respondent="slack:U0BOB", via=SLACK, at=t0),
        t0,
        approving=False,
        audit={},
    )
    assert won.won
    assert await store.complete_outbox(late_post, "w1", t0, ref=SlackRef("C0", str(late_post.id)))

    for key in (off, one, answered):
        assert [d for d in await store.deadlines(key) if d.kind == "followup"] == []


async def test_an_inbox_first_route_starts_its_follow_up_at_intake(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    route = Route(destinations=("web", SLACK), followup_seconds=30)

    key = await accept(store, make(t0), t0, route)

    assert [d.state for d in await store.deliveries(key)] == ["posted", "waiting"]
    assert await deadline_rows(store, key) == [("followup", at(t0, 30), "pending")]


# --------------------------------------------------------------------------- follow-up and fallback


async def test_the_follow_up_delivers_to_the_next_destination_and_the_chain_goes_on(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, FOLLOW)
    await post_all(store, t0)

    assert await fire_due(store, at(t0, 59)) == []
    [fired] = await fire_due(store, clock.advance(60))

    assert (fired.kind, fired.outcome) == ("followup", "fired")
    slack, matrix, web = await store.deliveries(key)
    assert (slack.state, matrix.state, web.state) == ("posted", "planned", "waiting")
    [post] = await outbox_of(store, key, "post")
    assert (post.target, post.delivery_id) == (MATRIX, matrix.id)
    assert [a.action for a in await store.audit(key)][-1] == "followed_up"

    # Matrix accepts it: the inbox, last in line, follows it; it then has no follow-up of its own.
    await post_all(store, clock.advance(1))
    [fired] = await fire_due(store, clock.advance(60))
    assert fired.outcome == "fired"
    assert [d.state for d in await store.deliveries(key)] == ["posted", "posted", "posted"]
    assert [d.state for d in await store.deadlines(key) if d.state == "pending"] == []
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING, "earlier copies stay answerable"


async def test_a_permanent_failure_falls_back_to_the_next_destination_at_once(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0, FOLLOW)
    [post] = await store.claim_outbox(t0, "w1")

    assert await store.fail_outbox(post, "w1", "channel_not_found", clock.advance(1))

    slack, matrix, web = await store.deliveries(key)
    assert (slack.state, matrix.state, web.state) == ("failed", "planned", "waiting")
    [next_post] = await outbox_of(store, key, "post")
    assert next_post.target == MATRIX
    [fallback] = [a for a in await store.audit(key) if a.action == "fallback"]
    assert fallback.detail == {"from": SLACK, "to": MATRIX}
    assert await store.deadlines(key) == []  # Matrix has not accepted it yet: no follow-up


async def test_an_escalation_copy_that_fails_has_no_fallback(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    route = FOLLOW.model_copy(update={"escalate_to": (ONCALL,)})
    key = await accept(store, make(t0, escalate=10), t0, route)
    await post_all(store, t0)
    await fire_due(store, clock.advance(10))
    claimed = await store.claim_outbox(clock.now(), "w1")
    [escalation_post] = [c for c in claimed if c.kind == "post"]
    assert escalation_post.target == ONCALL

    assert await store.fail_outbox(escalation_post, "w1", "is_archived", clock.now())

    assert [(d.destination, d.purpose, d.state) for d in await store.deliveries(key)] == [
        (SLACK, "primary", "posted"),
        (MATRIX, "primary", "waiting"),
        ("web", "primary", "waiting"),
        (ONCALL, "escalation", "failed"),
    ]
    assert [a for a in await store.audit(key) if a.action == "fallback"] == []


# --------------------------------------------------------------------------- reminders


async def test_a_reminder_writes_one_thread_notice_per_live_copy_and_updates_every_copy(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    await post_all(store, t0)
    before = await store.get(key)
    assert before is not None

    [fired] = await fire_due(store, clock.advance(61))

    assert (fired.kind, fired.outcome, fired.due_at) == ("remind", "fired", at(t0, 60))
    slack, matrix = await store.deliveries(key)
    notices = await outbox_of(store, key, "notify")
    assert [(n.target, n.delivery_id) for n in notices] == [
        (SLACK, slack.id),
        (MATRIX, matrix.id),
    ]
    assert notices[0].payload == {
        "kind": "reminder",
        "user": "",
        "thread": slack.ref.to_json() if slack.ref else None,
        "text": "⏰ Reminder: “May I run the migration?” is still waiting for an answer.",
        "mentions": ["slack:U0ALICE"],
    }
    assert notices[1].payload["mentions"] == []
    assert sorted(u.delivery_id for u in await outbox_of(store, key, "update")) == [
        slack.id,
        matrix.id,
    ]
    after = await store.get(key)
    assert after is not None
    assert after.version == before.version + 1
    [row] = await store.deadlines(key)
    assert (row.state, row.fired_at, row.claimed_by) == ("fired", clock.now(), "tk")
    [audit] = [a for a in await store.audit(key) if a.action == "reminded"]
    assert audit.detail == {"due_at": at(t0, 60).isoformat(), "copies": 2}

    assert await fire_due(store, clock.advance(3600)) == []


async def test_an_answer_between_claim_and_fire_writes_nothing(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    await post_all(store, t0)
    due = await store.claim_deadlines(clock.advance(60), "tk")
    answer = Answer(option_ids=("no",), respondent="slack:U0BOB", via=SLACK, at=clock.now())
    assert (await store.record_answer(key, answer, clock.now(), approving=False, audit={})).won

    [fired] = await store.fire_deadlines(due, "tk", clock.now(), decide)

    assert fired.outcome == "lost"
    assert await outbox_of(store, key, "notify") == []
    assert [d.state for d in await store.deadlines(key)] == ["cancelled"]


async def test_firing_is_fenced_on_the_claim(store: SqlStore, clock: FakeClock) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    await post_all(store, t0)
    stale = await store.claim_deadlines(at(t0, 60), "old", lease=timedelta(seconds=5))
    fresh = await store.claim_deadlines(at(t0, 66), "new")
    assert [d.id for d in stale] == [d.id for d in fresh]

    assert [f.outcome for f in await store.fire_deadlines(stale, "old", at(t0, 67), decide)] == [
        "lost"
    ]
    assert [f.outcome for f in await store.fire_deadlines(fresh, "new", at(t0, 67), decide)] == [
        "fired"
    ]
    assert [f.outcome for f in await store.fire_deadlines(fresh, "new", at(t0, 68), decide)] == [
        "lost"
    ]
    assert len(await outbox_of(store, key, "notify")) == 2


# --------------------------------------------------------------------------- escalation


async def test_escalation_adds_an_answerable_copy_per_destination_once(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    route = TWO.model_copy(update={"escalate_to": (ONCALL, "web")})
    key = await accept(store, make(t0, escalate=60), t0, route)
    await post_all(store, t0)

    [fired] = await fire_due(store, clock.advance(60))

    assert fired.outcome == "fired"
    copies = await store.deliveries(key)
    escalations = [d for d in copies if d.purpose == "escalation"]
    assert [(d.destination, d.position, d.state) for d in escalations] == [
        (ONCALL, 0, "planned"),
        ("web", 1, "posted"),
    ]
    slack, matrix = copies[:2]
    assert slack.ref is not None
    assert matrix.ref is not None
    assert escalations[0].escalation == dl.Escalation(
        mentions=("slack:U0ADMIN",),
        originals=(dl.Original(SLACK, slack.ref), dl.Original(MATRIX, matrix.ref)),
    )
    [post] = await outbox_of(store, key, "post")
    assert (post.target, post.delivery_id, post.payload) == (
        ONCALL,
        escalations[0].id,
        {"purpose": "escalation"},
    )

    # Re-planned by a revision: the destinations already escalated to get no second copy.
    [outcome] = await store.intake(
        [item(make(t0, question="v2", escalate=120), route)], clock.now()
    )
    assert outcome.result == "updated"
    [again] = await fire_due(store, clock.advance(60))
    assert again.kind == "escalate"
    assert len([d for d in await store.deliveries(key) if d.purpose == "escalation"]) == 2
    assert len(await outbox_of(store, key, "post")) == 1


async def test_a_claim_defers_escalation_to_its_lapse_and_updates_every_copy(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, escalate=60, remind=90), t0)
    await post_all(store, t0)
    until = at(t0, 600)

    assert await store.claim(key, "slack:U0BOB", "Bob", until, clock.advance(10))

    stored = await store.get(key)
    assert stored is not None
    assert stored.claim == dl.Claim("slack:U0BOB", until, "Bob")
    assert stored.version == 2
    assert len(await outbox_of(store, key, "update")) == 2
    [deferred] = await fire_due(store, clock.advance(50))
    assert (deferred.kind, deferred.outcome) == ("escalate", "deferred")
    [remind] = await fire_due(store, clock.advance(30))
    assert (remind.kind, remind.outcome) == ("remind", "fired"), "a claim never holds reminders"
    assert await deadline_rows(store, key) == [
        ("escalate", at(t0, 60), "deferred"),
        ("remind", at(t0, 90), "fired"),
        ("claim_lapse", until, "pending"),
        ("escalate", until, "pending"),
    ]
    assert [d for d in await store.deliveries(key) if d.purpose == "escalation"] == []

    fired = {f.kind: f.outcome for f in await fire_due(store, clock.advance(600))}
    assert fired == {"escalate": "fired", "claim_lapse": "fired"}
    assert [d.destination for d in await store.deliveries(key)][2:] == [ONCALL]


async def test_claiming_again_renews_and_a_closed_elicitation_cannot_be_claimed(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0), t0)
    assert await store.claim(key, "slack:U0BOB", "Bob", at(t0, 600), t0)
    assert await store.claim(key, "slack:U0ALICE", None, at(t0, 900), clock.advance(5))

    assert await deadline_rows(store, key) == [("claim_lapse", at(t0, 900), "pending")]
    stored = await store.get(key)
    assert stored is not None
    assert stored.claim == dl.Claim("slack:U0ALICE", at(t0, 900), None)
    assert [a.actor for a in await store.audit(key) if a.action == "claimed"] == [
        "slack:U0BOB",
        "slack:U0ALICE",
    ]

    assert await store.close_elicitation(key, Status.CANCELLED, t0, answer=None, audit={})
    assert not await store.claim(key, "slack:U0BOB", "Bob", at(t0, 1200), clock.advance(5))
    assert await deadline_rows(store, key) == [("claim_lapse", at(t0, 900), "cancelled")]


# --------------------------------------------------------------------------- expiry


@pytest.mark.parametrize(
    ("on_timeout", "option_ids"), [("deny", ("no",)), ("approve", ("yes",)), ("expire", None)]
)
async def test_expiry_closes_updates_every_copy_and_tells_the_source_once(
    store: SqlStore, clock: FakeClock, on_timeout: str, option_ids: tuple[str, ...] | None
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60, expires=60, on_timeout=on_timeout), t0)
    await post_all(store, t0)

    fired = await fire_due(store, clock.advance(60))

    # Expiry sorts after the reminder due at the same time; the reminder still goes out.
    assert {(f.kind, f.outcome) for f in fired} == {("remind", "fired"), ("expire", "fired")}
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.EXPIRED
    if option_ids is None:
        assert stored.answer is None
    else:
        assert stored.answer is not None
        assert (stored.answer.option_ids, stored.answer.respondent) == (option_ids, "system")
    # The source is told once; the copies are rewritten only once it accepted.
    assert len(await outbox_of(store, key, "writeback")) == 1
    assert await outbox_of(store, key, "update") == []
    assert [a.action for a in await store.audit(key)][-1] == "expired"

    claimed = await store.claim_outbox(clock.now(), "w1", limit=100)
    [writeback] = [it for it in claimed if it.kind == "writeback"]
    assert writeback.payload == WritebackPayload(round=1)
    assert await store.complete_outbox(writeback, "w1", clock.now())
    assert len(await outbox_of(store, key, "update")) == 2
    assert await outbox_of(store, key, "writeback") == []


async def test_an_expiry_fired_first_leaves_later_deadlines_idle(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, expires=30, remind=60, escalate=90), t0)
    await post_all(store, t0)

    fired = await fire_due(store, clock.advance(3600))

    assert [(f.kind, f.outcome) for f in fired] == [
        ("expire", "fired"),
        ("remind", "idle"),
        ("escalate", "idle"),
    ]
    assert await outbox_of(store, key, "notify") == []
    assert [(d.kind, d.state) for d in await store.deadlines(key)] == [
        ("expire", "fired"),
        ("remind", "cancelled"),
        ("escalate", "cancelled"),
    ]


async def test_the_subjects_expiry_updates_every_copy_without_closing(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, subject_expires=at(t0, 60)), t0)
    await post_all(store, t0)

    [fired] = await fire_due(store, clock.advance(60))

    assert (fired.kind, fired.outcome) == ("subject_expired", "fired")
    stored = await store.get(key)
    assert stored is not None
    assert (stored.status, stored.version) == (Status.PENDING, 2)
    assert len(await outbox_of(store, key, "update")) == 2
    assert await outbox_of(store, key, "notify") == []


# --------------------------------------------------------------------------- reads and wake-ups


async def test_next_deadline_at_and_releasing_claims(store: SqlStore, clock: FakeClock) -> None:
    t0 = clock.now()
    assert await store.next_deadline_at(t0) is None
    await accept(store, make(t0, "eli_a", remind=60), t0)
    await accept(store, make(t0, "eli_b", remind=30), t0)
    assert await store.next_deadline_at(t0) == at(t0, 30)

    [held] = await store.claim_deadlines(at(t0, 30), "gone", lease=timedelta(seconds=100))
    assert held.due_at == at(t0, 30)
    # A row under someone's lease is theirs to fire: the next one is the next free one...
    assert await store.next_deadline_at(at(t0, 31)) == at(t0, 60)
    [other] = await store.claim_deadlines(at(t0, 60), "gone", lease=timedelta(seconds=5))
    assert await store.next_deadline_at(at(t0, 61)) is None
    # ...until the lease runs out (a sweep then takes it).
    assert await store.next_deadline_at(at(t0, 66)) == at(t0, 60)

    assert await store.release_deadline_claims("someone-else") == 0
    assert await store.release_deadline_claims() == 2
    assert await store.next_deadline_at(at(t0, 61)) == at(t0, 30)
    assert {d.id for d in await store.claim_deadlines(at(t0, 61), "back")} == {held.id, other.id}


async def test_timelines_hold_every_copy_and_the_pending_deadlines(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60, expires=600), t0, FOLLOW)
    await post_all(store, t0)
    await fire_due(store, clock.advance(60))  # the follow-up and the reminder

    timelines = await store.timelines([key, ElicitationKey("superpipeline:unknown")])

    timeline = timelines[key]
    assert [(c.destination, c.state) for c in timeline.copies] == [
        (SLACK, "posted"),
        (MATRIX, "planned"),
        ("web", "waiting"),
    ]
    assert timeline.timers == (dl.Timer(dl.EXPIRE, at(t0, 600)),)
    assert timelines[ElicitationKey("superpipeline:unknown")].timers == ()
    assert await store.timelines([]) == {}


async def test_watchers_hear_of_every_deadline_a_write_plans(
    store: SqlStore, clock: FakeClock
) -> None:
    heard: list[datetime] = []
    unwatch = store.watch_deadlines(heard.append)
    t0 = clock.now()

    key = await accept(store, make(t0, remind=60, expires=30), t0, FOLLOW)
    await post_all(store, t0)
    await store.claim(key, "slack:U0BOB", None, at(t0, 900), t0)
    unwatch()
    await accept(store, make(t0, "eli_unheard", remind=5), t0)

    assert heard == [at(t0, 30), at(t0, 60), at(t0, 900)]


# --------------------------------------------------------------------------- the timekeeper


async def test_the_timekeeper_fires_nothing_early_and_everything_due_once(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    woken: list[int] = []
    keeper = Timekeeper(
        store, clock, People(admins=ADMINS), batch=2, on_change=lambda: woken.append(1)
    )
    keys = [await accept(store, make(t0, f"eli_{n}", remind=60 + n), t0) for n in range(5)]
    await post_all(store, t0)

    clock.advance(59)
    assert await keeper.tick() == []
    assert await keeper.run_due() == at(t0, 60)

    clock.advance(4)  # four are due, in batches of two
    assert await keeper.run_due() == at(t0, 64)
    assert len(woken) == 2
    clock.advance(10)
    assert await keeper.run_due() is None
    for key in keys:
        assert [d.state for d in await store.deadlines(key)] == ["fired"]
        assert len(await outbox_of(store, key, "notify")) == 2


async def test_a_deadline_missed_while_stopped_fires_once_late(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    await post_all(store, t0)
    first = Timekeeper(store, clock, People())
    clock.advance(30)
    assert await first.run_due() == at(t0, 60)

    clock.advance(3600)  # down for an hour; a new process starts
    restarted = Timekeeper(store, clock, People())
    [fired] = await restarted.tick()

    assert (fired.outcome, fired.due_at) == ("fired", at(t0, 60))
    [row] = await store.deadlines(key)
    assert row.fired_at is not None
    assert (row.fired_at - row.due_at) == timedelta(seconds=3570)
    assert await restarted.tick() == []
    assert await first.tick() == []
    assert len(await outbox_of(store, key, "notify")) == 2


async def test_a_claimer_that_died_mid_fire_is_replaced_after_its_lease(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    await post_all(store, t0)
    dead = await store.claim_deadlines(at(t0, 60), "dead", lease=timedelta(seconds=30))
    assert len(dead) == 1
    keeper = Timekeeper(store, clock, People())

    clock.advance(89)
    assert await keeper.tick() == []
    assert await keeper.run_due() is None  # held: the next sweep looks again
    clock.advance(2)
    assert [f.outcome for f in await keeper.tick()] == ["fired"]
    assert [f.outcome for f in await store.fire_deadlines(dead, "dead", clock.now(), decide)] == [
        "lost"
    ]
    assert len(await outbox_of(store, key, "notify")) == 2


async def test_fire_deadlines_of_nothing_is_nothing(store: SqlStore, clock: FakeClock) -> None:
    assert await store.fire_deadlines([], "tk", clock.now(), decide) == []
    ghost = DueDeadline(10_000, ElicitationKey("superpipeline:ghost"), dl.REMIND, clock.now())
    assert [f.outcome for f in await store.fire_deadlines([ghost], "tk", clock.now(), decide)] == [
        "lost"
    ]


# --------------------------------------------------------------------------- waiting for copies


async def claim_posts(store: SqlStore, now: datetime) -> list[OutboxItem]:
    """Claim every due post and leave it there: its copy is ``posting`` until completed."""
    claimed = await store.claim_outbox(now, "w1", limit=100)
    assert {it.kind for it in claimed} <= {"post"}
    return claimed


async def complete(store: SqlStore, posts: list[OutboxItem], now: datetime) -> None:
    for it in posts:
        assert await store.complete_outbox(it, "w1", now, ref=SlackRef(it.target, f"ts-{it.id}"))


async def test_a_reminder_due_while_its_copy_is_posting_goes_once_the_copy_is_posted(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    heard: list[datetime] = []
    store.watch_deadlines(heard.append)
    key = await accept(store, make(t0, remind=60), t0, Route(destinations=(SLACK,)))
    posts = await claim_posts(store, at(t0, 59))
    assert [d.state for d in await store.deliveries(key)] == ["posting"]

    [waiting] = await fire_due(store, clock.advance(60))

    assert (waiting.kind, waiting.outcome) == ("remind", "waiting")
    assert await outbox_of(store, key, "notify") == []
    assert await outbox_of(store, key, "update") == [], "nothing shown changed yet"
    [row] = await store.deadlines(key)  # the row itself is due again: not fired, not replaced
    assert (row.id, row.kind, row.due_at, row.state) == (
        waiting.id,
        "remind",
        at(t0, 65),
        "pending",
    )
    assert (row.fired_at, row.claimed_by, row.claimed_until) == (None, None, None)
    assert row.detail == {"waiting_since": at(t0, 60).isoformat()}
    assert heard[-1] == at(t0, 65), "the scheduler is woken for the next look"
    assert await store.next_deadline_at(clock.now()) == at(t0, 65)
    [audit] = [a for a in await store.audit(key) if a.action == "waiting_for_copy"]
    assert audit.detail == {"due_at": at(t0, 60).isoformat(), "kind": "remind", "copies": [SLACK]}

    await complete(store, posts, clock.advance(3))  # the copy exists now
    assert await fire_due(store, clock.advance(1)) == []  # not due yet
    [fired] = await fire_due(store, clock.advance(1))

    assert (fired.kind, fired.outcome, fired.due_at) == ("remind", "fired", at(t0, 65))
    [copy] = await store.deliveries(key)
    [notice] = await outbox_of(store, key, "notify")
    assert (notice.target, notice.delivery_id) == (SLACK, copy.id)
    assert notice.payload is not None
    assert notice.payload["thread"] == (copy.ref.to_json() if copy.ref else None)
    assert await deadline_rows(store, key) == [("remind", at(t0, 65), "fired")]
    [reminded] = [a for a in await store.audit(key) if a.action == "reminded"]
    assert reminded.detail == {
        "due_at": at(t0, 65).isoformat(),
        "copies": 1,
        "waiting_since": at(t0, 60).isoformat(),
    }
    assert await fire_due(store, clock.advance(3600)) == []
    assert len(await outbox_of(store, key, "notify")) == 1


async def test_a_copy_that_stays_posting_is_looked_for_less_often_never_in_a_spin(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0, Route(destinations=(SLACK,)))
    await claim_posts(store, t0)

    looks: list[datetime] = []
    clock.advance(60)
    for _ in range(7):
        [waiting] = await fire_due(store, clock.now())
        assert waiting.outcome == "waiting"
        nxt = await store.next_deadline_at(clock.now())
        assert nxt is not None
        looks.append(nxt)
        clock.current = nxt

    starts = [at(t0, 60), *looks[:-1]]
    gaps = [(b - a).total_seconds() for a, b in zip(starts, looks, strict=True)]
    assert gaps == [5, 5, 10, 20, 30, 30, 30]
    assert [a.action for a in await store.audit(key)].count("waiting_for_copy") == 1
    assert await outbox_of(store, key, "notify") == []


async def test_a_reminder_whose_copies_all_failed_is_skipped_and_audited_not_fired(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    for post in await claim_posts(store, t0):
        assert await store.fail_outbox(post, "w1", "channel_not_found", at(t0, 1))
    before = await store.get(key)
    assert before is not None

    [skipped] = await fire_due(store, clock.advance(60))

    assert (skipped.kind, skipped.outcome) == ("remind", "skipped")
    assert await outbox_of(store, key, "notify") == []
    assert await deadline_rows(store, key) == [("remind", at(t0, 60), "cancelled")]
    [audit] = [a for a in await store.audit(key) if a.action == "reminder_skipped"]
    assert (audit.actor, audit.detail) == (
        "system",
        {
            "due_at": at(t0, 60).isoformat(),
            "reason": "no copy was posted in a chat",
            "copies": [[SLACK, "failed"], [MATRIX, "failed"]],
        },
    )
    after = await store.get(key)
    assert after is not None
    assert after.version == before.version, "nothing to refresh"


async def test_a_reminder_waits_through_a_fallback_and_goes_to_the_next_destination(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=30), t0, FOLLOW)
    [first] = await claim_posts(store, t0)
    assert await store.fail_outbox(first, "w1", "is_archived", at(t0, 1))  # Matrix is queued

    [waiting] = await fire_due(store, clock.advance(30))
    assert waiting.outcome == "waiting"
    [second] = await claim_posts(store, clock.advance(2))
    await complete(store, [second], clock.now())
    [fired] = await fire_due(store, clock.advance(3))

    assert fired.outcome == "fired"
    slack, matrix, _ = await store.deliveries(key)
    assert (slack.state, matrix.state) == ("failed", "posted")
    assert [(n.target, n.delivery_id) for n in await outbox_of(store, key, "notify")] == [
        (MATRIX, matrix.id)
    ]


async def test_a_posted_copy_waits_for_its_sibling_at_most_a_minute(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0)
    slack_post, _matrix_post = sorted(await claim_posts(store, t0), key=lambda p: p.target != SLACK)
    await complete(store, [slack_post], t0)  # Matrix stays posting

    clock.advance(60)
    outcomes = []
    while True:
        [f] = await fire_due(store, clock.now())
        outcomes.append(f.outcome)
        if f.outcome != "waiting":
            break
        nxt = await store.next_deadline_at(clock.now())
        assert nxt is not None
        clock.current = nxt

    assert clock.now() == at(t0, 120), "the cap: a minute after it was due"
    assert outcomes[-1] == "fired"
    slack = (await store.deliveries(key))[0]
    assert [n.delivery_id for n in await outbox_of(store, key, "notify")] == [slack.id]
    [audit] = [a for a in await store.audit(key) if a.action == "reminded"]
    assert audit.detail is not None
    assert audit.detail["not_posted"] == [MATRIX]


async def test_an_escalation_links_originals_posted_while_it_waited_or_goes_at_the_cap(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    linked = await accept(store, make(t0, "eli_linked", escalate=60), t0)
    stuck = await accept(store, make(t0, "eli_stuck", escalate=60), t0)
    posts = await claim_posts(store, t0)

    fired = await fire_due(store, clock.advance(60))
    assert [f.outcome for f in fired] == ["waiting", "waiting"]
    await complete(store, [p for p in posts if p.elicitation_key == linked], clock.advance(2))
    looked = {f.elicitation_key: f.outcome for f in await fire_due(store, clock.advance(3))}
    assert looked == {linked: "fired", stuck: "waiting"}

    *_, escalation = await store.deliveries(linked)
    assert escalation.escalation is not None
    assert [o.destination for o in escalation.escalation.originals] == [SLACK, MATRIX]
    assert (escalation.destination, escalation.state) == (ONCALL, "planned")

    while (nxt := await store.next_deadline_at(clock.now())) is not None:
        clock.current = nxt
        await fire_due(store, nxt)
    assert clock.now() == at(t0, 120)
    [*_, late] = await store.deliveries(stuck)
    assert (late.destination, late.purpose) == (ONCALL, "escalation")
    assert late.escalation is not None
    assert late.escalation.originals == (), "it goes without them: 'not answered by T'"
    [audit] = [a for a in await store.audit(stuck) if a.action == "escalated"]
    assert audit.detail is not None
    assert audit.detail["not_linked"] == [SLACK, MATRIX]


async def test_an_answer_while_a_reminder_waits_for_its_copy_ends_the_wait(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await accept(store, make(t0, remind=60), t0, Route(destinations=(SLACK,)))
    posts = await claim_posts(store, t0)
    [waiting] = await fire_due(store, clock.advance(60))
    assert waiting.outcome == "waiting"

    answer = Answer(option_ids=("no",), respondent="slack:U0BOB", via=SLACK, at=clock.now())
    assert (await store.record_answer(key, answer, clock.advance(1), approving=False, audit={})).won
    await complete(store, posts, clock.now())

    assert await fire_due(store, clock.advance(3600)) == []
    assert await outbox_of(store, key, "notify") == []
    assert [d.state for d in await store.deadlines(key)] == ["cancelled"]


async def test_a_revision_while_a_reminder_waits_keeps_one_reminder_at_the_revised_time(
    store: SqlStore, clock: FakeClock
) -> None:
    t0 = clock.now()
    route = Route(destinations=(SLACK,))
    key = await accept(store, make(t0, remind=60), t0, route)
    posts = await claim_posts(store, t0)
    [waiting] = await fire_due(store, clock.advance(60))
    assert waiting.outcome == "waiting"

    # Revised, same reminder time (already past): it replaces the waiting row, as any pending one.
    [outcome] = await store.intake([item(make(t0, question="v2", remind=60), route)], at(t0, 61))
    assert outcome.result == "updated"
    assert await deadline_rows(store, key) == [("remind", at(t0, 60), "pending")]
    [again] = await fire_due(store, at(t0, 61))
    assert again.outcome == "waiting", "due at once, and still waiting for its copy"

    await complete(store, posts, at(t0, 62))
    fired = await fire_due(store, at(t0, 70))
    assert [(f.kind, f.outcome) for f in fired] == [("remind", "fired")]
    assert len(await outbox_of(store, key, "notify")) == 1

"""Deadlines end to end: Service -> SqlStore -> Timekeeper (+ the real Scheduler) -> Dispatcher ->
chat fakes, on SQLite and on PostgreSQL.

Two kinds of test:
- with a FakeClock and no scheduler (``Rig``): what each copy shows (the schedule, the claim, an
  escalation), a reminder dropped when the answer came first, the claim operation, a reminder and
  an escalation due while their copy is still being posted (``SlowChat``);
- with the real APScheduler wake-ups and the system clock (``live``): deadlines a few seconds out,
  a stop across a deadline, three OS processes sharing PostgreSQL.

This module is also the worker of the three-process test: ``python -m
tests.integration.test_deadlines <store url> <claimer> <until epoch>``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.clock import SystemClock
from bot.domain import deadlines as dl
from bot.domain import lanes
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Attempt,
    Deadlines,
    Elicitation,
    ElicitationKey,
    Identity,
    Kind,
    Meaning,
    Option,
    People,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.planning import display_hash
from bot.domain.ports import Clock, Inbound
from bot.domain.records import DeadlineView, EffectView, IntakeItem
from bot.outbox import Dispatcher
from bot.scheduler import Scheduler
from bot.service import Service
from bot.timekeeper import Timekeeper
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeSink

REPO = Path(__file__).resolve().parents[2]
SLACK = "slack:C0APPROVALS"
SLACK_2 = "slack:C0SECOND"
MATRIX = "matrix:!room:example.org"
ONCALL = "slack:C0ONCALL"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
BOB = Identity(platform="slack", user="U0BOB", display_name="Bob")
AGENT = "agt_9e8d7c6b5a493827"
PEOPLE = People(
    admins=frozenset({"slack:U0ADMIN", "matrix:@admin:example.org"}),
    agents=frozenset({"slack:B0AGENT"}),
    principals={"slack:U0AGENTUSER": AGENT},
)
ROUTE = Route(
    destinations=(SLACK, MATRIX),
    escalate_to=(ONCALL,),
    mention=("slack:U0ALICE", "matrix:@alice:example.org"),
)
APPROVE = Option(id="allow", label="Allow", meaning=Meaning.APPROVE, outcome="approve")
DENY = Option(id="deny", label="Deny", meaning=Meaning.REJECT, outcome="deny")
LINK = "http://127.0.0.1:8787/#"
WAIT_S = 20.0


def make(
    source_id: str,
    created: datetime,
    *,
    remind: datetime | None = None,
    escalate: datetime | None = None,
    expires: datetime | None = None,
    on_timeout: str | None = None,
    subject_expires: datetime | None = None,
) -> Elicitation:
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
        source="handup",
        source_id=source_id,
        asker=AGENT,
        kind=Kind.APPROVAL,
        title=f"Run {source_id}?",
        question="May I run the migration?",
        answer_mode=AnswerMode.SINGLE_CHOICE,
        options=(APPROVE, DENY),
        subject=subject,
        deadlines=Deadlines(
            remind_at=remind, escalate_at=escalate, expires_at=expires, on_timeout=on_timeout
        ),
        created_at=created,
    )


async def until(check: Callable[[], Any], what: str, within: float = WAIT_S) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; fail naming ``what``."""
    stop = time.monotonic() + within
    while True:
        got = check()
        value = await got if inspect.isawaitable(got) else got
        if value:
            return value
        if time.monotonic() > stop:
            pytest.fail(f"{what}: not within {within} s")
        await asyncio.sleep(0.05)


async def _all_posted(store: SqlStore, key: ElicitationKey) -> bool:
    copies = await store.deliveries(key)
    return len(copies) == 2 and all(c.state == "posted" for c in copies)


async def rows(store: SqlStore, key: ElicitationKey, kind: str) -> list[EffectView]:
    return [o for o in await store.outbox(key) if o.kind == kind]


# ========================================================================= with a FakeClock


@dataclass
class Rig:
    store: SqlStore
    clock: Clock
    slack: FakeChat
    matrix: FakeChat
    sink: FakeSink
    service: Service
    dispatcher: Dispatcher
    keeper: Timekeeper

    async def intake(self, e: Elicitation, route: Route | None = None) -> ElicitationKey:
        [outcome] = await self.service.intake(
            [Inbound("handup", f"in-{e.source_id}", e, {}, route)]
        )
        assert outcome.result == "accepted"
        return outcome.key

    async def drain(self) -> int:
        handled = 0
        while n := await self.dispatcher.run_once():
            handled += n
        return handled


def make_rig(
    store: SqlStore,
    clock: Clock,
    route: Route = ROUTE,
    *,
    slack: FakeChat | None = None,
    lease: timedelta | None = None,
    **keeper: Any,
) -> Rig:
    """``slack``: another Slack fake; ``lease``: the dispatcher's claim lease (a slow post's owner
    is alive and renewing, which ``run_once`` alone does not do)."""
    slack = slack or FakeChat("slack")
    matrix, sink = FakeChat("matrix"), FakeSink()
    dispatcher = Dispatcher(
        store,
        clock,
        {"slack": slack, "matrix": matrix},
        {"handup": sink},
        lambda key: f"{LINK}{key}",
        lease=lanes.CLAIM_LEASE if lease is None else lease,
    )
    service = Service(
        store,
        clock,
        PEOPLE,
        [route],
        on_change=dispatcher.wake,
        link_for=lambda key: f"{LINK}{key}",
        claim_minutes=30,
    )
    tk = Timekeeper(store, clock, PEOPLE, on_change=dispatcher.wake, **keeper)
    return Rig(store, clock, slack, matrix, sink, service, dispatcher, tk)


@pytest.fixture
def rig(store: SqlStore, clock: FakeClock) -> Rig:
    return make_rig(store, clock)


def step_kinds(steps: Sequence[dl.ScheduleStep]) -> list[str]:
    return [s.kind for s in steps]


async def test_every_copy_shows_the_schedule_and_loses_each_step_as_it_fires(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    e = make(
        "req-1",
        t0,
        remind=t0 + timedelta(hours=4, minutes=30),
        escalate=t0 + timedelta(hours=5, minutes=30),
        expires=t0 + timedelta(hours=8, minutes=30),
        on_timeout="deny",
    )
    key = await rig.intake(e)
    assert await rig.drain() == 3  # a post to each channel and the Matrix copy's reactions

    [posted] = rig.slack.posted
    assert dl.schedule_line(posted.view.schedule, now=t0) == (
        "reminder 14:00 UTC · escalates to #C0ONCALL 15:00 UTC · expires 18:00 UTC → deny"
    )
    view = await rig.service.view(key)
    assert view is not None
    assert view.schedule == posted.view.schedule

    clock.advance(4.5 * 3600)
    [fired] = await rig.keeper.tick()
    assert fired.kind == "remind"
    await rig.drain()

    [reminder] = rig.slack.notified
    assert reminder.notice.thread == posted.ref
    assert reminder.notice.user == ""
    assert (reminder.notice.kind, reminder.notice.mentions) == ("reminder", ("slack:U0ALICE",))
    assert reminder.notice.text == "⏰ Reminder: “Run req-1?” is still waiting for an answer."
    [mx_reminder] = rig.matrix.notified
    assert mx_reminder.notice.mentions == ("matrix:@alice:example.org",)
    [slack_update] = rig.slack.updated
    assert step_kinds(slack_update.view.schedule) == ["escalate", "expire"]
    assert step_kinds(rig.matrix.updated[0].view.schedule) == ["escalate", "expire"]


async def test_escalation_posts_an_answerable_copy_that_links_the_originals(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await rig.intake(make("req-esc", t0, escalate=t0 + timedelta(minutes=10)))
    await rig.drain()
    originals = {p.destination: p.ref for p in (*rig.slack.posted, *rig.matrix.posted)}

    clock.advance(600)
    await rig.keeper.tick()
    await rig.drain()

    [escalated] = [p for p in rig.slack.posted if p.destination == ONCALL]
    escalation = escalated.view.escalation
    assert escalation is not None
    assert escalation.mentions == ("slack:U0ADMIN",)
    assert {o.destination: o.ref for o in escalation.originals} == originals
    assert escalated.view.link == f"{LINK}{key}"
    assert escalated.view.schedule == ()
    copies = await rig.service.deliveries(key)
    assert [(c.destination, c.purpose, c.state) for c in copies] == [
        (SLACK, "primary", "posted"),
        (MATRIX, "primary", "posted"),
        (ONCALL, "escalation", "posted"),
    ]

    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=BOB, option_ids=("deny",), via=ONCALL)
    )
    assert outcome.won
    await rig.drain()
    updated = {u.destination: u for u in (*rig.slack.updated, *rig.matrix.updated)}
    assert set(updated) == {SLACK, MATRIX, ONCALL}
    assert all(u.view.status is Status.ANSWERED for u in updated.values())
    assert updated[ONCALL].view.escalation == escalation, "it stays an escalation copy"
    assert len(rig.sink.delivered) == 1


async def test_a_reminder_fired_just_before_an_answer_is_dropped_not_sent(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await rig.intake(make("req-race", t0, remind=t0 + timedelta(seconds=60)))
    await rig.drain()
    clock.advance(60)
    await rig.keeper.tick()
    assert len(await rows(rig.store, key, "notify")) == 2

    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("allow",), via=SLACK)
    )
    assert outcome.won
    await rig.drain()

    assert rig.slack.notified == rig.matrix.notified == []
    assert {r.state for r in await rows(rig.store, key, "notify")} == {"done"}
    assert all(u.view.status is Status.ANSWERED for u in rig.slack.updated[-1:])


async def test_i_am_on_it_holds_escalation_shows_who_and_lapses(rig: Rig, clock: FakeClock) -> None:
    t0 = clock.now()
    key = await rig.intake(
        make(
            "req-claim",
            t0,
            remind=t0 + timedelta(minutes=20),
            escalate=t0 + timedelta(minutes=10),
        )
    )
    await rig.drain()

    refused = await rig.service.claim(key, Identity(platform="slack", user="B0AGENT"))
    assert refused.claim is None
    assert refused.refusal is not None
    assert refused.refusal.code is RefusalCode.AGENT
    outcome = await rig.service.claim(key, BOB)
    assert outcome.claim == dl.Claim("slack:U0BOB", t0 + timedelta(minutes=30), "Bob")
    await rig.drain()

    claimed = rig.slack.updated[-1].view
    assert claimed.claim == outcome.claim
    assert dl.claim_line(claimed.claim, t0) == "Bob is on it (until 10:00 UTC)"
    assert dl.schedule_line(claimed.schedule, now=t0) == (
        "reminder 09:50 UTC · escalates to #C0ONCALL 10:00 UTC"
    )

    clock.advance(600)  # the escalation is due, but Bob is on it
    assert [f.outcome for f in await rig.keeper.tick()] == ["deferred"]
    clock.advance(600)  # reminders are not held
    assert [f.outcome for f in await rig.keeper.tick()] == ["fired"]
    await rig.drain()
    assert len(rig.slack.notified) == 1
    assert not [p for p in rig.slack.posted if p.destination == ONCALL]

    clock.advance(600)  # the claim lapses: escalation goes, and the copies drop the claim
    fired = {f.kind: f.outcome for f in await rig.keeper.tick()}
    assert fired == {"claim_lapse": "fired", "escalate": "fired"}
    await rig.drain()
    assert [p.destination for p in rig.slack.posted][-1] == ONCALL
    assert rig.slack.updated[-1].view.claim is None
    view = await rig.service.view(key)
    assert view is not None
    assert view.claim is None


async def test_a_claim_on_an_answered_question_is_refused(rig: Rig, clock: FakeClock) -> None:
    key = await rig.intake(make("req-done", clock.now()))
    assert (
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("deny",), via=SLACK)
        )
    ).won

    outcome = await rig.service.claim(key, BOB)

    assert outcome.claim is None
    assert outcome.refusal is not None
    assert outcome.refusal.code is RefusalCode.ALREADY_ANSWERED
    audit = [a for a in await rig.store.audit(key) if a.action == "refusal"]
    assert [(a.actor, a.code) for a in audit] == [("slack:U0BOB", "already_answered")]
    with pytest.raises(KeyError):
        await rig.service.claim(ElicitationKey("handup:missing"), BOB)


async def test_the_subjects_expiry_rewrites_every_copy_without_the_approve_button(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await rig.intake(make("req-subj", t0, subject_expires=t0 + timedelta(minutes=5)))
    await rig.drain()

    clock.advance(300)
    await rig.keeper.tick()
    await rig.drain()

    for update in (*rig.slack.updated, *rig.matrix.updated):
        assert update.view.status is Status.PENDING
        assert update.view.now >= t0 + timedelta(minutes=5)
    assert len(rig.slack.updated) == len(rig.matrix.updated) == 1
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING


class SlowChat(FakeChat):
    """Slack whose posts to one destination wait at a gate: that copy stays ``posting``."""

    def __init__(self, slow: str) -> None:
        super().__init__("slack")
        self.slow = slow
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def post(
        self,
        destination: str,
        view: Any,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> Any:
        if destination == self.slow and not self.gate.is_set():
            self.entered.set()
            await self.gate.wait()
        return await super().post(
            destination, view, idempotency_key=idempotency_key, uncertain=uncertain
        )


async def hold_first_post(rig: Rig, slow: SlowChat) -> asyncio.Task[int]:
    """Start dispatching: the slow destination's post is claimed and held at the gate."""
    task = asyncio.create_task(rig.dispatcher.run_once())
    await asyncio.wait_for(slow.entered.wait(), timeout=WAIT_S)
    return task


async def run_deadlines_until(rig: Rig, clock: FakeClock, end: datetime) -> list[Any]:
    """Move the clock from due time to due time up to ``end``, firing and dispatching each."""
    fired: list[Any] = []
    while (nxt := await rig.store.next_deadline_at(clock.now())) is not None and nxt <= end:
        clock.current = max(clock.now(), nxt)
        fired += await rig.keeper.tick()
        await rig.drain()
    clock.current = max(clock.now(), end)
    return fired


async def test_a_reminder_due_while_its_copy_is_still_posting_is_sent_once_the_copy_exists(
    store: SqlStore, clock: FakeClock
) -> None:
    route = Route(destinations=(SLACK,), mention=("slack:U0ALICE",))
    slow = SlowChat(SLACK)
    rig = make_rig(store, clock, route, slack=slow, lease=timedelta(minutes=10))
    t0 = clock.now()
    key = await rig.intake(make("req-slow", t0, remind=t0 + timedelta(seconds=60)), route)
    posting = await hold_first_post(rig, slow)
    assert [c.state for c in await store.deliveries(key)] == ["posting"]

    clock.advance(60)  # due, and the copy is still on its way
    assert [f.outcome for f in await rig.keeper.tick()] == ["waiting"]
    await rig.drain()
    clock.advance(5)  # looked for again: still posting
    assert [f.outcome for f in await rig.keeper.tick()] == ["waiting"]
    await rig.drain()
    assert slow.notified == []
    assert await rows(store, key, "notify") == []
    assert await fired_rows(store, key) == [], "never fired with nothing sent"

    slow.gate.set()  # the platform accepts the post
    assert await posting == 1
    [post] = slow.posted
    fired = await run_deadlines_until(rig, clock, t0 + timedelta(hours=1))

    assert [(f.kind, f.outcome) for f in fired] == [("remind", "fired")]
    [reminder] = slow.notified
    assert (reminder.destination, reminder.notice.thread) == (SLACK, post.ref)
    assert reminder.notice.mentions == ("slack:U0ALICE",)
    [row] = await fired_rows(store, key)
    assert row.fired_at is not None
    assert row.fired_at - row.due_at < timedelta(seconds=1)
    assert row.fired_at - t0 <= timedelta(seconds=60) + dl.COPY_RETRY_MAX
    [notice] = await rows(store, key, "notify")
    assert notice.state == "done"
    assert step_kinds(slow.updated[-1].view.schedule) == [], "the copy drops its reminder step"


async def test_escalation_and_follow_up_behind_a_slow_first_post(
    store: SqlStore, clock: FakeClock
) -> None:
    route = Route(
        destinations=(SLACK, SLACK_2),
        followup_seconds=30,
        escalate_to=(ONCALL,),
        mention=("slack:U0ALICE",),
    )
    slow = SlowChat(SLACK)
    rig = make_rig(store, clock, route, slack=slow, lease=timedelta(minutes=10))
    t0 = clock.now()
    e = make(
        "req-slow-esc", t0, remind=t0 + timedelta(seconds=10), escalate=t0 + timedelta(seconds=20)
    )
    key = await rig.intake(e, route)
    posting = await hold_first_post(rig, slow)

    waited = await run_deadlines_until(rig, clock, t0 + timedelta(seconds=21))
    assert {f.outcome for f in waited} == {"waiting"}
    assert {f.kind for f in waited} == {"remind", "escalate"}
    assert (slow.posted, slow.notified) == ([], [])

    slow.gate.set()
    assert await posting == 1
    [first] = slow.posted
    accepted = clock.now()
    fired = await run_deadlines_until(rig, clock, accepted + timedelta(seconds=60))

    assert Counter((f.kind, f.outcome) for f in fired if f.outcome != "waiting") == {
        ("remind", "fired"): 1,
        ("escalate", "fired"): 1,
        ("followup", "fired"): 1,
    }
    [escalated] = [p for p in slow.posted if p.destination == ONCALL]
    # The reminder went once into every copy live at its next look: the one it waited for, and
    # the escalation copy posted meanwhile (the follow-up's copy came after it).
    threads = {n.destination: n.notice.thread for n in slow.notified}
    assert len(slow.notified) == len(threads) == 2
    assert threads == {SLACK: first.ref, ONCALL: escalated.ref}
    assert escalated.view.escalation is not None
    assert [(o.destination, o.ref) for o in escalated.view.escalation.originals] == [
        (SLACK, first.ref)
    ], "the escalation links the original it waited for"
    [second] = [p for p in slow.posted if p.destination == SLACK_2]
    follow_up = next(d for d in await store.deadlines(key) if d.kind == "followup")
    assert follow_up.due_at == accepted + timedelta(seconds=30), "from the slow post's acceptance"
    assert second.view.status is Status.PENDING
    assert [p.destination for p in slow.posted].count(SLACK) == 1
    assert len(await rows(store, key, "notify")) == 2


# ========================================================================= with the real scheduler


@dataclass
class Live:
    rig: Rig
    scheduler: Scheduler


@asynccontextmanager
async def live(
    store: SqlStore, route: Route = ROUTE, *, sweep_seconds: float = 15.0
) -> AsyncIterator[Live]:
    """The rig with a running Dispatcher loop and Scheduler, on the system clock."""
    rig = make_rig(store, SystemClock(), route)
    scheduler = Scheduler(rig.keeper, sweep_seconds=sweep_seconds)
    stop = asyncio.Event()
    dispatcher = asyncio.create_task(rig.dispatcher.run(stop, idle_seconds=0.2))
    await scheduler.start()
    try:
        yield Live(rig, scheduler)
    finally:
        await scheduler.stop()
        stop.set()
        rig.dispatcher.wake()
        await asyncio.wait_for(dispatcher, timeout=10)


def now() -> datetime:
    return datetime.now(UTC)


async def fired_rows(store: SqlStore, key: ElicitationKey) -> list[DeadlineView]:
    return [d for d in await store.deadlines(key) if d.state == "fired"]


def on_time(row: DeadlineView, *, slack: float = 3.0) -> None:
    """Fired no earlier than due, and within ``slack`` seconds of it (a shared 2-core box)."""
    assert row.fired_at is not None
    late = (row.fired_at - row.due_at).total_seconds()
    assert 0 <= late < slack, f"{row.kind} fired {late:.3f} s after its due time"


@pytest.mark.slow
async def test_live_reminders_escalation_and_an_answer_a_tick_before_its_reminder(
    store: SqlStore,
) -> None:
    async with live(store) as lv:
        t0 = now()
        due = t0 + timedelta(seconds=1.5)
        reminded = await lv.rig.intake(make("live-remind", t0, remind=due))
        answered = await lv.rig.intake(make("live-answered", t0, remind=due))
        escalated = await lv.rig.intake(make("live-esc", t0, escalate=due))
        await until(lambda: len(lv.rig.slack.posted) == 3 or None, "the first posts")
        await asyncio.sleep(max(0.0, (due - now()).total_seconds() - 0.3))
        outcome = await lv.rig.service.answer(
            answered, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("deny",), via=SLACK)
        )
        assert outcome.won

        def escalation_posts() -> list[Any]:
            return [p for p in lv.rig.slack.posted if p.destination == ONCALL]

        [post] = await until(escalation_posts, "the escalation post")
        await until(
            lambda: len(lv.rig.slack.notified) + len(lv.rig.matrix.notified) == 2 or None,
            "both reminders",
        )
        await asyncio.sleep(0.5)  # nothing more comes

    # The reminder: once, in the thread of each live copy.
    notices = [*lv.rig.slack.notified, *lv.rig.matrix.notified]
    assert sorted(n.destination for n in notices) == [MATRIX, SLACK]
    posts = {(p.destination, str(p.view.elicitation.key)): p.ref for p in lv.rig.slack.posted}
    [slack_notice] = lv.rig.slack.notified
    assert slack_notice.notice.thread == posts[(SLACK, reminded)]
    [row] = await fired_rows(store, reminded)
    on_time(row)
    # The answer came first: no reminder was written or sent for it.
    assert await rows(store, answered, "notify") == []
    assert [d.state for d in await store.deadlines(answered)] == ["cancelled"]
    # The escalation: an answerable copy in the on-call channel, mentioning its admins.
    assert post.view.elicitation.key == escalated
    assert post.view.escalation is not None
    assert post.view.escalation.mentions == ("slack:U0ADMIN",)
    [row] = await fired_rows(store, escalated)
    on_time(row)


@pytest.mark.slow
async def test_live_follow_up_reaches_the_second_destination_after_five_seconds(
    store: SqlStore,
) -> None:
    route = Route(destinations=(SLACK, SLACK_2), followup_seconds=5)
    async with live(store, route) as lv:
        key = await lv.rig.intake(make("live-follow", now()), route)
        [first] = await until(lambda: lv.rig.slack.posted, "the first post")

        def second() -> list[Any]:
            return [p for p in lv.rig.slack.posted if p.destination == SLACK_2]

        [post] = await until(second, "the follow-up post")
        # Slack has the post; wait for the store to record it, not a fixed pause.
        await until(
            lambda: _all_posted(store, key),
            "both copies recorded as posted",
        )
        await asyncio.sleep(0.3)  # nothing more comes

    assert first.destination == SLACK
    assert post.view.status is Status.PENDING
    first_copy, second_copy = await store.deliveries(key)
    [row] = await fired_rows(store, key)
    assert row.kind == "followup"
    # Five seconds after Slack accepted the first copy, not before, and on time.
    assert first_copy.posted_at is not None
    assert second_copy.posted_at is not None
    assert row.due_at == first_copy.posted_at + timedelta(seconds=5)
    on_time(row)
    assert second_copy.posted_at >= row.due_at
    assert (first_copy.state, second_copy.state) == ("posted", "posted")
    assert len(lv.rig.slack.posted) == 2, "the first copy stays; nothing is posted twice"


@pytest.mark.slow
async def test_live_expiry_with_each_on_timeout(store: SqlStore) -> None:
    async with live(store) as lv:
        t0 = now()
        keys = {
            outcome: await lv.rig.intake(
                make(
                    f"live-exp-{outcome}",
                    t0,
                    expires=t0 + timedelta(seconds=2),
                    on_timeout=outcome,
                )
            )
            for outcome in ("deny", "approve", "expire")
        }
        await until(lambda: len(lv.rig.sink.delivered) == 3 or None, "three write-backs")
        # Every copy is rewritten after its write-back; wait for the six edits, not a fixed pause.
        await until(
            lambda: len(lv.rig.slack.updated) + len(lv.rig.matrix.updated) >= 6 or None,
            "six edits",
        )
        await asyncio.sleep(0.3)  # nothing more comes

    written = {str(d.view.elicitation.key): d.view for d in lv.rig.sink.delivered}
    assert len(lv.rig.sink.delivered) == 3
    expected = {"deny": ("deny",), "approve": ("allow",), "expire": None}
    for outcome, key in keys.items():
        view = written[key]
        assert view.status is Status.EXPIRED
        if expected[outcome] is None:
            assert view.answer is None
        else:
            assert view.answer is not None
            assert (view.answer.option_ids, view.answer.respondent) == (
                expected[outcome],
                "system",
            )
        [row] = await fired_rows(store, key)
        on_time(row)
        updated = [
            u
            for u in (*lv.rig.slack.updated, *lv.rig.matrix.updated)
            if u.view.elicitation.key == key
        ]
        assert sorted(u.destination for u in updated) == [MATRIX, SLACK]
        assert all(u.view.status is Status.EXPIRED for u in updated)


@pytest.mark.slow
async def test_live_stopped_across_a_deadline_fires_once_late_after_restart(
    store: SqlStore,
) -> None:
    async with live(store) as first:
        t0 = now()
        key = await first.rig.intake(make("live-restart", t0, remind=t0 + timedelta(seconds=1)))
        await until(lambda: len(first.rig.slack.posted) == 1 or None, "posted")
        await first.scheduler.stop()  # down before the reminder is due; the store stays

        await asyncio.sleep(max(0.0, (t0 + timedelta(seconds=2.5) - now()).total_seconds()))
        assert await fired_rows(store, key) == [], "nobody fired it while down"
        assert await rows(store, key, "notify") == []

        restarted = Scheduler(
            Timekeeper(store, SystemClock(), PEOPLE, on_change=first.rig.dispatcher.wake)
        )
        started = now()
        await restarted.start()
        try:
            await until(
                lambda: len(first.rig.slack.notified) == 1 or None,
                "the late reminder",
            )
            await asyncio.sleep(0.5)
        finally:
            await restarted.stop()

    [row] = await fired_rows(store, key)
    assert row.fired_at is not None
    late = (row.fired_at - row.due_at).total_seconds()
    assert late >= 1.4, "it fired late, at restart"
    assert (row.fired_at - started).total_seconds() < 2.0, "and at once after the restart"
    assert len(first.rig.slack.notified) == len(first.rig.matrix.notified) == 1
    assert len(await rows(store, key, "notify")) == 2


# --------------------------------------------------------------------------- three processes


PROCESSES = 3
DEADLINES = 300


@pytest.mark.slow
async def test_three_processes_sharing_postgresql_fire_each_deadline_exactly_once(
    pg_url: str,
) -> None:
    store = SqlStore.from_url(pg_url)
    try:
        rig = make_rig(store, SystemClock(), Route(destinations=(SLACK,)))
        start = now()
        due = start + timedelta(seconds=5)
        keys = []
        for n in range(DEADLINES):
            e = make(f"multi-{n:03d}", start, remind=due + timedelta(milliseconds=3 * n))
            keys.append(e.key)
            [outcome] = await store.intake([intake_item(e, Route(destinations=(SLACK,)))], start)
            assert outcome.result == "accepted"
        await rig.drain()  # every copy posted: each reminder has one thread to go to
        assert len(rig.slack.posted) == DEADLINES

        stop_at = time.time() + 30
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.integration.test_deadlines",
                pg_url,
                f"p{i}",
                str(stop_at),
                cwd=REPO,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            for i in range(PROCESSES)
        ]
        outputs = []
        for proc in procs:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
            assert proc.returncode == 0, err.decode()[-3000:]
            outputs.append(json.loads(out.decode().strip().splitlines()[-1]))

        fired_by = Counter[str]()
        notified = Counter[str]()
        for report in outputs:
            fired_by[report["claimer"]] += report["fired"]
            notified.update(report["notified"])
        assert sum(fired_by.values()) == DEADLINES, fired_by
        assert len(notified) == DEADLINES
        assert set(notified.values()) == {1}, "each reminder went out exactly once"
        for key in keys:
            [row] = await store.deadlines(key)
            assert row.state == "fired"
            [notice] = await rows(store, key, "notify")
            assert notice.state == "done"
        print(f"fired per process: {dict(fired_by)}")  # shown with -s
    finally:
        await store.close()


def intake_item(e: Elicitation, route: Route) -> IntakeItem:
    return IntakeItem("handup", f"in-{e.source_id}", e, route, display_hash(e))


async def _worker(url: str, claimer: str, stop_at: float) -> dict[str, Any]:
    """One process: a Timekeeper with the real Scheduler and a Dispatcher, until nothing is left."""
    store = SqlStore.from_url(url)
    clock = SystemClock()
    slack = FakeChat("slack")
    dispatcher = Dispatcher(store, clock, {"slack": slack}, {}, lambda key: f"{LINK}{key}")
    keeper = Timekeeper(store, clock, PEOPLE, claimer=claimer, batch=10, on_change=dispatcher.wake)
    fired = 0
    tick = keeper.tick

    async def counted() -> Any:
        nonlocal fired
        results = await tick()
        fired += sum(1 for r in results if r.outcome == "fired")
        return results

    keeper.tick = counted  # type: ignore[method-assign]
    scheduler = Scheduler(keeper, sweep_seconds=1.0)
    stop = asyncio.Event()
    loop = asyncio.create_task(dispatcher.run(stop, idle_seconds=0.1))
    await scheduler.start()
    try:
        while time.time() < stop_at:
            await asyncio.sleep(0.5)
            if await store.next_deadline_at(clock.now()) is not None:
                continue
            notices = [o for o in await store.outbox() if o.kind == "notify"]
            if len(notices) >= DEADLINES and all(o.state == "done" for o in notices):
                break
    finally:
        await scheduler.stop()
        stop.set()
        dispatcher.wake()
        await loop
        await store.close()
    return {
        "claimer": claimer,
        "fired": fired,
        "notified": [n.notice.thread.key if n.notice.thread else "" for n in slack.notified],
    }


if __name__ == "__main__":
    report = asyncio.run(_worker(sys.argv[1], sys.argv[2], float(sys.argv[3])))
    print(json.dumps(report))  # the parent reads it

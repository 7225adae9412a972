"""Issue 26: nothing stale goes out. A reminder or an escalation that fired while the question was
pending, was queued (or kept failing) and whose question was answered before its turn is dropped
and audited, never sent; on SQLite and PostgreSQL, with the injected clock."""

from __future__ import annotations

from datetime import timedelta

from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import Attempt, ElicitationKey, Status
from tests.conftest import FakeClock
from tests.integration.test_deadlines import ALICE, ONCALL, SLACK, Rig, make, rig, rows

__all__ = ["rig"]  # the fixture, shared with test_deadlines


async def answer(rig: Rig, key: ElicitationKey) -> None:
    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("allow",), via=SLACK)
    )
    assert outcome.won


async def test_a_reminder_and_an_escalation_queued_before_the_answer_are_dropped_and_audited(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    due = t0 + timedelta(seconds=60)
    key = await rig.intake(make("req-stale", t0, remind=due, escalate=due))
    await rig.drain()
    clock.advance(60)
    await rig.keeper.tick()  # fired: two reminders and the escalation copy are queued
    assert len(await rows(rig.store, key, "notify")) == 2
    assert [r.target for r in await rows(rig.store, key, "post") if r.state == "pending"] == [
        ONCALL
    ]

    await answer(rig, key)
    await rig.drain()

    assert rig.slack.notified == rig.matrix.notified == []
    assert [p.destination for p in rig.slack.posted] == [SLACK], "no escalation copy"
    assert {r.state for r in await rows(rig.store, key, "notify")} == {"done"}
    copies = {c.destination: c.state for c in await rig.service.deliveries(key)}
    assert copies[ONCALL] == "skipped"
    actions = [a.action for a in await rig.store.audit(key)]
    assert actions.count("reminder_dropped") == 2
    assert actions.count("escalation_dropped") == 1
    assert len(rig.sink.delivered) == 1


async def test_a_reminder_retrying_through_an_outage_is_dropped_once_answered(
    rig: Rig, clock: FakeClock
) -> None:
    t0 = clock.now()
    key = await rig.intake(make("req-outage", t0, remind=t0 + timedelta(seconds=60)))
    await rig.drain()
    rig.slack.fail_next(3, TransientDeliveryError("slack is down"), methods=["notify"])
    clock.advance(60)
    await rig.keeper.tick()
    await rig.drain()  # Slack's reminder fails and waits for its retry; Matrix's goes out
    assert [c.method for c in rig.slack.calls].count("notify") == 1
    assert len(rig.matrix.notified) == 1

    await answer(rig, key)
    clock.advance(600)  # well past any retry
    await rig.drain()

    assert rig.slack.notified == []
    assert [c.method for c in rig.slack.calls].count("notify") == 1, "not tried again"
    assert {r.state for r in await rows(rig.store, key, "notify")} == {"done"}
    assert [a.action for a in await rig.store.audit(key)].count("reminder_dropped") == 1
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED

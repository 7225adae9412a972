"""Rule 9's refusal is told once per question and person, on SQLite and PostgreSQL: the store's
``refusal_told`` record (written with the audit row) says whether it was told before, across
replicas and restarts; the service then says only a short reminder (Matrix: nothing)."""

from __future__ import annotations

import asyncio

from bot.domain.actions import Choose, ClaimIt, OutcomeKind
from bot.domain.deciders import TOLD_BEFORE
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import ElicitationKey, Identity, People, RefusalCode, Route
from bot.domain.store import Store
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.contract.test_store import make

CAROL = Identity(platform="slack", user="U0CAROL", display_name="Carol")
ROUTE = Route(approvers=("slack:U0ALICE", "web:bob"))


async def asked(svc: Service, clock: FakeClock, source_id: str = "eli_q") -> ElicitationKey:
    e = make(clock.now(), source_id)
    await svc.intake([Inbound("ce:/test", f"ev-{source_id}", e, {}, None)])
    return e.key


def click(key: ElicitationKey, who: Identity = CAROL, option: str = "yes") -> Choose:
    return Choose(key, who, "slack:C0APPROVALS", (option,), shown=SHOWN_WHOLE)


async def test_the_first_refusal_of_a_kind_is_told_and_later_ones_are_not(store: Store) -> None:
    clock = FakeClock()
    key = await asked(Service(store, clock, People(), [ROUTE]), clock)
    now = clock.now()

    assert await store.record_refusal(key, "slack:U0CAROL", "not_approver", now, {}, once=True)
    assert not await store.record_refusal(key, "slack:U0CAROL", "not_approver", now, {}, once=True)
    assert await store.record_refusal(key, "slack:U0DAN", "not_approver", now, {}, once=True)
    assert await store.record_refusal(key, "slack:U0CAROL", "not_admin", now, {"x": 1}, once=True)
    assert await store.record_refusal(key, "slack:U0CAROL", "asker", now, {}), "not once: told"
    assert await store.record_refusal(key, "slack:U0CAROL", "asker", now, {})

    refusals = [a for a in await store.audit(key) if a.action == "refusal"]
    assert len(refusals) == 6, "every attempt is audited, told or not"
    assert [bool((a.detail or {}).get("repeat")) for a in refusals] == [
        False, True, False, False, False, False,
    ]  # fmt: skip


async def test_two_replicas_racing_tell_it_once(db_url: str) -> None:
    """Two stores on one database (two replicas), the same person's attempts at once: one of
    them is first, whichever replica wins."""
    clock = FakeClock()
    one, two = SqlStore.from_url(db_url), SqlStore.from_url(db_url)
    try:
        key = await asked(Service(one, clock, People(), [ROUTE]), clock)
        for round_ in range(5):
            who = f"slack:U0RACER{round_}"
            told = await asyncio.gather(
                *(
                    s.record_refusal(key, who, "not_approver", clock.now(), {}, once=True)
                    for s in (one, two, one, two)
                )
            )
            assert sorted(told) == [False, False, False, True]
    finally:
        await one.close()
        await two.close()


async def test_a_non_approver_is_told_who_may_once_on_any_replica_and_after_a_restart(
    db_url: str,
) -> None:
    clock = FakeClock()
    first_store = SqlStore.from_url(db_url)
    replica = SqlStore.from_url(db_url)
    try:
        svc = Service(first_store, clock, People(), [ROUTE])
        other = Service(replica, clock, People(), [ROUTE])
        key = await asked(svc, clock)
        second_question = await asked(svc, clock, "eli_other")

        told = await svc.act(click(key))
        assert told.kind is OutcomeKind.REFUSED
        assert not told.repeated
        assert told.message == "Only the approvers of this route can decide: slack:U0ALICE, bob."

        for again in (
            await other.act(click(key, option="no")),  # another replica, another option
            await svc.act(ClaimIt(key, CAROL, "slack:C0APPROVALS")),  # "I'm on it"
        ):
            assert again.kind is OutcomeKind.REFUSED
            assert again.repeated
            assert again.message == TOLD_BEFORE
            assert again.refusal is not None
            assert again.refusal.code is RefusalCode.NOT_APPROVER

        elsewhere = await svc.act(click(second_question))
        assert not elsewhere.repeated, "once per question: another question is told in full"
    finally:
        await first_store.close()

    restarted = SqlStore.from_url(db_url)
    try:
        after = await Service(restarted, clock, People(), [ROUTE]).act(click(key))
        assert after.repeated
        audit = [a for a in await restarted.audit(key) if a.action == "refusal"]
        assert [a.actor for a in audit] == ["slack:U0CAROL"] * 4
        assert [(a.detail or {}).get("repeat", False) for a in audit] == [False, True, True, True]
    finally:
        await restarted.close()
        await replica.close()

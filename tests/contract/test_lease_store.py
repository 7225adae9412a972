"""The Leases and Pacing ports on SQLite and PostgreSQL: one holder at a time, a lease that runs
out moves, and a shared rate hands out distinct slots ``interval`` apart even to replicas asking
at the same moment."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from bot.domain.store import Store
from store.sql import SqlStore
from tests.conftest import FakeClock

TTL = timedelta(seconds=10)
RACERS = 8


async def test_a_free_lease_is_taken_and_a_held_one_refused(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    assert await store.acquire_lease("matrix:@bot:hs", "a", now, TTL)
    assert not await store.acquire_lease("matrix:@bot:hs", "b", now + timedelta(seconds=9), TTL)
    [view] = await store.leases()
    assert (view.name, view.holder, view.until, view.since) == (
        "matrix:@bot:hs",
        "a",
        now + TTL,
        now,
    )


async def test_a_renewal_extends_the_lease_and_keeps_its_start(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    assert await store.acquire_lease("poller", "a", start, TTL)
    later = clock.advance(4)
    assert await store.acquire_lease("poller", "a", later, TTL)
    [view] = await store.leases()
    assert (view.holder, view.until, view.since) == ("a", later + TTL, start)
    # Still held at the old expiry: the renewal counts, not the first lease.
    assert not await store.acquire_lease("poller", "b", start + TTL + timedelta(seconds=1), TTL)


async def test_a_lease_that_ran_out_moves_and_its_start_restarts(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    assert await store.acquire_lease("poller", "a", start, TTL)
    assert not await store.acquire_lease("poller", "b", start + TTL, TTL), "held until `until`"
    taken = start + TTL + timedelta(milliseconds=1)
    assert await store.acquire_lease("poller", "b", taken, TTL)
    [view] = await store.leases()
    assert (view.holder, view.until, view.since) == ("b", taken + TTL, taken)
    # The old holder comes back: the lease is no longer its own to renew.
    assert not await store.acquire_lease("poller", "a", taken + timedelta(seconds=1), TTL)


async def test_release_frees_the_lease_only_for_its_holder(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    assert await store.acquire_lease("one", "a", now, TTL)
    assert await store.acquire_lease("two", "a", now, TTL)
    await store.release_lease("one", "b")
    assert [v.name for v in await store.leases()] == ["one", "two"]
    await store.release_lease("one", "a")
    assert [v.name for v in await store.leases()] == ["two"]
    assert await store.acquire_lease("one", "b", now, TTL), "released: free at once"


async def test_a_slot_is_never_before_now_and_the_next_waits_an_interval(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    assert await store.reserve_slot("slack:post:C1", 1.0, now) == now
    assert await store.reserve_slot("slack:post:C1", 1.0, now) == now + timedelta(seconds=1)
    assert await store.reserve_slot("slack:post:C1", 1.0, now) == now + timedelta(seconds=2)
    # Another key has its own rate.
    assert await store.reserve_slot("slack:post:C2", 1.0, now) == now
    # After a quiet spell the next slot is now, not a backlog of old ones.
    later = now + timedelta(seconds=30)
    assert await store.reserve_slot("slack:post:C1", 1.0, later) == later
    assert await store.reserve_slot("slack:post:C1", 0.25, later) == later + timedelta(seconds=1)
    assert await store.reserve_slot("slack:post:C1", 0.25, later) == later + timedelta(seconds=1.25)


async def test_concurrent_reservations_get_distinct_slots_an_interval_apart(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    slots = await asyncio.gather(
        *(store.reserve_slot("slack:update", 0.5, now) for _ in range(RACERS * 2))
    )
    assert sorted(slots) == [now + timedelta(seconds=0.5 * i) for i in range(RACERS * 2)]


# -- replicas: one store each on the same database -----------------------------------------------


async def _replicas(url: str, n: int) -> list[SqlStore]:
    """``n`` stores on one database, connected before the race so they start it together."""
    replicas = [SqlStore.from_url(url) for _ in range(n)]
    await asyncio.gather(*(r.ping() for r in replicas))
    return replicas


async def test_replicas_racing_for_a_lease_leave_one_holder(db_url: str, clock: FakeClock) -> None:
    replicas = await _replicas(db_url, RACERS)
    try:
        for round_ in range(5):
            name = f"race:{round_}"
            now = clock.advance(60)
            if round_ % 2:  # a dead holder's lease, run out: the race is to take it over
                assert await replicas[0].acquire_lease(name, "dead", now - 2 * TTL, TTL)
            won = await asyncio.gather(
                *(r.acquire_lease(name, f"replica-{i}", now, TTL) for i, r in enumerate(replicas))
            )
            assert sum(won) == 1, won
            held = {v.name: v.holder for v in await replicas[0].leases()}
            assert held[name] == f"replica-{won.index(True)}"
    finally:
        await asyncio.gather(*(r.close() for r in replicas))


async def test_replicas_share_one_rate(db_url: str, clock: FakeClock) -> None:
    replicas = await _replicas(db_url, 4)
    try:
        now = clock.now()
        slots: list[datetime] = []
        for _ in range(3):
            slots += await asyncio.gather(
                *(r.reserve_slot("slack:post:C1", 1.0, now) for r in replicas for _ in range(3))
            )
        assert sorted(slots) == [now + timedelta(seconds=i) for i in range(36)]
    finally:
        await asyncio.gather(*(r.close() for r in replicas))

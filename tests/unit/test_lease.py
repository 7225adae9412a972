"""The LeaseKeeper on a SQLite store: the work runs only while the lease is ours, stops the moment
it is lost or can no longer be renewed in time, and a crashed work is restarted.

Lease times come from a FakeClock the test moves; the keeper's sleeps are real but short (a ttl
of 0.3 s renews every 0.1 s)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta

import pytest

from bot.domain.store import Leases
from bot.lease import OWNER, LeaseKeeper, owner_id
from store.sql import SqlStore
from tests.conftest import FakeClock

NAME = "pinework:https://pinework.example#acme"
TTL = 0.3
WITHIN = 5.0


async def eventually(check: Callable[[], bool], what: str, within: float = WITHIN) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Work:
    """A work that records its runs and runs until cancelled (or fails when told to)."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.running = False
        self.fail_next = False

    async def __call__(self) -> None:
        self.started += 1
        self.running = True
        try:
            if self.fail_next:
                self.fail_next = False
                raise RuntimeError("the poller broke")
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running = False


class FlakyStore(SqlStore):
    """A SQLite store whose lease calls fail while ``down`` and hang while ``hangs``."""

    down = False
    hangs = False

    async def acquire_lease(self, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
        if self.down:
            raise ConnectionError("the database went away")
        if self.hangs:
            await asyncio.Event().wait()
        return await super().acquire_lease(name, holder, now, ttl)


@pytest.fixture
async def flaky_store(sqlite_url: str) -> AsyncIterator[FlakyStore]:
    store = FlakyStore.from_url(sqlite_url)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def store(sqlite_store: SqlStore) -> SqlStore:
    return sqlite_store


def keeper(store: Leases, work: Work, clock: FakeClock, holder: str) -> LeaseKeeper:
    return LeaseKeeper(store, NAME, work, clock=clock, holder=holder, ttl=TTL)


def test_the_owner_id_names_this_process_and_is_unique_per_call() -> None:
    assert f"-{os.getpid()}-" in OWNER
    assert owner_id() != owner_id()


async def test_the_work_runs_only_while_the_lease_is_held(
    store: SqlStore, clock: FakeClock
) -> None:
    first, second = Work(), Work()
    async with keeper(store, first, clock, "a") as a:
        await eventually(lambda: first.running, "the holder's work")
        assert a.held
        async with keeper(store, second, clock, "b") as b:
            await eventually(lambda: b.standby, "the second keeper to stand by")
            await asyncio.sleep(TTL)  # several renewals and retries
            assert second.started == 0
            assert not b.held
            [view] = await store.leases()
            assert view.holder == "a"
    assert first.cancelled == 1, "an orderly stop cancels the work"
    assert await store.leases() == [], "and releases the lease"


async def test_a_lease_taken_over_cancels_the_old_holders_work(
    store: SqlStore, clock: FakeClock
) -> None:
    """A paused holder (its renewals late) finds another replica holding its lease."""
    work = Work()
    async with keeper(store, work, clock, "a") as a:
        await eventually(lambda: work.running, "the work")
        # Meanwhile the lease ran out and another replica took it.
        clock.advance(TTL * 2)
        assert await store.acquire_lease(NAME, "b", clock.now(), timedelta(seconds=60))
        await eventually(lambda: not work.running, "the work to be cancelled")
        assert (a.held, a.standby, work.cancelled) == (False, True, 1)
        assert [v.holder for v in await store.leases()] == ["b"], "not released: not ours"


async def test_a_store_that_cannot_renew_stops_the_work_before_the_lease_runs_out(
    flaky_store: FlakyStore, clock: FakeClock
) -> None:
    work = Work()
    async with keeper(flaky_store, work, clock, "a") as a:
        await eventually(lambda: work.running, "the work")
        [held] = await flaky_store.leases()
        flaky_store.down = True
        # One renewal missed with time to spare: the work goes on.
        clock.advance(TTL / 3)
        await asyncio.sleep(TTL / 2)
        assert work.running
        # The next renewal would come after the lease ran out: stop now, before anyone can take it.
        clock.current = held.until - timedelta(seconds=TTL / 3)
        await eventually(lambda: not work.running, "the work to stop")
        assert clock.now() < held.until
        assert not a.held
        # The store is back: the lease (still ours, or free) is taken again and the work restarts.
        flaky_store.down = False
        await eventually(lambda: work.running and a.held, "the work to restart")
        assert work.started == 2


async def test_a_store_that_hangs_counts_as_down(flaky_store: FlakyStore, clock: FakeClock) -> None:
    work = Work()
    async with keeper(flaky_store, work, clock, "a") as a:
        await eventually(lambda: work.running, "the work")
        [held] = await flaky_store.leases()
        flaky_store.hangs = True
        clock.current = held.until - timedelta(seconds=TTL / 3)
        await eventually(lambda: not work.running, "the work to stop")
        assert not a.held
        flaky_store.hangs = False


async def test_a_work_that_fails_lets_the_lease_go_and_runs_again(
    store: SqlStore, clock: FakeClock
) -> None:
    work = Work()
    work.fail_next = True
    async with keeper(store, work, clock, "a") as a:
        await eventually(lambda: work.started == 2 and work.running, "the restarted work")
        assert a.held
        assert a.takeovers == 2, "released after the failure, then acquired again"


async def test_cancelling_the_keeper_is_a_crash_the_lease_is_left_to_run_out(
    store: SqlStore, clock: FakeClock
) -> None:
    work = Work()
    a = keeper(store, work, clock, "a")
    task = asyncio.create_task(a.run())
    await eventually(lambda: work.running, "the work")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not work.running
    assert [(v.holder, v.until > clock.now()) for v in await store.leases()] == [("a", True)]
    # Another keeper waits for it to run out, then takes it.
    other = Work()
    async with keeper(store, other, clock, "b") as b:
        await eventually(lambda: b.standby, "the standby")
        clock.advance(TTL + 0.001)
        await eventually(lambda: other.running, "the take-over")
        assert [v.holder for v in await store.leases()] == ["b"]


async def test_a_stop_event_ends_the_run_and_releases(store: SqlStore, clock: FakeClock) -> None:
    work = Work()
    stop = asyncio.Event()
    task = asyncio.create_task(keeper(store, work, clock, "a").run(stop))
    await eventually(lambda: work.running, "the work")
    stop.set()
    await asyncio.wait_for(task, WITHIN)
    assert work.cancelled == 1
    assert await store.leases() == []


async def test_the_default_ttl_moves_a_dead_holders_lease_within_15_seconds(
    store: SqlStore,
) -> None:
    k = LeaseKeeper(store, NAME, Work(), clock=FakeClock())
    # Dead right after a renewal: its lease lasts ttl; a standby asks every retry seconds.
    assert k.ttl.total_seconds() + k.retry <= 12.5
    assert k.renew_every * 2 < k.ttl.total_seconds(), "two renewals fit in a lease"

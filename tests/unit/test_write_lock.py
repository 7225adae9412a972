"""SQLite's in-process write lock: one writer at a time, urgent writers (what an ack waits for)
ahead of ordinary ones, and a cancelled waiter never strands the lock."""

from __future__ import annotations

import asyncio

from store.sql.base import WriteLock


async def test_urgent_waiters_go_first_then_first_come_first_served() -> None:
    lock = WriteLock()
    await lock.acquire()
    order: list[str] = []

    async def writer(name: str, *, urgent: bool = False) -> None:
        await lock.acquire(urgent=urgent)
        order.append(name)
        await asyncio.sleep(0)
        lock.release()

    tasks = [
        asyncio.create_task(writer("a")),
        asyncio.create_task(writer("b")),
        asyncio.create_task(writer("ack", urgent=True)),
    ]
    await asyncio.sleep(0)
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["ack", "a", "b"]


async def test_a_cancelled_waiter_passes_the_lock_on() -> None:
    lock = WriteLock()
    await lock.acquire()
    cancelled = asyncio.create_task(lock.acquire())
    after = asyncio.create_task(lock.acquire())
    await asyncio.sleep(0)
    lock.release()  # handed to ``cancelled``, which is cancelled before it runs
    cancelled.cancel()
    await asyncio.wait_for(after, 1.0)
    assert cancelled.cancelled()
    lock.release()
    await asyncio.wait_for(lock.acquire(), 1.0)  # free again

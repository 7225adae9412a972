"""One racer of the answer race: its own process, its own SqlStore, released by a shared barrier.

Started with the multiprocessing 'spawn' context by ``test_answer_race.py``, once for every
database. Each round the parent sends ``(url, key, now)`` on the racer's own queue; the racer opens
(and pings) a store for a URL it has not seen yet, waits on the barrier, then calls
``record_answer`` at once and reports ``Outcome`` on the shared result queue. ``None`` ends it.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

from bot.domain.model import Answer, ElicitationKey
from store.sql import SqlStore

BARRIER_TIMEOUT_S = 30.0

Task = tuple[str, ElicitationKey, datetime]
"""(database URL, elicitation key, the time of the answers)."""


@dataclass(frozen=True)
class Outcome:
    index: int
    key: ElicitationKey
    won: bool
    status: str
    respondent: str | None
    """The respondent of the answer the racer saw as recorded (its own if it won)."""
    released_at: float
    """``time.monotonic()`` just after the barrier let it go (system-wide on Linux)."""


@dataclass(frozen=True)
class Ready:
    index: int


@dataclass(frozen=True)
class Failed:
    index: int
    error: str


def respondent(index: int) -> str:
    return f"slack:U{index:04d}"


async def _race(
    index: int,
    barrier: Barrier,
    tasks: Queue[Task | None],
    results: Queue[Outcome | Ready | Failed],
) -> None:
    url: str | None = None
    store: SqlStore | None = None
    try:
        results.put(Ready(index))
        while (task := tasks.get()) is not None:
            task_url, key, now = task
            if store is None or task_url != url:
                if store is not None:
                    await store.close()
                url, store = task_url, SqlStore.from_url(task_url)
                await store.ping()  # connect before the round: the race is record_answer only
            mine = Answer(option_ids=("yes",), respondent=respondent(index), via="slack:C0", at=now)
            barrier.wait(BARRIER_TIMEOUT_S)
            released_at = time.monotonic()
            result = await store.record_answer(
                key, mine, now, approving=True, audit={"racer": index}
            )
            results.put(
                Outcome(
                    index=index,
                    key=key,
                    won=result.won,
                    status=result.status.value,
                    respondent=result.answer.respondent if result.answer else None,
                    released_at=released_at,
                )
            )
    finally:
        if store is not None:
            await store.close()


def run(
    index: int,
    barrier: Barrier,
    tasks: Queue[Task | None],
    results: Queue[Outcome | Ready | Failed],
) -> None:
    """The process target: any error is reported to the parent instead of a silent hang."""
    try:
        asyncio.run(_race(index, barrier, tasks, results))
    except BaseException:
        barrier.abort()
        results.put(Failed(index, traceback.format_exc()))
        raise

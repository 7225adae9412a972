"""Wakes the timekeeper: APScheduler 3.x as an alarm clock, never as the source of truth.

It looks every ``sweep_seconds`` (and at start: what fell due while down fires once, late) and at
the next due time, re-armed after every run and when a write of ours plans an earlier one. No job
store (not safely shared between processes, and a ``misfire_grace_time`` of 1 s drops jobs missed
in a restart). A wake-up during a run makes that run look again when it ends: runs never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.streak import Streak
from bot.timekeeper import Timekeeper

log = structlog.get_logger("elicitbot.scheduler")

SWEEP_SECONDS = 15.0
STOP_GRACE_SECONDS = 10.0


class Scheduler:
    def __init__(
        self,
        timekeeper: Timekeeper,
        *,
        sweep_seconds: float = SWEEP_SECONDS,
        stop_grace_seconds: float = STOP_GRACE_SECONDS,
    ) -> None:
        self.timekeeper = timekeeper
        self.sweep_seconds = sweep_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self._aps: AsyncIOScheduler | None = None
        self._armed: datetime | None = None
        self._running = False
        self._failing = Streak(log, "deadline.run_failed")
        self._again = False
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._unwatch: list[Callable[[], None]] = []
        self.runs = 0
        """How many runs completed (for tests and metrics)."""

    @property
    def started(self) -> bool:
        return self._aps is not None and not self._stopping

    async def start(self) -> None:
        """Start waking; the first run is at once (deadlines missed while down fire now)."""
        store = self.timekeeper.store
        if store.single_process:
            # One process owns a SQLite file: claims left by a killed predecessor are ours again.
            released = await store.release_deadline_claims()
            if released:
                log.info("deadline.released", rows=released)
        self._stopping = False
        aps = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 2},
        )
        aps.add_job(
            self._on_sweep,
            IntervalTrigger(seconds=self.sweep_seconds, timezone=UTC),
            id="deadline-sweep",
            next_run_time=datetime.now(UTC),
        )
        aps.start()
        self._aps = aps
        self._unwatch = [store.watch_deadlines(self.wake_at)]
        log.info("scheduler.started", sweep_seconds=self.sweep_seconds)

    def wake_at(self, when: datetime) -> None:
        """Look for due deadlines at ``when`` (or now, if past) unless a wake-up comes earlier."""
        aps = self._aps
        if aps is None or self._stopping:
            return
        now = datetime.now(UTC)
        if when > now + timedelta(seconds=self.sweep_seconds):
            return  # the sweep gets there first
        if self._armed is not None and self._armed <= when:
            return
        self._armed = when
        aps.add_job(
            self._on_wake,
            DateTrigger(run_date=max(when, now), timezone=UTC),
            id="deadline-wake",
            replace_existing=True,
        )

    async def _on_wake(self) -> None:
        self._armed = None
        await self._run()

    async def _on_sweep(self) -> None:
        await self._run()

    async def _run(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        self._idle.clear()
        try:
            while not self._stopping:
                self._again = False
                try:
                    nxt = await self.timekeeper.run_due()
                    self._failing.ok()
                except Exception:  # the sweep tries again; a failing store must not stop it
                    self._failing.failed()
                    nxt = None
                self.runs += 1
                if nxt is not None:
                    self.wake_at(nxt)
                if not self._again:
                    break
        finally:
            self._running = False
            self._idle.set()

    async def stop(self) -> None:
        """Stop waking; a run in progress finishes first (up to ``stop_grace_seconds``)."""
        self._stopping = True
        for unwatch in self._unwatch:
            unwatch()
        self._unwatch = []
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=self.stop_grace_seconds)
        aps, self._aps = self._aps, None
        self._armed = None
        if aps is not None and aps.running:
            aps.shutdown(wait=False)
            await asyncio.sleep(0)  # the shutdown runs on the loop
        log.info("scheduler.stopped")

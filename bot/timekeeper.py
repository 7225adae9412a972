"""The timekeeper: claims due deadlines from the store and fires each once, in one transaction that
writes what :func:`bot.domain.deadlines.fire` decides on the elicitation as it stands then, so
nothing is sent for one answered in between. :class:`bot.scheduler.Scheduler` wakes it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from bot.domain import deadlines
from bot.domain.deadlines import FireContext, Firing
from bot.domain.model import People
from bot.domain.ports import Clock
from bot.domain.records import FiredDeadline, FireOutcome
from bot.domain.store import Store

log = structlog.get_logger("elicitbot.timekeeper")

BATCH = 500
"""Deadlines claimed and fired per transaction."""
LEASE = timedelta(seconds=30)
"""How long a claim holds before another process may take the row (a crashed claimer)."""


class Timekeeper:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        people: People | Callable[[], People],
        *,
        claimer: str | None = None,
        batch: int = BATCH,
        lease: timedelta = LEASE,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self._people = people
        """Who is who (admins are mentioned in escalations): a value, or a function read at every
        firing so identities learnt at start (the Slack bot's own) are seen."""
        self.claimer = claimer or f"tk-{uuid.uuid4().hex[:16]}"
        self.batch = batch
        self.lease = lease
        self.on_change = on_change
        """Called after a tick wrote outbox rows (wire it to ``Dispatcher.wake``)."""

    async def tick(self) -> list[FiredDeadline]:
        """Claim what is due now (at most ``batch``) and fire it; one entry per claimed row."""
        due = await self.store.claim_deadlines(
            self.clock.now(), self.claimer, limit=self.batch, lease=self.lease
        )
        if not due:
            return []
        now = self.clock.now()
        fired = await self.store.fire_deadlines(due, self.claimer, now, self._decide)
        outcomes = Counter(f.outcome for f in fired)
        if outcomes[FireOutcome.FIRED] or outcomes[FireOutcome.DEFERRED]:
            self.on_change()
        for f in fired:
            if f.outcome is FireOutcome.SKIPPED:  # someone expected it: say so where it is seen
                log.warning("deadline.skipped", key=f.elicitation_key, kind=str(f.kind))
        log.info(
            "deadline.tick",
            claimed=len(due),
            **{str(k): v for k, v in outcomes.items()},
            late_ms_max=round(max((now - d.due_at).total_seconds() for d in due) * 1000),
        )
        return fired

    def _decide(self, ctx: FireContext) -> Firing:
        people = self._people if isinstance(self._people, People) else self._people()
        return deadlines.fire(ctx, admins=people.admins)

    async def run_due(self) -> datetime | None:
        """Fire everything due now (batch after batch); returns when the next one is due."""
        while len(await self.tick()) >= self.batch:
            pass
        return await self.store.next_deadline_at(self.clock.now())

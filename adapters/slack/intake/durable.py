"""Durable before ack (rule 4): record an interaction before its HTTP ack, mark it handled, replay
what a killed process left open. Knows no Bolt and no payload shape.

Not recorded (database down) → :class:`NotRecordedError` → 503, never an ack. On SQLite the ack
waits for a group-committed record ahead of other writers (p99 ~20 ms at 100 clicks/s,
``bench/slack_clicks.py``); a full GC stops it too, which is why ``serve`` freezes what start
built. Marked handled once ``act`` returns or the work ends otherwise (a replay would fail alike);
cancelled or killed, it stays open. Replayed at start and every :data:`REPLAY_EVERY`: on SQLite at
once, on PostgreSQL after :data:`REPLAY_GRACE` (another replica may be on it); the first answer
wins, so a replay records nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

import structlog

from adapters.slack.intake.trims import RAW_CHANNEL, raw_key
from bot.domain.ports import Clock
from bot.domain.records import RawEvent
from bot.domain.store import RawEvents

log = structlog.get_logger("elicitbot.slack.app")

REPLAY_EVERY = 10.0
"""Seconds between looks for recorded interactions nobody finished handling."""
KEEP_HANDLED = timedelta(days=1)
"""How long a handled interaction's record (and its dedupe key) is kept: far beyond Slack's
retries (minutes), after which the first-answer rule alone makes a late repeat harmless."""
REPLAY_GRACE = timedelta(seconds=60)
"""How old an open interaction must be before another process replays it: older than any live
handling (the core has it within a second or two; the mark follows at once)."""
REPLAY_PAGE = 100

_RAW_ID: ContextVar[int | None] = ContextVar("slack_raw_id", default=None)
"""The recorded event the running interaction handles (set in its task; see ``settle``)."""


class NotRecordedError(Exception):
    """The interaction could not be recorded: it must not be acked."""


class Durable:
    """Records interactions before their ack, marks them handled, replays what was left open.

    ``raw`` None: nothing is recorded (every interaction is handled, acked unrecorded) and
    nothing is replayed. ``handle``: how a replayed record is handled (the listeners' path)."""

    def __init__(
        self,
        raw: RawEvents | None,
        clock: Clock,
        handle: Callable[[RawEvent], Awaitable[None]],
    ) -> None:
        self.raw = raw
        self.clock = clock
        self._handle = handle
        self.started_at = clock.now()
        """What was recorded before this is a predecessor's (see :meth:`run_replays`)."""
        self._in_flight: set[int] = set()
        """Recorded events being handled here (a replay leaves them alone)."""

    # ------------------------------------------------------------------ before the ack

    async def record(self, body: dict[str, Any]) -> tuple[bool, int | None]:
        """Record an interaction before its ack: (handle it?, its raw id). Recorded before:
        (False, None). No store: (True, None). Raises NotRecordedError when it could not be
        recorded (nothing is acked then)."""
        if self.raw is None:
            return True, None
        key = raw_key(body)
        try:
            raw_id = await self.raw.record_raw(RAW_CHANNEL, key, body, self.clock.now())
        except Exception as exc:
            # By kind only: a database error's text carries the statement's parameters.
            log.error("slack.not_recorded", key=key, error=type(exc).__name__)  # noqa: TRY400
            raise NotRecordedError(key) from None
        if raw_id is None:
            log.info("slack.redelivered", key=key)
            return False, None
        self._in_flight.add(raw_id)
        return True, raw_id

    # ------------------------------------------------------------------ after it

    async def guard(
        self, work: Awaitable[None], what: str, sensitive: bool, raw_id: int | None = None
    ) -> None:
        """Run one interaction's work (the one error boundary per interaction); then mark its
        recorded event handled, even when the work failed (the failure is logged; a replay
        would fail alike). ``sensitive``: it may hold a secret, so a failure is logged by kind
        only (no message, no traceback). Cancelled (a stop, a kill): left open, for a replay."""
        token = _RAW_ID.set(raw_id)
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if sensitive:
                log.error("slack.interaction_failed", what=what, error=type(exc).__name__)  # noqa: TRY400
            else:
                log.exception("slack.interaction_failed", what=what)
        finally:
            unsettled = _RAW_ID.get()  # None once settle() marked it
            _RAW_ID.reset(token)
        if unsettled is not None:
            await self._mark_handled(unsettled)

    async def settle(self) -> None:
        """The core has the interaction's action (``act`` returned): mark its recorded event
        handled now, so a replay from here on does not act again; what follows (a thread note,
        an ephemeral) is best effort."""
        raw_id = _RAW_ID.get()
        if raw_id is not None:
            _RAW_ID.set(None)
            await self._mark_handled(raw_id)

    async def _mark_handled(self, raw_id: int) -> None:
        if self.raw is None:
            return
        try:
            await self.raw.handled_raw(raw_id, self.clock.now())
        except Exception as exc:  # left open: a later replay judges it again
            log.warning("slack.raw_not_marked", raw_id=raw_id, error=type(exc).__name__)
        else:
            self._in_flight.discard(raw_id)

    # ------------------------------------------------------------------ replays

    async def replay(self, *, before: datetime) -> int:
        """Handle every interaction recorded before ``before`` and not handled yet (a killed
        process's), oldest first, through ``handle``; returns how many.

        Every one is handled whatever its age: Slack told the person it was received, and the
        rules judge it as of now (expired, already answered: the person is told)."""
        if self.raw is None:
            return 0
        handled = 0
        seen: set[int] = set()
        while True:
            page = await self.raw.open_raw(RAW_CHANNEL, limit=REPLAY_PAGE)
            due = [
                r
                for r in page
                if r.id not in seen and r.id not in self._in_flight and r.received_at < before
            ]
            if not due:
                return handled
            for event in due:
                seen.add(event.id)
                self._in_flight.add(event.id)
                log.info("slack.replay", raw_id=event.id, key=event.dedupe_key)
                await self.guard(
                    self._handle(event),
                    "replay",
                    sensitive=event.body.get("type") == "view_submission",
                    raw_id=event.id,
                )
                handled += 1

    async def run_replays(
        self,
        stop: asyncio.Event,
        *,
        ours: bool,
        every: float = REPLAY_EVERY,
        grace: timedelta = REPLAY_GRACE,
    ) -> None:
        """Replay at start, then every ``every`` seconds until ``stop``.

        ``ours``: one process owns the store (SQLite), so whatever was recorded before this
        started is a predecessor's, replayed at once; otherwise (several replicas) an open event
        is replayed once it is ``grace`` old: its own process is done with it or dead."""
        while not stop.is_set():
            now = self.clock.now()
            before = max(self.started_at, now - grace) if ours else now - grace
            try:
                replayed = await self.replay(before=before)
                purged = await self.raw.purge_raw(now - KEEP_HANDLED) if self.raw else 0
            except Exception as exc:  # the database is down: look again next round
                log.warning("slack.replay_failed", error=type(exc).__name__)
            else:
                if replayed:
                    log.info("slack.replayed", events=replayed)
                if purged:
                    log.info("slack.raw_purged", events=purged)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)

"""Durable before ack (rule 4): record an interaction before its HTTP ack, mark it handled, replay
what a killed process left open. Knows no Bolt and no payload shape.

Not recorded (database down): 503, never an ack. On SQLite the ack waits for a group-committed
record (p99 ~20 ms at 100 clicks/s, ``bench/slack_clicks.py``); a full GC stops it too, which is
why ``serve`` freezes what start built. Cancelled or killed, a record stays open and is replayed;
the first answer wins, so a replay records nothing twice.
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
"""Far beyond Slack's retries (minutes); after it the first-answer rule makes a repeat harmless."""
REPLAY_GRACE = timedelta(seconds=60)
"""Age before another process replays an open interaction: beyond any live handling (seconds)."""
REPLAY_PAGE = 100

_RAW_ID: ContextVar[int | None] = ContextVar("slack_raw_id", default=None)
"""The record the running interaction handles (set in its own task)."""


class NotRecordedError(Exception):
    """The interaction could not be recorded: it must not be acked."""


class Durable:
    """Replays go through ``handle``. ``raw`` None: nothing is recorded or replayed."""

    def __init__(
        self,
        raw: RawEvents | None,
        clock: Clock,
        handle: Callable[[RawEvent], Awaitable[None]],
    ) -> None:
        self.raw = raw
        self.clock = clock
        self._handle = handle
        self.started_at = clock.now()  # before it: a predecessor's record
        self._in_flight: set[int] = set()  # handled here: a replay leaves them alone

    async def record(self, body: dict[str, Any]) -> tuple[bool, int | None]:
        """(handle it?, raw id): recorded before (False, None); no store (True, None);
        NotRecordedError when it could not be recorded (nothing is acked then)."""
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

    async def guard(
        self, work: Awaitable[None], what: str, sensitive: bool, raw_id: int | None = None
    ) -> None:
        """The one error boundary per interaction; marks the record handled even when the work
        failed (a replay would fail alike), not when cancelled. ``sensitive``: log by kind only."""
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
        """``act`` returned: mark the record handled now; what follows is best effort."""
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

    async def replay(self, *, before: datetime) -> int:
        """Handle every open record from before ``before``, oldest first; returns how many.
        Whatever its age: Slack told the person it was received, and the rules judge it now."""
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
    ) -> None:
        """Replay at start, then every ``every`` s. ``ours`` (one process owns the store): a
        predecessor's records at once; else each once :data:`REPLAY_GRACE` old."""
        while not stop.is_set():
            now = self.clock.now()
            before = now - REPLAY_GRACE
            before = max(self.started_at, before) if ours else before
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

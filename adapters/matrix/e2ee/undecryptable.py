"""Answers the bot could not decrypt: logged, their key asked for, retried after each batch and,
after ``key_wait`` seconds, reported in the prompt's thread; never silently dropped
(docs/matrix-e2ee.md §5).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from nio import MegolmEvent

from adapters.matrix.e2ee.crypto import MatrixCrypto, log_undecryptable
from adapters.matrix.intake.handling import RoomEvents
from adapters.matrix.intake.notices import UNREADABLE, Said
from adapters.matrix.translate import reply_root
from bot.domain.records import NoticeKind

log = structlog.get_logger("elicitbot.matrix")

KEY_WAIT = 30.0
"""Seconds the bot waits for a missing key before it says in the thread it could not read."""
REMEMBERED = 1024
"""Undecryptable events waited on at most (the oldest is reported at once past that)."""

Report = Callable[[str, MegolmEvent], Coroutine[Any, Any, None]]


@dataclass
class _Waiting:
    room_id: str
    event: MegolmEvent
    timer: asyncio.Task[None] | None = None


class Undecryptable:
    """Undecryptable timeline events waiting for their key."""

    def __init__(self, crypto: MatrixCrypto, report: Report, *, key_wait: float = KEY_WAIT) -> None:
        self.crypto = crypto
        self.report = report
        self.key_wait = key_wait
        self.seen = 0
        """Undecryptable events met (for tests and metrics)."""
        self.recovered = 0
        """Of which decrypted later, when their key came."""
        self._waiting: dict[str, _Waiting] = {}
        self.background: set[asyncio.Task[None]] = set()

    def saw(self, room_id: str, event: MegolmEvent) -> None:
        """An event nio could not decrypt: log it, ask for its key, and start the wait."""
        if event.event_id in self._waiting:
            return
        self.seen += 1
        relates = {k: v for k, v in relation(event).items() if k in ("rel_type", "event_id")}
        log_undecryptable(room_id, event, relates_to=relates)
        waiting = _Waiting(room_id, event)
        self._waiting[event.event_id] = waiting
        self._spawn(self.crypto.request_key(event))
        waiting.timer = self._spawn(self._wait(event.event_id))
        while len(self._waiting) > REMEMBERED:
            oldest = next(iter(self._waiting))
            self._give_up(oldest)

    def retry(self) -> list[tuple[str, Any]]:
        """The waiting events that decrypt now: (room id, decrypted event), oldest first."""
        readable: list[tuple[str, Any]] = []
        for event_id, waiting in list(self._waiting.items()):
            decrypted = self.crypto.decrypt(waiting.room_id, waiting.event)
            if decrypted is None:
                continue
            del self._waiting[event_id]
            if waiting.timer is not None:
                waiting.timer.cancel()
            self.recovered += 1
            log.info("matrix.decrypted_late", room_id=waiting.room_id, event_id=event_id)
            readable.append((waiting.room_id, decrypted))
        return readable

    async def flush(self) -> None:
        """Report every event still waiting, now (the listener stops: after a restart the sync
        resumes past them, so waiting longer would drop them silently)."""
        for event_id in list(self._waiting):
            self._give_up(event_id)
        await asyncio.gather(*self.background, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop waiting (the listener stops): nothing is reported after this."""
        self._waiting.clear()
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)

    async def _wait(self, event_id: str) -> None:
        await asyncio.sleep(self.key_wait)
        self._give_up(event_id)

    def _give_up(self, event_id: str) -> None:
        waiting = self._waiting.pop(event_id, None)
        if waiting is None:
            return
        if waiting.timer is not None and waiting.timer is not asyncio.current_task():
            waiting.timer.cancel()
        log.warning(
            "matrix.undecryptable_unanswered",
            room_id=waiting.room_id,
            event_id=event_id,
            sender=waiting.event.sender,
            waited=self.key_wait,
        )
        self._spawn(self.report(waiting.room_id, waiting.event))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self.background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.warning("matrix.undecryptable_failed", error=str(error) or type(error).__name__)


async def report(events: RoomEvents, room_id: str, event: MegolmEvent) -> None:
    """An event nobody could decrypt in time: if it relates to one of our prompts, its thread
    hears that the answer could not be read, mentioning the sender (one notice per event: its
    transaction id follows from the event)."""
    relates = relation(event)
    replied = relates.get("m.in_reply_to")
    target = relates.get("event_id") or (replied if isinstance(replied, dict) else {}).get(
        "event_id"
    )
    if not isinstance(target, str):
        return
    if relates.get("rel_type") == "m.replace":
        original = await events.chat.get_event(room_id, target)
        target = reply_root(original or {}) or target
    if await events.prompts.key_for(room_id, target) is None:
        return
    # A notice cannot reply to a reaction: it replies to the prompt then.
    reply_to = target if relates.get("rel_type") == "m.annotation" else str(event.event_id)
    words = Said(UNREADABLE, mention=True, kind=NoticeKind.REFUSAL)
    trigger = str(event.event_id)
    events.tell(room_id, target, str(event.sender), words, trigger=trigger, reply_to=reply_to)


def relation(event: MegolmEvent) -> dict[str, Any]:
    """The cleartext ``m.relates_to`` of an encrypted event ({} when it has none)."""
    content = event.source.get("content") if isinstance(event.source, dict) else None
    relates = content.get("m.relates_to") if isinstance(content, dict) else None
    return relates if isinstance(relates, dict) else {}

"""The dispatcher: claims outbox rows and carries them out through the ports.

Transient failures are retried with capped exponential backoff (or the peer's ``Retry-After``);
permanent ones are recorded on the row and, for a post, on its delivery. Each row's id is the
idempotency key handed to the adapter (Matrix txn id, Slack metadata, webhook header).

Views carry the schedule (what happens if nobody answers), the claim, and on an escalation copy
whom it mentions and where the original is. A reminder whose elicitation closed before it went
out is dropped, not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import structlog

from bot.domain import deadlines
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Status
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, Notice, PromptView
from bot.domain.records import (
    EffectKind,
    NoticeKind,
    OutboxItem,
    Purpose,
    StoredElicitation,
    Timeline,
)
from bot.domain.refs import MessageRef, ref_from_json
from bot.domain.store import Store
from bot.domain.views import prompt_view

log = structlog.get_logger("elicitbot.outbox")

MAX_ATTEMPTS = 25
MAX_BACKOFF_SECONDS = 300.0


def backoff(attempts: int, retry_after: float | None, jitter: Callable[[], float]) -> float:
    """Seconds to wait: the peer's Retry-After if given, else 2^n capped; plus jitter."""
    if retry_after is not None:
        return retry_after + jitter()
    return min(MAX_BACKOFF_SECONDS, 2.0 ** min(attempts, 12)) * (0.5 + jitter() / 2)


def platform_of(destination: str) -> str:
    return destination.split(":", 1)[0]


class Dispatcher:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        chats: Mapping[str, ChatAdapter],
        sinks: Mapping[str, AnswerSink],
        link_for: Callable[[str], str],
        *,
        claimer: str | None = None,
        concurrency: int = 8,
    ) -> None:
        self.store = store
        self.clock = clock
        self.chats = chats
        self.sinks = sinks
        self.link_for = link_for
        self.claimer = claimer or uuid.uuid4().hex
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(concurrency)
        self._rng = random.Random()  # noqa: S311 - jitter, not security

    def wake(self) -> None:
        self._wake.set()

    async def run_once(self) -> int:
        """Claim what is due and carry it out; returns how many rows were handled.

        Successful rows are marked done together, in one transaction.
        """
        items = await self.store.claim_outbox(self.clock.now(), self.claimer)
        if not items:
            return 0
        stored = await self.store.get_many([i.elicitation_key for i in items])
        timelines = await self.store.timelines(
            [i.elicitation_key for i in items if i.kind in (EffectKind.POST, EffectKind.UPDATE)]
        )
        outcomes = await asyncio.gather(*(self._guarded(item, stored, timelines) for item in items))
        done = [outcome for outcome in outcomes if outcome is not None]
        await self.store.complete_many(done, self.claimer, self.clock.now())
        return len(items)

    async def run(self, stop: asyncio.Event, *, idle_seconds: float = 1.0) -> None:
        """Loop until ``stop`` is set; woken early by ``wake()`` (new rows) or the next due time."""
        while not stop.is_set():
            self._wake.clear()  # before the claim: a wake() during it is not lost
            try:
                handled = await self.run_once()
            except Exception:
                log.exception("outbox.claim_failed")
                handled = 0
            if handled or stop.is_set():
                continue
            timeout = await self._idle(idle_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)

    async def _idle(self, idle_seconds: float) -> float:
        """How long to sleep: until the next retry is due, at most ``idle_seconds``."""
        try:
            nxt = await self.store.next_outbox_at()
        except Exception:
            log.exception("outbox.next_failed")
            return idle_seconds
        if nxt is None:
            return idle_seconds
        return max(0.01, min(idle_seconds, (nxt - self.clock.now()).total_seconds()))

    async def _guarded(
        self,
        item: OutboxItem,
        stored: Mapping[str, StoredElicitation],
        timelines: Mapping[str, Timeline] | None = None,
    ) -> tuple[OutboxItem, MessageRef | None] | None:
        """Carry out one row: (item, ref) when it succeeded, None when it is retried or failed."""
        async with self._slots:
            current = stored.get(item.elicitation_key)
            timeline = (timelines or {}).get(item.elicitation_key)
            try:
                ref = await self._execute(item, current, timeline)
                # A post shows the version it rendered: completing compares it with the store's.
                return replace(item, version=current.version if current else item.version), ref
            except TransientDeliveryError as exc:
                await self._retry(item, str(exc), exc.retry_after)
            except PermanentDeliveryError as exc:
                log.warning(
                    "outbox.failed", id=item.id, kind=item.kind, target=item.target, error=str(exc)
                )
                await self.store.fail_outbox(item, self.claimer, str(exc), self.clock.now())
            except Exception as exc:  # the one broad boundary: record it on the row, keep going
                log.exception("outbox.error", id=item.id, kind=item.kind, target=item.target)
                await self._retry(item, f"{type(exc).__name__}: {exc}", None)
            return None

    async def _retry(self, item: OutboxItem, error: str, retry_after: float | None) -> None:
        now = self.clock.now()
        if item.attempts >= MAX_ATTEMPTS:
            await self.store.fail_outbox(
                item, self.claimer, f"gave up after {item.attempts}: {error}", now
            )
            return
        delay = backoff(item.attempts, retry_after, self._rng.random)
        log.info(
            "outbox.retry",
            id=item.id,
            kind=item.kind,
            attempts=item.attempts,
            delay=round(delay, 2),
        )
        await self.store.retry_outbox(item, self.claimer, error, now + timedelta(seconds=delay))

    def _view(
        self,
        item: OutboxItem,
        stored: StoredElicitation | None,
        timeline: Timeline | None = None,
        escalation: deadlines.Escalation | None = None,
    ) -> PromptView:
        """The view a copy renders; ``escalation`` on an escalation copy (mentions, originals)."""
        if stored is None:
            raise PermanentDeliveryError(f"elicitation {item.elicitation_key} is gone")
        return prompt_view(
            stored,
            timeline,
            link=self.link_for(item.elicitation_key),
            now=self.clock.now(),
            escalation=escalation,
        )

    def _chat(self, destination: str) -> ChatAdapter:
        chat = self.chats.get(platform_of(destination))
        if chat is None:
            raise PermanentDeliveryError(f"{platform_of(destination)} is not configured")
        return chat

    async def _execute(
        self,
        item: OutboxItem,
        stored: StoredElicitation | None,
        timeline: Timeline | None = None,
    ) -> MessageRef | None:
        """Carry out one row; returns the message ref of a post."""
        key = f"elicitbot-{item.id}"
        payload = item.payload or {}
        if item.kind is EffectKind.POST:
            escalation = None
            if payload.get("purpose") == Purpose.ESCALATION:
                delivery = await self.store.delivery(item.delivery_id or -1)
                escalation = (
                    delivery.escalation
                    if delivery is not None and delivery.escalation is not None
                    else deadlines.Escalation(mentions=())
                )
            return await self._chat(item.target).post(
                item.target,
                self._view(item, stored, timeline, escalation),
                idempotency_key=key,
                uncertain=item.attempts > 1,
            )
        if item.kind is EffectKind.UPDATE:
            delivery = await self.store.delivery(item.delivery_id or -1)
            if delivery is None or delivery.ref is None:
                raise PermanentDeliveryError("no posted message to update")
            escalation = None
            if delivery.purpose is Purpose.ESCALATION:
                escalation = delivery.escalation or deadlines.Escalation(mentions=())
            view = self._view(item, stored, timeline, escalation)
            await self._chat(item.target).update(
                item.target, delivery.ref, view, idempotency_key=key
            )
            return None
        if item.kind is EffectKind.NOTIFY:
            notice = notice_of(payload)
            if notice.kind is NoticeKind.REMINDER and (
                stored is None or stored.status is not Status.PENDING
            ):
                # Answered (or closed) after the reminder fired but before it went out: drop it.
                log.info("reminder.dropped", id=item.id, key=item.elicitation_key)
                return None
            await self._chat(item.target).notify(item.target, notice, idempotency_key=key)
            return None
        if item.kind is EffectKind.WRITEBACK:
            view = self._view(item, stored)
            sink = self.sinks.get(view.elicitation.source)
            if sink is not None:
                await sink.deliver(view, idempotency_key=writeback_key(item.elicitation_key))
            return None
        raise PermanentDeliveryError(f"unknown outbox kind {item.kind!r}")


def notice_of(payload: Mapping[str, Any]) -> Notice:
    """The typed notice a ``notify`` row's payload describes (a reminder, a note)."""
    raw_kind = payload.get("kind")
    kind = NoticeKind(raw_kind) if raw_kind in set(NoticeKind) else NoticeKind.NOTE
    thread = payload.get("thread")
    return Notice(
        user=str(payload.get("user", "")),
        text=str(payload.get("text", "")),
        thread=ref_from_json(thread) if isinstance(thread, Mapping) else None,
        kind=kind,
        mentions=tuple(str(m) for m in payload.get("mentions") or ()),
        mention=bool(payload.get("mention", True)),
        reply_to=payload.get("reply_to") if isinstance(payload.get("reply_to"), str) else None,
    )


def writeback_key(elicitation_key: str) -> str:
    """Stable per answer: an elicitation is closed once, so its key names its one outcome."""
    return f"elicitbot:{elicitation_key}:closed"

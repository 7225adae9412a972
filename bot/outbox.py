"""The dispatcher: claims outbox rows and carries them out (:mod:`bot.effects`). Transient failures
retry with capped exponential backoff (or the peer's ``Retry-After``); permanent ones are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta

import structlog
from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry

from bot.domain import lanes
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Destination, ElicitationKey
from bot.domain.ports import AnswerSink, ChatAdapter, Clock
from bot.domain.records import EffectKind, OutboxItem, StoredElicitation, Timeline
from bot.domain.refs import MessageRef
from bot.domain.store import Store
from bot.effects import RENDERED, Effects, PolicyOf, Stale, notice_of, writeback_key
from bot.lease import owner_id
from bot.streak import Streak

log = structlog.get_logger("elicitbot.outbox")

MAX_ATTEMPTS = 25
MAX_BACKOFF_SECONDS = lanes.PROBE_CEILING_SECONDS


def backoff(attempts: int, retry_after: float | None, jitter: Callable[[], float]) -> float:
    """Seconds to wait: the peer's Retry-After if given, else 2^n capped at the probe ceiling
    (one try per lane at a time: :mod:`bot.domain.lanes`); plus jitter."""
    if retry_after is not None:
        return retry_after + jitter()
    return min(MAX_BACKOFF_SECONDS, 2.0 ** min(attempts, 12)) * (0.5 + jitter() / 2)


BLOCKED_LOOK_SECONDS = 0.25
"""How soon to look again when due rows wait for room another replica holds in their lane."""


class _Reads:
    """What the rows claimed together render, read once for all of them on first use."""

    def __init__(self, store: Store, items: list[OutboxItem]) -> None:
        self.store = store
        self.items = items
        self._got: (
            asyncio.Future[
                tuple[dict[ElicitationKey, StoredElicitation], dict[ElicitationKey, Timeline]]
            ]
            | None
        )
        self._got = None

    async def get(
        self,
    ) -> tuple[dict[ElicitationKey, StoredElicitation], dict[ElicitationKey, Timeline]]:
        if self._got is None:
            self._got = asyncio.ensure_future(self._read())
        return await asyncio.shield(self._got)

    async def _read(
        self,
    ) -> tuple[dict[ElicitationKey, StoredElicitation], dict[ElicitationKey, Timeline]]:
        keys = [i.elicitation_key for i in self.items]
        rendering = [i.elicitation_key for i in self.items if i.kind in RENDERED]
        stored = await self.store.get_many(keys)
        timelines = await self.store.timelines(rendering) if rendering else {}
        return stored, timelines


class Dispatcher:
    """Claims due rows lane by lane and carries each out as its own task, completing it the
    moment it is done; claims are renewed by a heartbeat while their effects run."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        chats: Mapping[str, ChatAdapter],
        sinks: Mapping[str, AnswerSink],
        link_for: Callable[[str], str],
        *,
        claimer: str | None = None,
        concurrency: int = 16,
        lease: timedelta = lanes.CLAIM_LEASE,
        heartbeat: timedelta = lanes.HEARTBEAT,
        registry: CollectorRegistry | None = None,
        wake: asyncio.Event | None = None,
        policy: PolicyOf | None = None,
    ) -> None:
        """``wake``: the event that says new rows are due (set by whoever writes them; the
        dispatcher's own when not given, set through :meth:`wake`)."""
        self.store = store
        self.clock = clock
        self.chats = chats
        self.sinks = sinks
        self.effects = Effects(store, clock, chats, sinks, link_for, policy)
        self.claimer = claimer or owner_id()
        self.chained = tuple(
            lanes.chained_prefix(platform)
            for platform, chat in chats.items()
            if chat.post_interval <= 0
        )
        """The lanes whose posts are claimed as a chain (platforms that set no pace)."""
        self.concurrency = concurrency
        self.lease = lease
        self.heartbeat = heartbeat
        self._wake = wake if wake is not None else asyncio.Event()
        self._inflight: set[asyncio.Task[None]] = set()
        self._rng = random.Random()  # noqa: S311 - jitter, not security
        self._claims = Streak(log, "outbox.claim_failed")
        self._looks = Streak(log, "outbox.next_failed")
        self.refused = Counter(
            "elicitbot_writebacks_refused_total",
            "Answers (and timeout outcomes) an upstream system refused for good, by source and "
            "by what followed: reopened for another answer, or failed (closed there too)",
            ["source", "outcome"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    def wake(self) -> None:
        self._wake.set()

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def run_once(self) -> int:
        """Claim what is due now and carry it all out; returns how many rows were handled."""
        units = await self._claim(self.concurrency)
        if units:
            await asyncio.gather(*(self._carry(unit, batch) for unit, batch in units))
        return sum(len(unit) for unit, _ in units)

    async def drain(self, *, rounds: int = 1000) -> int:
        """``run_once`` until nothing is due now (tests, and ``serve --once``-like use)."""
        total = 0
        for _ in range(rounds):
            handled = await self.run_once()
            if not handled:
                break
            total += handled
        return total

    async def run(self, stop: asyncio.Event, *, idle_seconds: float = 1.0) -> None:
        """Loop until ``stop`` is set: claim into free slots, woken by ``wake()`` (new rows), by
        an effect finishing (its lane has room again) or by the next due time."""
        beat = asyncio.create_task(self._beat(stop))
        try:
            while not stop.is_set():
                self._wake.clear()  # before the claim: a wake() during it is not lost
                room = self.concurrency - len(self._inflight)
                claimed: list[tuple[list[OutboxItem], _Reads]] = []
                if room > 0:
                    try:
                        claimed = await self._claim(room)
                        self._claims.ok()
                    except Exception:
                        self._claims.failed()
                for unit, batch in claimed:
                    task = asyncio.create_task(self._carry(unit, batch))
                    self._inflight.add(task)
                    task.add_done_callback(self._finished)
                if claimed or stop.is_set():
                    continue
                timeout = await self._idle(idle_seconds)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
        finally:
            beat.cancel()
            await self._settle()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:  # _carry catches; belt and braces
            log.error("outbox.task_failed", error=str(task.exception()))

    async def _settle(self, grace: float = 5.0) -> None:
        """At stop: let running effects finish for ``grace`` seconds, then give back what we
        still hold so a restart (or another replica) takes it at once, as uncertain."""
        if self._inflight:
            _, pending = await asyncio.wait(set(self._inflight), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.store.release_claims(self.claimer)

    async def _beat(self, stop: asyncio.Event) -> None:
        """Renew our claims while effects run, so only a dead owner's claims run out."""
        while not stop.is_set():
            await asyncio.sleep(self.heartbeat.total_seconds())
            if not self._inflight:
                continue
            try:
                await self.store.renew_claims(self.claimer, self.clock.now() + self.lease)
            except Exception:
                log.exception("outbox.heartbeat_failed")

    async def _claim(self, room: int) -> list[tuple[list[OutboxItem], _Reads]]:
        """What is due, as units to carry: each row alone, but an unpaced lane's posts claimed
        together as one chain, carried in order."""
        # A chain is one unit (one task): room for a whole chain beside the other units, so a
        # burst to a room goes out as one chain, not cut at the dispatcher's concurrency. With
        # many lanes due at once this may start up to POST_CHAIN - 1 units over concurrency.
        limit = room + lanes.POST_CHAIN - 1 if self.chained else room
        items = await self.store.claim_outbox(
            self.clock.now(), self.claimer, limit=limit, lease=self.lease, chained=self.chained
        )
        if not items:
            return []
        batch = _Reads(self.store, items)
        chains: dict[str, list[OutboxItem]] = {}
        units: list[list[OutboxItem]] = []
        for item in items:  # in id order: a lane's posts in the order they came
            if item.kind is EffectKind.POST and item.lane.startswith(self.chained):
                if item.lane not in chains:
                    chains[item.lane] = []
                    units.append(chains[item.lane])
                chains[item.lane].append(item)
            else:
                units.append([item])
        for lane, chain in chains.items():
            log.debug("outbox.chain", lane=lane, size=len(chain))
        return [(unit, batch) for unit in units]

    async def _idle(self, idle_seconds: float) -> float:
        """How long to sleep: until the next row is due, at most ``idle_seconds``. Rows that
        are due but were not claimed wait for room in their lane: a finishing effect of ours
        wakes us; another replica's, the next look a quarter of a second on."""
        try:
            nxt = await self.store.next_outbox_at()
            self._looks.ok()
        except Exception:
            self._looks.failed()
            return idle_seconds
        if nxt is None:
            return idle_seconds
        wait = (nxt - self.clock.now()).total_seconds()
        if wait <= 0:
            return idle_seconds if self._inflight else min(idle_seconds, BLOCKED_LOOK_SECONDS)
        return max(0.01, min(idle_seconds, wait))

    async def _carry(self, unit: list[OutboxItem], batch: _Reads) -> None:
        """A unit start to finish: each row read, carried out and completed; a chain's rows all
        at once, started in the order they came, each completed as soon as it is done."""

        async def one(item: OutboxItem) -> None:
            try:
                stored, timelines = await batch.get()
                outcome = await self._guarded(item, stored, timelines)
            except Exception:
                log.exception("outbox.carry_failed", id=item.id, kind=item.kind)
                return  # its claim runs out and it is taken again (as uncertain)
            if outcome is not None:
                # The platform took it (its answer came back): the benchmarks' per-post trace.
                log.debug("outbox.sent", key=item.elicitation_key, kind=item.kind.value)
                await self._complete(item, *outcome)

        if len(unit) == 1:
            await one(unit[0])
        else:
            await asyncio.gather(*(one(item) for item in unit))

    async def _complete(self, item: OutboxItem, done: OutboxItem, ref: MessageRef | None) -> None:
        try:
            seed = item.kind is EffectKind.POST and self.effects.seeds(Destination(item.target))
            await self.store.complete_outbox(
                done, self.claimer, self.clock.now(), ref=ref, seed=seed
            )
        except Exception:
            # The claim runs out and the row is taken again (as uncertain): nothing is lost.
            log.exception("outbox.complete_failed", id=item.id, kind=item.kind)

    async def _guarded(
        self,
        item: OutboxItem,
        stored: Mapping[ElicitationKey, StoredElicitation],
        timelines: Mapping[ElicitationKey, Timeline] | None = None,
    ) -> tuple[OutboxItem, MessageRef | None] | None:
        """Carry out one row: (item, ref) when it succeeded, None when it is retried or failed."""
        current = stored.get(item.elicitation_key)
        timeline = (timelines or {}).get(item.elicitation_key)
        try:
            ref = await self.effects.execute(item, current, timeline)
            # A post shows the version it rendered: completing compares it with the store's.
            return replace(item, version=current.version if current else item.version), ref
        except Stale as stale:
            # Fired, queued, then answered before its turn: dropped (audited), never sent.
            log.info("outbox.dropped", id=item.id, key=item.elicitation_key, what=str(stale))
            await self.store.drop_outbox(item, self.claimer, str(stale), self.clock.now())
        except TransientDeliveryError as exc:
            await self._retry(item, str(exc), exc.retry_after)
        except PermanentDeliveryError as exc:
            log.warning(
                "outbox.failed", id=item.id, kind=item.kind, target=item.target, error=str(exc)
            )
            if item.kind is EffectKind.WRITEBACK:
                # Refused upstream: reopened (or marked failed), copies and the person told.
                settled = await self.store.refuse_writeback(
                    item, self.claimer, str(exc), self.clock.now(), reopen=exc.reopen
                )
                if settled is not None:
                    source = item.elicitation_key.split(":", 1)[0]
                    outcome = "reopened" if settled.reopened else "failed"
                    self.refused.labels(source=source, outcome=outcome).inc()
            else:
                await self.store.fail_outbox(item, self.claimer, str(exc), self.clock.now())
        except Exception as exc:  # the one broad boundary: record it on the row, keep going
            log.exception("outbox.error", id=item.id, kind=item.kind, target=item.target)
            await self._retry(item, f"{type(exc).__name__}: {exc}", None)
        return None

    async def _retry(self, item: OutboxItem, error: str, retry_after: float | None) -> None:
        now = self.clock.now()
        first = item.first_attempt_at or now
        if item.attempts >= MAX_ATTEMPTS and now - first >= lanes.GIVE_UP_AFTER:
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
        # A write-back that did not go through at once: the copies now say "Sending…".
        slow = item.kind is EffectKind.WRITEBACK and item.attempts == 1
        await self.store.retry_outbox(
            item,
            self.claimer,
            error,
            now + timedelta(seconds=delay),
            refresh_at=now if slow else None,
        )
        if item.kind is EffectKind.WRITEBACK:  # the sink is down: probe it, one at a time
            await self.store.set_pace(lanes.down_key(item.lane), now + timedelta(seconds=delay))
            await self.store.hold_sink(item.lane, now)  # the others' copies say "Sending…"


__all__ = ["MAX_ATTEMPTS", "Dispatcher", "backoff", "notice_of", "writeback_key"]

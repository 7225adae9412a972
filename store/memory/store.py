"""The in-memory store: the store port kept in this process's memory, for tests and for a bot
that needs no durability.

Every method is one transaction: it holds the store's one lock, never awaits inside it, and
undoes what it wrote if it fails, so a batch is all or nothing and every conditional write (the
first answer, a fenced completion, a claim) sees the state the previous one left.

(Over 500 lines on purpose: it is the one class implementing the whole store port, in the same
order as ``store/sql``'s modules; its decisions already live in ``decisions.py`` and its writes in
``writer.py``, so what is left here is one short method per port call.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from bot.domain import lanes, planning
from bot.domain.deadlines import Claim, FireContext, Firing
from bot.domain.model import Answer, Status
from bot.domain.ports import IntakeOutcome
from bot.domain.records import (
    AuditEntry,
    ChatRoute,
    DeadlineState,
    DeadlineView,
    DeliveryState,
    DeliveryView,
    DueDeadline,
    EffectKind,
    EffectState,
    EffectView,
    FiredDeadline,
    IntakeItem,
    LaneView,
    OutboxItem,
    RecordResult,
    StoredElicitation,
    Timeline,
    Writeback,
)
from bot.domain.refs import MessageRef
from bot.domain.store import Store
from bot.domain.writes import WriteSet
from store.memory import decisions, reads
from store.memory.crypto import MemoryCrypto
from store.memory.leases import MemoryLeases
from store.memory.raw import MemoryRaw
from store.memory.tables import Tables, Tx, utc
from store.memory.writer import Writer

T = TypeVar("T")
ERROR_LIMIT = 2000
"""Longest error text kept on an outbox row or a delivery."""


class MemoryStore(MemoryLeases, MemoryRaw, MemoryCrypto):
    """The store port in memory: one lock, one transaction per call, nothing kept on disk."""

    single_process = True

    def __init__(self) -> None:
        self._tables = Tables()
        self._lock = asyncio.Lock()
        self._watchers: list[Callable[[datetime], None]] = []
        self._pace: dict[str, datetime] = {}

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None

    # -- transactions ----------------------------------------------------------------------

    async def _write(self, work: Callable[[Writer], T]) -> T:
        async with self._lock:
            tx = Tx(self._tables)
            try:
                writer = Writer(tx)
                result = work(writer)
                writer.finish()
            except BaseException:
                tx.rollback()
                raise
        if tx.planned:
            earliest = min(tx.planned)
            for watcher in list(self._watchers):
                watcher(earliest)
        return result

    async def _read(self, work: Callable[[Tables], T]) -> T:
        async with self._lock:
            return work(self._tables)

    def watch_deadlines(self, watcher: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``watcher(earliest due time)`` after a write of ours plans deadlines."""
        self._watchers.append(watcher)

        def unwatch() -> None:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

        return unwatch

    # -- intake and answers ----------------------------------------------------------------

    async def intake(self, items: Sequence[IntakeItem], now: datetime) -> list[IntakeOutcome]:
        """Store a batch: all of it, or (on error) none of it."""
        return await self._write(lambda w: [decisions.intake(w, item, now) for item in items])

    async def first_time(self, channel: str, inbound_id: str, now: datetime) -> bool:
        def work(w: Writer) -> bool:
            if (channel, inbound_id) in w.t.inbound:
                return False
            w.tx.put(w.t.inbound, (channel, inbound_id), None)
            return True

        return await self._write(work)

    async def record_answer(
        self, key: str, answer: Answer, now: datetime, *, approving: bool, audit: dict[str, Any]
    ) -> RecordResult:
        """First valid answer wins: a conditional write; the loser learns the current state."""

        def work(w: Writer) -> RecordResult:
            row = w.t.elicitations[key]
            open_ = row.status is Status.PENDING and (
                row.expires_at is None or row.expires_at > now
            )
            if approving and row.subject_expires_at is not None:
                open_ = open_ and row.subject_expires_at > now
            if not open_:
                return RecordResult(False, row.status, row.answer)
            w.tx.elicitation(
                key,
                status=Status.ANSWERED,
                answer=answer,
                version=row.version + 1,
                updated_at=utc(now),
                closed_at=utc(now),
            )
            w.tx.put(w.t.answers, key, answer)
            w.close(key, now)
            w.audit(key, now, "answer", answer.respondent, None, audit)
            return RecordResult(True, Status.ANSWERED, answer)

        return await self._write(work)

    async def close_elicitation(
        self,
        key: str,
        status: Status,
        now: datetime,
        *,
        answer: Answer | None,
        audit: dict[str, object],
    ) -> bool:
        writes = planning.close_writes(status, answer, audit)
        return await self._write(lambda w: bool(w.apply(key, writes, now).closed))

    async def record_refusal(
        self,
        key: str,
        actor: str,
        code: str,
        now: datetime,
        detail: dict[str, object],
    ) -> None:
        await self._write(lambda w: w.audit(key, now, "refusal", actor, code, detail))

    async def claim(
        self, key: str, by: str, name: str | None, until: datetime, now: datetime
    ) -> bool:
        """Record "I'm on it" on a pending elicitation; a ``claim_lapse`` deadline updates every
        copy again when it runs out. False when it is no longer pending."""

        def work(w: Writer) -> bool:
            if not reads.is_pending(w.t, key):
                return False
            w.tx.elicitation(key, claim=Claim(by, utc(until), name))
            w.bump(key, now)
            w.apply(key, planning.claim_writes(by, until), now)
            return True

        return await self._write(work)

    # -- outbox ----------------------------------------------------------------------------

    async def claim_outbox(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 20,
        lease: timedelta = lanes.CLAIM_LEASE,
        chained: Sequence[str] = (),
    ) -> list[OutboxItem]:
        """Claim due rows lane by lane, as the SQL store does (see its docstring)."""

        def due(o: EffectView) -> bool:
            if o.state is EffectState.PENDING:
                if o.next_attempt_at > now:
                    return False
                paced = self._pace.get(lanes.pace_key(o.lane))
                return not (o.kind is EffectKind.POST and paced is not None and paced > now)
            return (
                o.state is EffectState.CLAIMED
                and o.claimed_until is not None
                and o.claimed_until < now
            )

        def work(w: Writer) -> list[OutboxItem]:
            live: Counter[str] = Counter()
            live_kind: Counter[tuple[str, EffectKind]] = Counter()
            by_lane: dict[str, list[EffectView]] = {}
            for o in w.t.outbox.values():
                if o.state is EffectState.CLAIMED and not due(o):
                    live[o.lane] += 1
                    live_kind[o.lane, o.kind] += 1
                elif due(o):
                    by_lane.setdefault(o.lane, []).append(o)
            ranked: list[tuple[int, datetime, int, EffectView]] = []
            for lane, rows in by_lane.items():
                rows.sort(key=lambda o: (lanes.rank_of(o.kind), o.next_attempt_at, o.id))
                posting = any(o.kind is EffectKind.POST for o in rows)
                chain = lane.startswith(tuple(chained)) if chained else False
                seen: Counter[EffectKind] = Counter()
                r = 0
                for o in rows:
                    if posting and lanes.waits_for_posts(o.kind):
                        break  # messages first: the rest waits for the lane's posts
                    seen[o.kind] += 1
                    cap = lanes.kind_cap(o.kind, chained=chain)
                    if cap is not None and seen[o.kind] + live_kind[lane, o.kind] > cap:
                        continue  # held back by its kind's bound: takes no place in the lane
                    r += 1
                    post = o.kind is EffectKind.POST
                    if r + live[lane] > lanes.lane_slots(lane, chained=chain and post):
                        break
                    ranked.append((r, o.next_attempt_at, o.id, o))
            chosen = [o for *_, o in sorted(ranked, key=lambda t: t[:3])[: max(limit, 0)]]
            items: list[OutboxItem] = []
            for row in sorted(chosen, key=lambda o: o.id):
                o = w.tx.effect(
                    row.id,
                    state=EffectState.CLAIMED,
                    claimed_by=claimer,
                    claimed_until=utc(now + lease),
                    attempts=row.attempts + 1,
                    first_attempt_at=row.first_attempt_at or utc(now),
                )
                if o.kind is EffectKind.POST and o.delivery_id is not None:
                    d = w.t.deliveries.get(o.delivery_id)
                    if d is not None and d.state is DeliveryState.PLANNED:
                        w.tx.delivery(d.id, state=DeliveryState.POSTING)
                e = w.t.elicitations.get(o.elicitation_key)
                items.append(
                    OutboxItem(
                        id=o.id,
                        elicitation_key=o.elicitation_key,
                        kind=o.kind,
                        target=o.target,
                        delivery_id=o.delivery_id,
                        payload=reads.copied(o.payload),
                        attempts=o.attempts,
                        version=None if e is None else e.version,
                        lane=o.lane,
                        first_attempt_at=o.first_attempt_at,
                    )
                )
            return items

        return await self._write(work)

    async def renew_claims(self, claimer: str, until: datetime) -> int:
        def work(w: Writer) -> int:
            held = [
                o.id
                for o in w.t.outbox.values()
                if o.state is EffectState.CLAIMED and o.claimed_by == claimer
            ]
            for row_id in held:
                w.tx.effect(row_id, claimed_until=utc(until))
            return len(held)

        return await self._write(work)

    async def set_pace(self, key: str, not_before: datetime) -> None:
        current = self._pace.get(key)
        if current is None or current < not_before:
            self._pace[key] = utc(not_before)

    async def lanes(self) -> list[LaneView]:
        def work(t: Tables) -> list[LaneView]:
            found: dict[str, list[EffectView]] = {}
            for o in t.outbox.values():
                if o.state in (EffectState.PENDING, EffectState.CLAIMED):
                    found.setdefault(o.lane, []).append(o)
            return [
                LaneView(
                    lane,
                    sum(o.state is EffectState.PENDING for o in rows),
                    sum(o.state is EffectState.CLAIMED for o in rows),
                    min(o.created_at for o in rows),
                )
                for lane, rows in sorted(found.items())
            ]

        return await self._read(work)

    async def complete_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        now: datetime,
        *,
        ref: MessageRef | None = None,
        seed: bool = False,
    ) -> bool:
        """Done (fenced on our claim). A post also records its platform message ref."""
        return (await self.complete_many([(item, ref)], claimer, now, seed=seed))[0]

    async def complete_many(
        self,
        done: Sequence[tuple[OutboxItem, MessageRef | None]],
        claimer: str,
        now: datetime,
        *,
        seed: bool = False,
    ) -> list[bool]:
        """Several completions in one transaction; each is fenced on our claim."""
        if not done:
            return []
        return await self._write(
            lambda w: [
                decisions.complete(w, item, ref, claimer, now, seed=seed) for item, ref in done
            ]
        )

    async def retry_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        error: str,
        at: datetime,
        *,
        refresh_at: datetime | None = None,
    ) -> None:
        def work(w: Writer) -> None:
            if _ours(w, item.id, claimer):
                w.tx.effect(
                    item.id,
                    state=EffectState.PENDING,
                    claimed_by=None,
                    claimed_until=None,
                    next_attempt_at=utc(at),
                    last_error=error[:ERROR_LIMIT],
                )
                if refresh_at is not None and item.elicitation_key in w.t.elicitations:
                    w.apply(item.elicitation_key, WriteSet(refresh=True), refresh_at)

        await self._write(work)

    async def fail_outbox(self, item: OutboxItem, claimer: str, error: str, now: datetime) -> bool:
        """Record a permanent failure, fenced on our claim (a lost lease changes nothing)."""

        def work(w: Writer) -> bool:
            if not _ours(w, item.id, claimer):
                return False
            w.tx.effect(
                item.id, state=EffectState.FAILED, done_at=utc(now), last_error=error[:ERROR_LIMIT]
            )
            if item.kind is EffectKind.WRITEBACK:  # given up on: not known to have landed
                decisions.writeback_done(w, item, now, error=error, reopen=False, gave_up=True)
                return True
            posting = item.kind is EffectKind.POST and item.delivery_id is not None
            if posting and item.delivery_id in w.t.deliveries:
                w.tx.delivery(
                    item.delivery_id, state=DeliveryState.FAILED, error=error[:ERROR_LIMIT]
                )
            w.audit(
                item.elicitation_key,
                now,
                f"{item.kind}_failed",
                None,
                None,
                {"target": item.target, "error": error[:500]},
            )
            if posting and item.delivery_id is not None:
                decisions.fall_back(w, item.elicitation_key, item.delivery_id, now)
            return True

        return await self._write(work)

    async def refuse_writeback(
        self, item: OutboxItem, claimer: str, error: str, now: datetime, *, reopen: bool
    ) -> Writeback | None:
        """The upstream refused a write-back for good: the row fails and the elicitation reopens
        (or is marked failed), in one write; returns what was settled."""

        def work(w: Writer) -> Writeback | None:
            if not _ours(w, item.id, claimer):
                return None
            w.tx.effect(
                item.id, state=EffectState.FAILED, done_at=utc(now), last_error=error[:ERROR_LIMIT]
            )
            return decisions.writeback_done(w, item, now, error=error, reopen=reopen)

        return await self._write(work)

    async def release_claims(self, claimer: str | None = None) -> int:
        def work(w: Writer) -> int:
            held = [
                o
                for o in w.t.outbox.values()
                if o.state is EffectState.CLAIMED and claimer in (None, o.claimed_by)
            ]
            for o in held:
                w.tx.effect(o.id, state=EffectState.PENDING, claimed_by=None, claimed_until=None)
            return len(held)

        return await self._write(work)

    async def next_outbox_at(self) -> datetime | None:
        def work(t: Tables) -> datetime | None:
            due: list[datetime] = []
            for o in t.outbox.values():
                if o.state is not EffectState.PENDING:
                    continue
                paced = self._pace.get(lanes.pace_key(o.lane))
                post = o.kind is EffectKind.POST and paced is not None
                due.append(max(o.next_attempt_at, paced) if post and paced else o.next_attempt_at)
            return min(due, default=None)

        return await self._read(work)

    # -- deadlines -------------------------------------------------------------------------

    async def claim_deadlines(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 50,
        lease: timedelta = timedelta(seconds=30),
    ) -> list[DueDeadline]:
        def work(w: Writer) -> list[DueDeadline]:
            due = sorted(
                (
                    d
                    for d in w.t.deadlines.values()
                    if d.state is DeadlineState.PENDING
                    and d.due_at <= now
                    and (d.claimed_until is None or d.claimed_until < now)
                ),
                key=lambda d: (d.due_at, d.id),
            )[: max(limit, 0)]
            for d in due:
                w.tx.deadline(d.id, claimed_by=claimer, claimed_until=utc(now + lease))
            return [DueDeadline(d.id, d.elicitation_key, d.kind, d.due_at) for d in due]

        return await self._write(work)

    async def fire_deadlines(
        self,
        due: Sequence[DueDeadline],
        claimer: str,
        now: datetime,
        decide: Callable[[FireContext], Firing],
    ) -> list[FiredDeadline]:
        """Fire claimed deadlines in one transaction: each is marked fired (fenced on our claim
        and on it still pending) and what ``decide`` says, on the state as it stands, written."""
        if not due:
            return []
        return await self._write(lambda w: decisions.fire(w, due, claimer, now, decide))

    async def mark_fired(self, deadline_id: int, claimer: str, now: datetime) -> bool:
        def work(w: Writer) -> bool:
            d = w.t.deadlines.get(deadline_id)
            if d is None or d.claimed_by != claimer or d.state is not DeadlineState.PENDING:
                return False
            w.tx.deadline(deadline_id, state=DeadlineState.FIRED, fired_at=utc(now))
            return True

        return await self._write(work)

    async def next_deadline_at(self, now: datetime) -> datetime | None:
        """When the next deadline nobody holds is due (None: no pending deadline is free)."""

        def work(t: Tables) -> datetime | None:
            free = [
                d.due_at
                for d in t.deadlines.values()
                if d.state is DeadlineState.PENDING
                and (d.claimed_until is None or d.claimed_until < now)
            ]
            return min(free, default=None)

        return await self._read(work)

    async def release_deadline_claims(self, claimer: str | None = None) -> int:
        def work(w: Writer) -> int:
            held = [
                d
                for d in w.t.deadlines.values()
                if d.state is DeadlineState.PENDING
                and d.claimed_by is not None
                and claimer in (None, d.claimed_by)
            ]
            for d in held:
                w.tx.deadline(d.id, claimed_by=None, claimed_until=None)
            return len(held)

        return await self._write(work)

    # -- reads -----------------------------------------------------------------------------

    async def get(self, key: str) -> StoredElicitation | None:
        def work(t: Tables) -> StoredElicitation | None:
            row = t.elicitations.get(key)
            return None if row is None else reads.stored(row)

        return await self._read(work)

    async def get_many(self, keys: Sequence[str]) -> dict[str, StoredElicitation]:
        def work(t: Tables) -> dict[str, StoredElicitation]:
            rows = {k: t.elicitations.get(k) for k in keys}
            return {k: reads.stored(r) for k, r in rows.items() if r is not None}

        return await self._read(work)

    async def resolve_key(self, ident: str) -> str | None:
        return await self._read(lambda t: reads.resolve_key(t, ident))

    async def key_for_message(self, ref_key: str) -> str | None:
        return await self._read(lambda t: reads.key_for_message(t, ref_key))

    async def list_elicitations(
        self, *, status: str | None = None, after: str | None = None, limit: int = 50
    ) -> list[StoredElicitation]:
        return await self._read(lambda t: reads.list_elicitations(t, status, after, limit))

    async def deliveries(self, key: str) -> list[DeliveryView]:
        return await self._read(lambda t: t.deliveries_for(key))

    async def delivery(self, delivery_id: int) -> DeliveryView | None:
        return await self._read(lambda t: t.deliveries.get(delivery_id))

    async def deadlines(self, key: str) -> list[DeadlineView]:
        return await self._read(lambda t: reads.deadlines(t, key))

    async def audit(self, key: str) -> list[AuditEntry]:
        return await self._read(lambda t: reads.audit(t, key))

    async def outbox(self, key: str | None = None) -> list[EffectView]:
        return await self._read(lambda t: reads.outbox(t, key))

    async def count(self, table: str) -> int:
        return await self._read(lambda t: reads.count(t, table))

    async def timelines(self, keys: Sequence[str]) -> dict[str, Timeline]:
        return await self._read(lambda t: reads.timelines(t, keys))

    # -- chat routes and small values ------------------------------------------------------

    async def add_chat_route(
        self, workspace: str, board: str | None, destination: str, by: str, now: datetime
    ) -> bool:
        def work(w: Writer) -> bool:
            if any(
                (r.workspace, r.board, r.destination) == (workspace, board, destination)
                for r in w.t.routes.values()
            ):
                return False
            route_id = w.tx.next_id("chat_route")
            w.tx.put(
                w.t.routes,
                route_id,
                ChatRoute(route_id, workspace, board, destination, by, utc(now)),
            )
            return True

        return await self._write(work)

    async def remove_chat_route(self, workspace: str, board: str | None, destination: str) -> int:
        def work(w: Writer) -> int:
            gone = [
                r.id
                for r in w.t.routes.values()
                if (r.workspace, r.board, r.destination) == (workspace, board, destination)
            ]
            for route_id in gone:
                w.tx.drop(w.t.routes, route_id)
            return len(gone)

        return await self._write(work)

    async def chat_routes(self) -> list[ChatRoute]:
        return await self._read(lambda t: [t.routes[i] for i in sorted(t.routes)])

    async def get_value(self, key: str) -> str | None:
        return await self._read(lambda t: t.values.get(key))

    async def set_value(self, key: str, value: str) -> None:
        await self._write(lambda w: w.tx.put(w.t.values, key, value))


def _ours(w: Writer, row_id: int, claimer: str) -> bool:
    o = w.t.outbox.get(row_id)
    return o is not None and o.state is EffectState.CLAIMED and o.claimed_by == claimer


if TYPE_CHECKING:
    _: Store = MemoryStore()  # the port, checked by the type checker

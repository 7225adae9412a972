"""The SQL store: intake, first-answer-wins, outbox and deadline claims, reads.

Exactly-once by construction:
- intake dedupe: ``INSERT … ON CONFLICT DO NOTHING`` on the inbound id and on the elicitation key;
- the first answer: one conditional ``UPDATE … WHERE status='pending'`` checked through
  ``RETURNING`` (psycopg's async rowcount is -1 for these), plus a
  unique ``answer`` row in the same transaction;
- claims of outbox rows and due deadlines: ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED)
  RETURNING`` on PostgreSQL; the same statement without the locking clause on SQLite, whose writers
  are serialised (every transaction starts with ``BEGIN IMMEDIATE``);
- a deadline's effects (outbox rows, new deliveries, a close) are written in the transaction that
  marks it fired, fenced on the claim: a lost lease or a close in between writes nothing.

Lock order on PostgreSQL: an elicitation row before its deadline, delivery and outbox rows, in every
transaction that writes more than one of them (answers, revisions, closes, claims, firing).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Table, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from bot.domain import deadlines as dl
from bot.domain.deadlines import Claim, Copy, FireContext, Firing, Timer
from bot.domain.model import Answer, Elicitation, Route, Status
from bot.domain.planning import Plan, PlannedDeadline
from bot.domain.ports import IntakeOutcome
from store.db import READ_ONLY, make_engine
from store.tables import (
    AnswerRow,
    AuditRow,
    DeadlineRow,
    DeliveryRow,
    ElicitationRow,
    InboundRow,
    KeyValueRow,
    OutboxRow,
    RouteRow,
)

E: Table = ElicitationRow.__table__  # type: ignore[attr-defined]
INBOUND: Table = InboundRow.__table__  # type: ignore[attr-defined]
DELIVERY: Table = DeliveryRow.__table__  # type: ignore[attr-defined]
DEADLINE: Table = DeadlineRow.__table__  # type: ignore[attr-defined]
ANSWER: Table = AnswerRow.__table__  # type: ignore[attr-defined]
AUDIT: Table = AuditRow.__table__  # type: ignore[attr-defined]
OUTBOX: Table = OutboxRow.__table__  # type: ignore[attr-defined]
ROUTE: Table = RouteRow.__table__  # type: ignore[attr-defined]
KV: Table = KeyValueRow.__table__  # type: ignore[attr-defined]

T = TypeVar("T")
WEB = "web"
NEW_DELIVERY = insert(DELIVERY).returning(DELIVERY.c.id)
NEW_OUTBOX = insert(OUTBOX)
NEW_AUDIT = insert(AUDIT)
COMPLETE_OUTBOX = (
    update(OUTBOX)
    .where(
        OUTBOX.c.id == bindparam("row_id"),
        OUTBOX.c.state == "claimed",
        OUTBOX.c.claimed_by == bindparam("claimer"),
    )
    .values(state="done", done_at=bindparam("at"), last_error=None)
    .returning(OUTBOX.c.id)
)
MARK_POSTED = (
    update(DELIVERY)
    .where(DELIVERY.c.id == bindparam("delivery_id"))
    .values(
        state="posted",
        ref=bindparam("new_ref"),
        ref_key=bindparam("new_ref_key"),
        posted_at=bindparam("at"),
        error=None,
    )
)
CURRENT_STATE = select(E.c.version, E.c.status, E.c.route).where(E.c.key == bindparam("ekey"))
GROUP_COMMIT_MAX = 64
"""Most inbound batches written in one transaction."""


@dataclass(frozen=True)
class IntakeItem:
    """One accepted inbound elicitation, ready to store."""

    channel: str
    """Dedupe namespace of the inbound id, e.g. ``ce:<cloudevents source>``."""
    inbound_id: str
    elicitation: Elicitation
    route: Route
    plan: Plan
    display_hash: str
    audit: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _PendingIntake:
    items: list[IntakeItem]
    now: datetime
    future: asyncio.Future[list[IntakeOutcome]]


@dataclass(frozen=True)
class StoredElicitation:
    elicitation: Elicitation
    status: Status
    answer: Answer | None
    version: int
    route: Route
    created_at: datetime
    updated_at: datetime
    claim: Claim | None = None
    """The last "I'm on it" (it may have lapsed: ``claim.active(now)``)."""


@dataclass(frozen=True)
class Timeline:
    """What a message's schedule is built from: every copy and the pending deadlines."""

    copies: tuple[Copy, ...] = ()
    timers: tuple[Timer, ...] = ()


@dataclass(frozen=True)
class FiredDeadline:
    """What firing one claimed deadline did."""

    id: int
    elicitation_key: str
    kind: str
    due_at: datetime
    outcome: str
    """``fired`` (acted), ``deferred`` (held by a claim: a new row at the claim's lapse takes its
    place), ``idle`` (nothing left to do: closed earlier in the batch, or moved by a revision) or
    ``lost`` (not ours to fire any more: another claimer took it after our lease ran out, or an
    answer, expiry, cancellation or revision removed it)."""


@dataclass
class _FireBatch:
    """Rows written together at the end of a firing transaction."""

    outbox: list[dict[str, Any]] = field(default_factory=list)
    audit: list[dict[str, Any]] = field(default_factory=list)
    refresh: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class RecordResult:
    won: bool
    status: Status
    answer: Answer | None


@dataclass(frozen=True)
class OutboxItem:
    id: int
    elicitation_key: str
    kind: str
    target: str
    delivery_id: int | None
    payload: dict[str, Any] | None
    attempts: int
    version: int | None = None
    """The elicitation's version when the row was claimed (what a post renders)."""


@dataclass(frozen=True)
class DueDeadline:
    id: int
    elicitation_key: str
    kind: str
    due_at: datetime


class SqlStore:
    """SQLite (WAL, one writer at a time) or PostgreSQL, chosen by URL."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._reader = engine.execution_options(**{READ_ONLY: True})
        # SQLite has one writer: queue our own writers here instead of in its busy handler,
        # which sleeps. Other processes still meet busy_timeout.
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        # Statements built once: parameters are bound at execute time (no per-call compiling).
        self._new_inbound = self._insert_ignore(INBOUND, "channel", "inbound_id").returning(
            INBOUND.c.inbound_id
        )
        self._new_elicitation = self._insert_ignore(E, "key").returning(E.c.key)
        self._new_deadline = self._insert_ignore(DEADLINE, "elicitation_key", "kind", "due_at")
        self._new_copy = self._insert_ignore(
            DELIVERY, "elicitation_key", "destination", "purpose"
        ).returning(DELIVERY.c.id)
        self._pending: list[_PendingIntake] = []
        self._drainer: asyncio.Task[None] | None = None
        # Due times planned by committed (or failed: a spare wake-up is harmless) transactions,
        # appended on worker threads and handed to the watchers on the event loop.
        self._planned: deque[datetime] = deque()
        self._watchers: list[Callable[[datetime], None]] = []

    @classmethod
    def from_url(cls, url: str) -> SqlStore:
        return cls(make_engine(url))

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)

    async def ping(self) -> None:
        def work(conn: Connection) -> None:
            conn.execute(select(1))

        await self._run(work, write=False)

    # -- helpers ---------------------------------------------------------------------------------

    async def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work`` in one transaction on a worker thread: one thread hop per transaction.

        On SQLite, writers in this process queue on a lock here rather than in SQLite's busy
        handler (which sleeps); other processes still meet busy_timeout.
        """
        if write and self._write_lock is not None:
            async with self._write_lock:
                result = await asyncio.to_thread(self._transaction, work, write)
        else:
            result = await asyncio.to_thread(self._transaction, work, write)
        if self._planned:
            self._tell_watchers()
        return result

    def watch_deadlines(self, watcher: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``watcher(earliest due time)`` after a write of ours plans deadlines (a scheduler
        re-arms its wake-up). Returns the function that stops watching."""
        self._watchers.append(watcher)

        def unwatch() -> None:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

        return unwatch

    def _tell_watchers(self) -> None:
        times: list[datetime] = []
        while self._planned:
            times.append(self._planned.popleft())
        if times:
            earliest = min(times)
            for watcher in list(self._watchers):
                watcher(earliest)

    def _transaction(self, work: Callable[[Connection], T], write: bool) -> T:
        engine = self.engine if write else self._reader
        with engine.begin() as conn:
            return work(conn)

    def _insert_ignore(self, table: Table, *index: str) -> Any:
        dialect_insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        return dialect_insert(table).on_conflict_do_nothing(index_elements=list(index))

    def _locked(self, query: Any) -> Any:
        return query.with_for_update(skip_locked=True) if self.dialect == "postgresql" else query

    # -- intake ----------------------------------------------------------------------------------

    async def intake(self, items: Sequence[IntakeItem], now: datetime) -> list[IntakeOutcome]:
        """Store a batch: all of it, or (on error) none of it.

        Group commit: batches that arrive while a commit is running are written together in the
        next transaction (one commit for many requests). If that shared transaction fails, each
        batch is retried in its own, so one bad batch never fails another.
        """
        pending = _PendingIntake(list(items), now, asyncio.get_running_loop().create_future())
        self._pending.append(pending)
        if self._drainer is None or self._drainer.done():
            # A task of its own: a caller that goes away mid-commit must not strand the others.
            self._drainer = asyncio.create_task(self._drain_intake())
        return await pending.future

    async def _drain_intake(self) -> None:
        while self._pending:
            group = self._pending[:GROUP_COMMIT_MAX]
            del self._pending[:GROUP_COMMIT_MAX]
            await self._flush(group)

    async def _flush(self, group: list[_PendingIntake]) -> None:
        def work(conn: Connection) -> list[list[IntakeOutcome]]:
            return [[self._intake_one(conn, item, p.now) for item in p.items] for p in group]

        try:
            results = await self._run(work, write=True)
        except Exception as exc:
            if len(group) == 1:
                if not group[0].future.done():
                    group[0].future.set_exception(exc)
                return
            for p in group:
                await self._flush([p])
            return
        for p, outcomes in zip(group, results, strict=True):
            if not p.future.done():
                p.future.set_result(outcomes)

    def _intake_one(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        e = item.elicitation
        key = e.key
        seen = conn.execute(
            self._new_inbound,
            {
                "channel": item.channel,
                "inbound_id": item.inbound_id,
                "elicitation_key": key,
                "received_at": now,
            },
        )
        if seen.first() is None:
            # Seen before: name the elicitation it was first stored as (the id may be reused).
            first = conn.execute(
                select(INBOUND.c.elicitation_key).where(
                    INBOUND.c.channel == item.channel, INBOUND.c.inbound_id == item.inbound_id
                )
            ).scalar()
            return IntakeOutcome(str(first) if first else key, "duplicate")
        created = conn.execute(
            self._new_elicitation,
            {
                "key": key,
                "source": e.source,
                "source_id": e.source_id,
                "workspace": e.workspace,
                "board_id": e.context.board_id,
                "status": Status.PENDING.value,
                "version": 1,
                "display_hash": item.display_hash,
                "payload": e.model_dump(mode="json", by_alias=True),
                "route": item.route.model_dump(mode="json"),
                "expires_at": e.deadlines.expires_at,
                "subject_expires_at": e.subject.expires_at if e.subject else None,
                "created_at": now,
                "updated_at": now,
                "answer": None,
                "closed_at": None,
            },
        )
        if created.first() is not None:
            self._audit(conn, key, now, "intake", None, None, item.audit)
            if dl.expired_at_intake(e, now):
                self._expire_at_intake(conn, item, now)
            else:
                self._plan_new(conn, key, item.plan, now, item)
            return IntakeOutcome(key, "accepted")
        return self._revise(conn, item, now)

    def _expire_at_intake(self, conn: Connection, item: IntakeItem, now: datetime) -> None:
        """Past its expiry on arrival: closed at once, in this transaction. No copy is posted (no
        buttons, ever), no deadline is planned; the source is told once (one writeback row)."""
        e = item.elicitation
        for planned in item.plan.deliveries:
            conn.execute(
                NEW_DELIVERY,
                {
                    "elicitation_key": e.key,
                    "destination": planned.destination,
                    "position": planned.position,
                    "purpose": dl.PRIMARY,
                    "state": "skipped",
                    "ref": None,
                    "posted_at": None,
                    "created_at": now,
                },
            )
        closing = dl.timeout_closing(e, now)
        self._close_as(
            conn, e.key, closing.status, now, closing.answer, {"reason": "expired at intake"}
        )

    def _plan_new(
        self, conn: Connection, key: str, plan: Plan, now: datetime, item: IntakeItem | None = None
    ) -> None:
        accepted: list[int] = []
        for planned in plan.deliveries:
            # The web inbox reads this store: its copy exists the moment the row commits.
            inbox = planned.post_now and planned.destination == WEB
            state = "posted" if inbox else "planned" if planned.post_now else "waiting"
            delivery_id = conn.execute(
                NEW_DELIVERY,
                {
                    "elicitation_key": key,
                    "destination": planned.destination,
                    "position": planned.position,
                    "purpose": "primary",
                    "state": state,
                    "ref": {"inbox": key} if inbox else None,
                    "posted_at": now if inbox else None,
                    "created_at": now,
                },
            ).scalar_one()
            if planned.post_now and not inbox:
                self._enqueue(conn, key, "post", planned.destination, now, delivery_id=delivery_id)
            elif inbox:
                accepted.append(delivery_id)
        extra = dl.subject_deadlines(item.elicitation) if item is not None else ()
        self._add_deadlines(conn, key, (*plan.deadlines, *extra))
        if item is not None and item.route.followup_seconds:
            for delivery_id in accepted:  # an inbox copy is accepted at once: its follow-up runs
                self._plan_followup(conn, key, delivery_id, now, item.route)

    def _add_deadlines(
        self,
        conn: Connection,
        key: str,
        deadlines: Sequence[PlannedDeadline],
        detail: dict[str, Any] | None = None,
    ) -> None:
        for d in deadlines:
            conn.execute(
                self._new_deadline,
                {
                    "elicitation_key": key,
                    "kind": d.kind,
                    "due_at": d.due_at,
                    "state": "pending",
                    "detail": detail,
                },
            )
            self._planned.append(d.due_at)

    def _revise(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        """The same elicitation pushed again: update what people see, if it changed and is open."""
        e = item.elicitation
        changed = conn.execute(
            update(E)
            .where(
                E.c.key == e.key,
                E.c.status == Status.PENDING.value,
                E.c.display_hash != item.display_hash,
            )
            .values(
                payload=e.model_dump(mode="json", by_alias=True),
                display_hash=item.display_hash,
                version=E.c.version + 1,
                expires_at=e.deadlines.expires_at,
                subject_expires_at=e.subject.expires_at if e.subject else None,
                updated_at=now,
            )
            .returning(E.c.key)
        )
        if changed.first() is None:
            return IntakeOutcome(e.key, "unchanged")
        conn.execute(
            DEADLINE.delete().where(
                DEADLINE.c.elicitation_key == e.key,
                DEADLINE.c.state == "pending",
                DEADLINE.c.kind.in_(dl.PLANNED_AT_INTAKE),
            )
        )
        self._add_deadlines(conn, e.key, (*item.plan.deadlines, *dl.subject_deadlines(e)))
        self._update_every_copy(conn, e.key, now)
        self._audit(conn, e.key, now, "revised", None, None, item.audit)
        if dl.expired_at_intake(e, now):  # revised to an expiry already past: closed at once
            closing = dl.timeout_closing(e, now)
            self._close_as(
                conn, e.key, closing.status, now, closing.answer, {"reason": "expired at revision"}
            )
        return IntakeOutcome(e.key, "updated")

    # -- answers ---------------------------------------------------------------------------------

    async def record_answer(
        self, key: str, answer: Answer, now: datetime, *, approving: bool, audit: dict[str, Any]
    ) -> RecordResult:
        """First valid answer wins: one conditional UPDATE; the loser learns the current state."""
        conditions = [
            E.c.key == key,
            E.c.status == Status.PENDING.value,
            or_(E.c.expires_at.is_(None), E.c.expires_at > now),
        ]
        if approving:
            conditions.append(or_(E.c.subject_expires_at.is_(None), E.c.subject_expires_at > now))
        body = answer.model_dump(mode="json")

        def work(conn: Connection) -> Any:
            won = conn.execute(
                update(E)
                .where(*conditions)
                .values(
                    status=Status.ANSWERED.value,
                    answer=body,
                    version=E.c.version + 1,
                    updated_at=now,
                    closed_at=now,
                )
                .returning(E.c.key)
            )
            if won.first() is None:
                current = (conn.execute(select(E.c.status, E.c.answer).where(E.c.key == key))).one()
                return RecordResult(
                    False,
                    Status(current.status),
                    Answer.model_validate(current.answer) if current.answer else None,
                )
            conn.execute(
                insert(ANSWER).values(
                    elicitation_key=key,
                    respondent=answer.respondent,
                    via=answer.via,
                    at=now,
                    body=body,
                )
            )
            self._close(conn, key, now)
            self._enqueue(conn, key, "writeback", "source", now)
            self._audit(conn, key, now, "answer", answer.respondent, None, audit)
            return RecordResult(True, Status.ANSWERED, answer)

        result: RecordResult = await self._run(work, write=True)
        return result

    async def close_elicitation(
        self,
        key: str,
        status: Status,
        now: datetime,
        *,
        answer: Answer | None,
        audit: dict[str, Any],
    ) -> bool:
        """Expire or cancel a pending elicitation (a system decision may come with an answer)."""

        def work(conn: Connection) -> bool:
            return self._close_as(conn, key, status, now, answer, audit)

        return bool(await self._run(work, write=True))

    def _close_as(
        self,
        conn: Connection,
        key: str,
        status: Status,
        now: datetime,
        answer: Answer | None,
        audit: dict[str, Any],
    ) -> bool:
        """Close a pending elicitation: cancel its deadlines, update every copy, tell the source."""
        done = conn.execute(
            update(E)
            .where(E.c.key == key, E.c.status == Status.PENDING.value)
            .values(
                status=status.value,
                answer=answer.model_dump(mode="json") if answer else None,
                version=E.c.version + 1,
                updated_at=now,
                closed_at=now,
            )
            .returning(E.c.key)
        )
        if done.first() is None:
            return False
        self._close(conn, key, now)
        self._enqueue(conn, key, "writeback", "source", now)
        self._audit(conn, key, now, status.value, "system", None, audit)
        return True

    def _close(self, conn: Connection, key: str, now: datetime) -> None:
        conn.execute(
            update(DEADLINE)
            .where(DEADLINE.c.elicitation_key == key, DEADLINE.c.state == "pending")
            .values(state="cancelled")
        )
        conn.execute(
            update(DELIVERY)
            .where(DELIVERY.c.elicitation_key == key, DELIVERY.c.state == "waiting")
            .values(state="skipped")
        )
        self._update_every_copy(conn, key, now)

    def _update_every_copy(self, conn: Connection, key: str, now: datetime) -> None:
        """One pending ``update`` per live delivery (coalesced: an unclaimed one already covers it).

        A delivery still being posted needs none: its post renders the state current at post time.
        """
        posted = (
            conn.execute(
                select(DELIVERY.c.id, DELIVERY.c.destination).where(
                    DELIVERY.c.elicitation_key == key, DELIVERY.c.state == "posted"
                )
            )
        ).all()
        for delivery_id, destination in posted:
            if destination != WEB:  # the inbox renders the stored state: nothing to rewrite
                self._update_copy(conn, key, delivery_id, destination, now)

    def _update_copy(
        self, conn: Connection, key: str, delivery_id: int, destination: str, now: datetime
    ) -> None:
        """Enqueue an update of one copy unless an unclaimed one is already waiting."""
        pending = conn.execute(
            select(OUTBOX.c.id).where(
                OUTBOX.c.delivery_id == delivery_id,
                OUTBOX.c.kind == "update",
                OUTBOX.c.state == "pending",
            )
        )
        if pending.first() is None:
            self._enqueue(conn, key, "update", destination, now, delivery_id=delivery_id)

    async def record_refusal(
        self,
        key: str,
        actor: str,
        code: str,
        now: datetime,
        detail: dict[str, Any],
        notify: dict[str, Any] | None,
    ) -> None:
        """An audit row for a refused attempt and, when given, a private notice to the person."""

        def work(conn: Connection) -> Any:
            self._audit(conn, key, now, "refusal", actor, code, detail)
            if notify is not None:
                self._enqueue(conn, key, "notify", notify["destination"], now, payload=notify)

        return await self._run(work, write=True)

    def _audit(
        self,
        conn: Connection,
        key: str,
        now: datetime,
        action: str,
        actor: str | None,
        code: str | None,
        detail: dict[str, Any] | None,
    ) -> None:
        conn.execute(
            NEW_AUDIT,
            {
                "elicitation_key": key,
                "at": now,
                "action": action,
                "actor": actor,
                "code": code,
                "detail": detail or None,
            },
        )

    # -- outbox ----------------------------------------------------------------------------------

    def _enqueue(
        self,
        conn: Connection,
        key: str,
        kind: str,
        target: str,
        now: datetime,
        *,
        delivery_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        conn.execute(
            NEW_OUTBOX,
            _outbox_row(key, kind, target, now, delivery_id=delivery_id, payload=payload),
        )

    async def claim_outbox(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 20,
        lease: timedelta = timedelta(seconds=60),
    ) -> list[OutboxItem]:
        """Claim due rows (pending, or claimed by someone whose lease ran out)."""
        due = self._locked(
            select(OUTBOX.c.id)
            .where(
                or_(
                    and_(OUTBOX.c.state == "pending", OUTBOX.c.next_attempt_at <= now),
                    and_(OUTBOX.c.state == "claimed", OUTBOX.c.claimed_until < now),
                )
            )
            .order_by(OUTBOX.c.next_attempt_at, OUTBOX.c.id)
            .limit(limit)
        )

        def work(conn: Connection) -> Any:
            rows = (
                conn.execute(
                    update(OUTBOX)
                    .where(OUTBOX.c.id.in_(due.scalar_subquery()))
                    .values(
                        state="claimed",
                        claimed_by=claimer,
                        claimed_until=now + lease,
                        attempts=OUTBOX.c.attempts + 1,
                    )
                    .returning(
                        OUTBOX.c.id,
                        OUTBOX.c.elicitation_key,
                        OUTBOX.c.kind,
                        OUTBOX.c.target,
                        OUTBOX.c.delivery_id,
                        OUTBOX.c.payload,
                        OUTBOX.c.attempts,
                    )
                )
            ).all()
            posting = [
                r.delivery_id for r in rows if r.kind == "post" and r.delivery_id is not None
            ]
            if posting:
                conn.execute(
                    update(DELIVERY)
                    .where(DELIVERY.c.id.in_(posting), DELIVERY.c.state == "planned")
                    .values(state="posting")
                )
            keys = sorted({r.elicitation_key for r in rows})
            versions = dict(
                conn.execute(select(E.c.key, E.c.version).where(E.c.key.in_(keys))).all()
            )
            return sorted(
                (
                    OutboxItem(
                        id=r.id,
                        elicitation_key=r.elicitation_key,
                        kind=r.kind,
                        target=r.target,
                        delivery_id=r.delivery_id,
                        payload=r.payload,
                        attempts=r.attempts,
                        version=versions.get(r.elicitation_key),
                    )
                    for r in rows
                ),
                key=lambda i: i.id,
            )

        items: list[OutboxItem] = await self._run(work, write=True)
        return items

    async def release_claims(self, claimer: str | None = None) -> int:
        """Give claimed rows back (at start with SQLite: the one process that held them is gone)."""

        def work(conn: Connection) -> Any:
            query = update(OUTBOX).where(OUTBOX.c.state == "claimed")
            if claimer is not None:
                query = query.where(OUTBOX.c.claimed_by == claimer)
            result = conn.execute(
                query.values(state="pending", claimed_by=None, claimed_until=None).returning(
                    OUTBOX.c.id
                )
            )
            return len(result.all())

        return await self._run(work, write=True)

    async def complete_outbox(
        self, item: OutboxItem, claimer: str, now: datetime, *, ref: dict[str, Any] | None = None
    ) -> bool:
        """Done (fenced on our claim). A post also records its platform message ref."""
        return (await self.complete_many([(item, ref)], claimer, now))[0]

    async def complete_many(
        self, done: Sequence[tuple[OutboxItem, dict[str, Any] | None]], claimer: str, now: datetime
    ) -> list[bool]:
        """Several completions in one transaction; each is fenced on our claim."""

        def work(conn: Connection) -> list[bool]:
            return [self._complete(conn, item, ref, claimer, now) for item, ref in done]

        if not done:
            return []
        results: list[bool] = await self._run(work, write=True)
        return results

    def _complete(
        self,
        conn: Connection,
        item: OutboxItem,
        ref: dict[str, Any] | None,
        claimer: str,
        now: datetime,
    ) -> bool:
        finished = conn.execute(
            COMPLETE_OUTBOX, {"row_id": item.id, "claimer": claimer, "at": now}
        ).first()
        if finished is None:
            return False
        if item.kind == "post" and item.delivery_id is not None:
            conn.execute(
                MARK_POSTED,
                {
                    "delivery_id": item.delivery_id,
                    "new_ref": ref,
                    "new_ref_key": str(ref["key"]) if ref and ref.get("key") else None,
                    "at": now,
                },
            )
            current = conn.execute(CURRENT_STATE, {"ekey": item.elicitation_key}).first()
            if current is None:
                return True
            if current.version != item.version:
                # Answered or revised while it was being posted: bring this copy up to date.
                self._update_copy(conn, item.elicitation_key, item.delivery_id, item.target, now)
            if current.status == Status.PENDING.value and (current.route or {}).get(
                "followup_seconds"
            ):
                route = Route.model_validate(current.route)
                self._plan_followup(conn, item.elicitation_key, item.delivery_id, now, route)
        return True

    def _plan_followup(
        self, conn: Connection, key: str, delivery_id: int, now: datetime, route: Route
    ) -> None:
        """The platform accepted this copy: unanswered ``followup_seconds`` from now, the next
        destination gets it (the last destination, and escalation copies, have none)."""
        copies = self._copies(conn, [key]).get(key, ())
        accepted = next((c for c in copies if c.id == delivery_id), None)
        if accepted is None:
            return
        due = dl.followup_due(route, accepted, copies, now)
        if due is not None:
            self._add_deadlines(
                conn, key, [PlannedDeadline(dl.FOLLOWUP, due)], {"after": delivery_id}
            )

    def _activate(self, conn: Connection, key: str, copy: Copy, now: datetime) -> bool:
        """A waiting destination's turn: post it (the web inbox has it at once). Fenced on the
        delivery still waiting: a close in between has skipped it."""
        inbox = copy.destination == WEB
        done = conn.execute(
            update(DELIVERY)
            .where(DELIVERY.c.id == copy.id, DELIVERY.c.state == "waiting")
            .values(
                state="posted" if inbox else "planned",
                ref={"inbox": key} if inbox else None,
                posted_at=now if inbox else None,
            )
            .returning(DELIVERY.c.id)
        ).first()
        if done is None:
            return False
        if inbox:
            route = conn.execute(select(E.c.route).where(E.c.key == key)).scalar()
            self._plan_followup(conn, key, copy.id, now, Route.model_validate(route))
        else:
            self._enqueue(conn, key, "post", copy.destination, now, delivery_id=copy.id)
        return True

    def _copies(self, conn: Connection, keys: Iterable[str]) -> dict[str, tuple[Copy, ...]]:
        wanted = sorted(set(keys))
        if not wanted:
            return {}
        found: dict[str, list[Copy]] = defaultdict(list)
        rows = conn.execute(
            select(
                DELIVERY.c.id,
                DELIVERY.c.elicitation_key,
                DELIVERY.c.destination,
                DELIVERY.c.position,
                DELIVERY.c.purpose,
                DELIVERY.c.state,
                DELIVERY.c.ref,
            )
            .where(DELIVERY.c.elicitation_key.in_(wanted))
            .order_by(DELIVERY.c.id)
        )
        for r in rows:
            found[r.elicitation_key].append(
                Copy(r.id, r.destination, r.position, r.purpose, r.state, r.ref)
            )
        return {key: tuple(copies) for key, copies in found.items()}

    async def retry_outbox(self, item: OutboxItem, claimer: str, error: str, at: datetime) -> None:
        def work(conn: Connection) -> Any:
            conn.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.id == item.id,
                    OUTBOX.c.claimed_by == claimer,
                    OUTBOX.c.state == "claimed",
                )
                .values(
                    state="pending",
                    claimed_by=None,
                    claimed_until=None,
                    next_attempt_at=at,
                    last_error=error[:2000],
                )
            )

        return await self._run(work, write=True)

    async def fail_outbox(self, item: OutboxItem, claimer: str, error: str, now: datetime) -> bool:
        """Record a permanent failure, fenced on our claim (a lost lease changes nothing)."""

        def work(conn: Connection) -> bool:
            failed = conn.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.id == item.id,
                    OUTBOX.c.claimed_by == claimer,
                    OUTBOX.c.state == "claimed",
                )
                .values(state="failed", done_at=now, last_error=error[:2000])
                .returning(OUTBOX.c.id)
            ).first()
            if failed is None:
                return False
            if item.kind == "post" and item.delivery_id is not None:
                conn.execute(
                    update(DELIVERY)
                    .where(DELIVERY.c.id == item.delivery_id)
                    .values(state="failed", error=error[:2000])
                )
            self._audit(
                conn,
                item.elicitation_key,
                now,
                f"{item.kind}_failed",
                None,
                None,
                {"target": item.target, "error": error[:500]},
            )
            if item.kind == "post" and item.delivery_id is not None:
                self._fall_back(conn, item.elicitation_key, item.delivery_id, now)
            return True

        return bool(await self._run(work, write=True))

    def _fall_back(self, conn: Connection, key: str, failed_id: int, now: datetime) -> None:
        """A primary copy failed for good: the next waiting destination gets it now."""
        copies = self._copies(conn, [key]).get(key, ())
        failed = next((c for c in copies if c.id == failed_id), None)
        if failed is None or failed.purpose != dl.PRIMARY:
            return
        nxt = dl.next_waiting(copies)
        if nxt is not None and self._activate(conn, key, nxt, now):
            self._audit(
                conn,
                key,
                now,
                "fallback",
                None,
                None,
                {"from": failed.destination, "to": nxt.destination},
            )

    async def next_outbox_at(self) -> datetime | None:
        def work(conn: Connection) -> Any:
            value: datetime | None = (
                conn.execute(
                    select(func.min(OUTBOX.c.next_attempt_at)).where(OUTBOX.c.state == "pending")
                )
            ).scalar()
            return value

        return await self._run(work, write=False)

    # -- deadlines -------------------------------------------------------------------------------

    async def claim_deadlines(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 50,
        lease: timedelta = timedelta(seconds=30),
    ) -> list[DueDeadline]:
        due = self._locked(
            select(DEADLINE.c.id)
            .where(
                DEADLINE.c.state == "pending",
                DEADLINE.c.due_at <= now,
                or_(DEADLINE.c.claimed_until.is_(None), DEADLINE.c.claimed_until < now),
            )
            .order_by(DEADLINE.c.due_at)
            .limit(limit)
        )

        def work(conn: Connection) -> Any:
            rows = (
                conn.execute(
                    update(DEADLINE)
                    .where(DEADLINE.c.id.in_(due.scalar_subquery()))
                    .values(claimed_by=claimer, claimed_until=now + lease)
                    .returning(
                        DEADLINE.c.id,
                        DEADLINE.c.elicitation_key,
                        DEADLINE.c.kind,
                        DEADLINE.c.due_at,
                    )
                )
            ).all()
            return sorted((DueDeadline(*r) for r in rows), key=lambda d: (d.due_at, d.id))

        due_rows: list[DueDeadline] = await self._run(work, write=True)
        return due_rows

    async def mark_fired(self, deadline_id: int, claimer: str, now: datetime) -> bool:
        def work(conn: Connection) -> Any:
            result = conn.execute(
                update(DEADLINE)
                .where(
                    DEADLINE.c.id == deadline_id,
                    DEADLINE.c.claimed_by == claimer,
                    DEADLINE.c.state == "pending",
                )
                .values(state="fired", fired_at=now)
                .returning(DEADLINE.c.id)
            )
            return result.first() is not None

        return await self._run(work, write=True)

    async def fire_deadlines(
        self,
        due: Sequence[DueDeadline],
        claimer: str,
        now: datetime,
        decide: Callable[[FireContext], Firing],
    ) -> list[FiredDeadline]:
        """Fire claimed deadlines: in one transaction, mark each fired (fenced on our claim and on
        it still being pending) and write what ``decide`` says it does, decided on the
        elicitation as it stands now. A deadline whose claim we lost, or that an answer, expiry or
        cancellation cancelled meanwhile, writes nothing."""

        def work(conn: Connection) -> list[FiredDeadline]:
            return self._fire(conn, due, claimer, now, decide)

        if not due:
            return []
        fired: list[FiredDeadline] = await self._run(work, write=True)
        return fired

    def _fire(
        self,
        conn: Connection,
        due: Sequence[DueDeadline],
        claimer: str,
        now: datetime,
        decide: Callable[[FireContext], Firing],
    ) -> list[FiredDeadline]:
        keys = sorted({d.elicitation_key for d in due})
        if self.dialect == "postgresql":  # the lock order every writer keeps: elicitation first
            conn.execute(
                select(E.c.key).where(E.c.key.in_(keys)).order_by(E.c.key).with_for_update()
            )
        ours = set(
            conn.execute(
                update(DEADLINE)
                .where(
                    DEADLINE.c.id.in_([d.id for d in due]),
                    DEADLINE.c.claimed_by == claimer,
                    DEADLINE.c.state == "pending",
                )
                .values(state="fired", fired_at=now)
                .returning(DEADLINE.c.id)
            ).scalars()
        )
        results = [FiredDeadline(d.id, d.elicitation_key, d.kind, d.due_at, "lost") for d in due]
        if not ours:
            return results
        live_keys = sorted({d.elicitation_key for d in due if d.id in ours})
        rows = {
            r.key: r
            for r in conn.execute(
                select(
                    E.c.key,
                    E.c.status,
                    E.c.payload,
                    E.c.route,
                    E.c.claim_by,
                    E.c.claim_name,
                    E.c.claim_until,
                ).where(E.c.key.in_(live_keys))
            )
        }
        copies = self._copies(conn, live_keys)
        status = {key: Status(row.status) for key, row in rows.items()}
        parsed: dict[str, tuple[Elicitation, Route]] = {}
        batch = _FireBatch()
        idle: list[int] = []
        for n, d in enumerate(due):
            row = rows.get(d.elicitation_key)
            if d.id not in ours:
                continue
            if row is None or status[d.elicitation_key] is not Status.PENDING:
                idle.append(d.id)
                results[n] = FiredDeadline(d.id, d.elicitation_key, d.kind, d.due_at, "idle")
                continue
            key = d.elicitation_key
            if key not in parsed:
                parsed[key] = (
                    Elicitation.model_validate(row.payload),
                    Route.model_validate(row.route),
                )
            e, route = parsed[key]
            claim = (
                Claim(row.claim_by, row.claim_until, row.claim_name)
                if row.claim_by and row.claim_until
                else None
            )
            firing = decide(
                FireContext(
                    d.kind, d.due_at, now, e, Status.PENDING, route, copies.get(key, ()), claim
                )
            )
            outcome = self._apply(conn, d, firing, now, batch)
            if firing.close is not None and outcome == "fired":
                status[key] = firing.close.status
            if outcome == "idle":
                idle.append(d.id)
            results[n] = FiredDeadline(d.id, key, d.kind, d.due_at, outcome)
        if idle:  # nothing was done: the row says so
            conn.execute(update(DEADLINE).where(DEADLINE.c.id.in_(idle)).values(state="cancelled"))
        self._refresh(
            conn,
            batch.refresh - {k for k, st in status.items() if st is not Status.PENDING},
            copies,
            now,
            batch,
        )
        self._flush_fired(conn, batch)
        return results

    def _flush_fired(self, conn: Connection, batch: _FireBatch) -> None:
        if batch.outbox:
            conn.execute(NEW_OUTBOX, batch.outbox)
            batch.outbox.clear()
        if batch.audit:
            conn.execute(NEW_AUDIT, batch.audit)
            batch.audit.clear()

    def _apply(
        self, conn: Connection, d: DueDeadline, firing: Firing, now: datetime, batch: _FireBatch
    ) -> str:
        """Write one firing's effects; returns its outcome."""
        key = d.elicitation_key
        if firing.audit is not None:
            batch.audit.append(
                {
                    "elicitation_key": key,
                    "at": now,
                    "action": firing.audit,
                    "actor": dl.SYSTEM,
                    "code": None,
                    "detail": {"due_at": d.due_at.isoformat(), **firing.detail},
                }
            )
        if firing.defer_to is not None:
            conn.execute(update(DEADLINE).where(DEADLINE.c.id == d.id).values(state="deferred"))
            self._add_deadlines(
                conn, key, [PlannedDeadline(d.kind, firing.defer_to)], {"deferred": d.id}
            )
            return "deferred"
        if firing.close is not None:
            self._flush_fired(conn, batch)  # what fired before the close is written before it
            closing = firing.close
            done = self._close_as(
                conn, key, closing.status, now, closing.answer, {"deadline": d.kind}
            )
            return "fired" if done else "idle"
        for notice in firing.notices:
            batch.outbox.append(
                _outbox_row(
                    key,
                    "notify",
                    notice.destination,
                    now,
                    delivery_id=notice.delivery_id,
                    payload={
                        "kind": "reminder",
                        "user": "",
                        "thread": dict(notice.thread),
                        "text": notice.text,
                        "mentions": list(notice.mentions),
                    },
                )
            )
        for post in firing.escalations:
            self._escalate(conn, key, post, now, batch)
        if firing.activate is not None:
            self._activate(conn, key, firing.activate, now)
        if firing.refresh:
            batch.refresh.add(key)
        acted = firing.notices or firing.escalations or firing.activate or firing.refresh
        return "fired" if acted else "idle"

    def _escalate(
        self, conn: Connection, key: str, post: dl.EscalationPost, now: datetime, batch: _FireBatch
    ) -> None:
        """A new, answerable copy in an escalation destination (once per destination)."""
        inbox = post.destination == WEB
        detail = {
            "mentions": list(post.escalation.mentions),
            "originals": [
                {"destination": o.destination, "ref": dict(o.ref)}
                for o in post.escalation.originals
            ],
        }
        delivery_id = conn.execute(
            self._new_copy,
            {
                "elicitation_key": key,
                "destination": post.destination,
                "position": post.position,
                "purpose": dl.ESCALATION,
                "state": "posted" if inbox else "planned",
                "ref": {"inbox": key} if inbox else None,
                "posted_at": now if inbox else None,
                "created_at": now,
                "detail": detail,
            },
        ).scalar()
        if delivery_id is not None and not inbox:
            batch.outbox.append(
                _outbox_row(
                    key,
                    "post",
                    post.destination,
                    now,
                    delivery_id=delivery_id,
                    payload={"purpose": dl.ESCALATION},
                )
            )

    def _refresh(
        self,
        conn: Connection,
        keys: set[str],
        copies: dict[str, tuple[Copy, ...]],
        now: datetime,
        batch: _FireBatch,
    ) -> None:
        """What the copies show changed (a step fired): a new version, and one coalesced update
        per posted copy. ``keys`` are pending ones, held by this transaction (locked on
        PostgreSQL, the one writer on SQLite): the update goes by primary key alone."""
        if not keys:
            return
        conn.execute(
            update(E)
            .where(E.c.key.in_(sorted(keys)))
            .values(version=E.c.version + 1, updated_at=now)
        )
        posted = [
            (key, c)
            for key in sorted(keys)
            for c in copies.get(key, ())
            if c.state == "posted" and c.destination != WEB
        ]
        if not posted:
            return
        # By delivery alone (its index), filtered here: a predicate on the state would let the
        # planner walk every pending outbox row instead.
        waiting = {
            r.delivery_id
            for r in conn.execute(
                select(OUTBOX.c.delivery_id, OUTBOX.c.kind, OUTBOX.c.state).where(
                    OUTBOX.c.delivery_id.in_([c.id for _, c in posted])
                )
            )
            if r.kind == "update" and r.state == "pending"
        }
        batch.outbox.extend(
            _outbox_row(key, "update", c.destination, now, delivery_id=c.id)
            for key, c in posted
            if c.id not in waiting
        )

    async def next_deadline_at(self, now: datetime) -> datetime | None:
        """When the next deadline nobody holds is due (None: no pending deadline is free).

        A row held under another claimer's lease is not looked at: its holder fires it, or, if the
        holder died, a sweep takes it once the lease has run out."""

        def work(conn: Connection) -> datetime | None:
            found: datetime | None = conn.execute(
                select(DEADLINE.c.due_at)
                .where(
                    DEADLINE.c.state == "pending",
                    or_(DEADLINE.c.claimed_until.is_(None), DEADLINE.c.claimed_until < now),
                )
                .order_by(DEADLINE.c.due_at)
                .limit(1)
            ).scalar()
            return found

        return await self._run(work, write=False)

    async def release_deadline_claims(self, claimer: str | None = None) -> int:
        """Give claimed, unfired deadlines back (at start with SQLite: their holder is gone)."""

        def work(conn: Connection) -> int:
            query = update(DEADLINE).where(
                DEADLINE.c.state == "pending", DEADLINE.c.claimed_by.is_not(None)
            )
            if claimer is not None:
                query = query.where(DEADLINE.c.claimed_by == claimer)
            released = conn.execute(
                query.values(claimed_by=None, claimed_until=None).returning(DEADLINE.c.id)
            )
            return len(released.all())

        count: int = await self._run(work, write=True)
        return count

    async def claim(
        self, key: str, by: str, name: str | None, until: datetime, now: datetime
    ) -> bool:
        """Record "I'm on it" on a pending elicitation (renewing or taking over a claim): every
        copy is updated, and a ``claim_lapse`` deadline updates them again when it runs out.
        False when it is no longer pending."""

        def work(conn: Connection) -> bool:
            done = conn.execute(
                update(E)
                .where(E.c.key == key, E.c.status == Status.PENDING.value)
                .values(
                    claim_by=by,
                    claim_name=name,
                    claim_until=until,
                    version=E.c.version + 1,
                    updated_at=now,
                )
                .returning(E.c.key)
            ).first()
            if done is None:
                return False
            conn.execute(
                DEADLINE.delete().where(
                    DEADLINE.c.elicitation_key == key,
                    DEADLINE.c.kind == dl.CLAIM_LAPSE,
                    DEADLINE.c.state == "pending",
                )
            )
            self._add_deadlines(conn, key, [PlannedDeadline(dl.CLAIM_LAPSE, until)])
            self._update_every_copy(conn, key, now)
            self._audit(conn, key, now, "claimed", by, None, {"until": until.isoformat()})
            return True

        return bool(await self._run(work, write=True))

    async def timelines(self, keys: Sequence[str]) -> dict[str, Timeline]:
        """Copies and pending deadlines of each elicitation: what its schedule is built from."""

        def work(conn: Connection) -> dict[str, Timeline]:
            wanted = sorted(set(keys))
            copies = self._copies(conn, wanted)
            timers: dict[str, list[Timer]] = defaultdict(list)
            for r in conn.execute(
                select(DEADLINE.c.elicitation_key, DEADLINE.c.kind, DEADLINE.c.due_at)
                .where(DEADLINE.c.elicitation_key.in_(wanted), DEADLINE.c.state == "pending")
                .order_by(DEADLINE.c.due_at, DEADLINE.c.id)
            ):
                timers[r.elicitation_key].append(Timer(r.kind, r.due_at))
            return {
                key: Timeline(copies.get(key, ()), tuple(timers.get(key, ()))) for key in wanted
            }

        if not keys:
            return {}
        found: dict[str, Timeline] = await self._run(work, write=False)
        return found

    # -- reads -----------------------------------------------------------------------------------

    async def resolve_key(self, ident: str) -> str | None:
        """The key for ``<source>:<id>`` or a bare source id (elicitationId, qst_…)."""

        def work(conn: Connection) -> Any:
            hit = (conn.execute(select(E.c.key).where(E.c.key == ident))).scalar()
            if hit is not None:
                return str(hit)
            rows = (conn.execute(select(E.c.key).where(E.c.source_id == ident).limit(2))).all()
            return str(rows[0][0]) if len(rows) == 1 else None

        return await self._run(work, write=False)

    async def get(self, key: str) -> StoredElicitation | None:
        def work(conn: Connection) -> Any:
            row = conn.execute(select(E).where(E.c.key == key)).first()
            return _stored(row) if row is not None else None

        stored: StoredElicitation | None = await self._run(work, write=False)
        return stored

    async def key_for_message(self, ref_key: str) -> str | None:
        """The elicitation whose delivered message has this ref key."""

        def work(conn: Connection) -> str | None:
            found = conn.execute(
                select(DELIVERY.c.elicitation_key).where(DELIVERY.c.ref_key == ref_key).limit(1)
            ).scalar()
            return None if found is None else str(found)

        key: str | None = await self._run(work, write=False)
        return key

    async def first_time(self, channel: str, inbound_id: str, now: datetime) -> bool:
        """Record an inbound event id (Slack event_id, Matrix event_id); False if seen before."""

        def work(conn: Connection) -> bool:
            row = conn.execute(
                self._new_inbound,
                {
                    "channel": channel,
                    "inbound_id": inbound_id,
                    "elicitation_key": None,
                    "received_at": now,
                },
            ).first()
            return row is not None

        return bool(await self._run(work, write=True))

    async def get_many(self, keys: Sequence[str]) -> dict[str, StoredElicitation]:
        def work(conn: Connection) -> dict[str, StoredElicitation]:
            rows = conn.execute(select(E).where(E.c.key.in_(sorted(set(keys))))).all()
            return {row.key: _stored(row) for row in rows}

        if not keys:
            return {}
        found: dict[str, StoredElicitation] = await self._run(work, write=False)
        return found

    async def list_elicitations(
        self, *, status: str | None = None, after: str | None = None, limit: int = 50
    ) -> list[StoredElicitation]:
        """Newest first; ``after`` is the key of the last item of the previous page."""

        def work(conn: Connection) -> list[StoredElicitation]:
            query = select(E)
            if status is not None:
                query = query.where(E.c.status == status)
            if after is not None:
                anchor = conn.execute(select(E.c.created_at).where(E.c.key == after)).scalar()
                if anchor is not None:
                    query = query.where(
                        or_(
                            E.c.created_at < anchor,
                            and_(E.c.created_at == anchor, E.c.key < after),
                        )
                    )
            query = query.order_by(E.c.created_at.desc(), E.c.key.desc()).limit(limit)
            return [_stored(r) for r in conn.execute(query).all()]

        rows: list[StoredElicitation] = await self._run(work, write=False)
        return rows

    async def deliveries(self, key: str) -> list[dict[str, Any]]:
        return await self._rows(
            select(DELIVERY).where(DELIVERY.c.elicitation_key == key).order_by(DELIVERY.c.id)
        )

    async def delivery(self, delivery_id: int) -> dict[str, Any] | None:
        rows = await self._rows(select(DELIVERY).where(DELIVERY.c.id == delivery_id))
        return rows[0] if rows else None

    async def deadlines(self, key: str) -> list[dict[str, Any]]:
        return await self._rows(
            select(DEADLINE)
            .where(DEADLINE.c.elicitation_key == key)
            .order_by(DEADLINE.c.due_at, DEADLINE.c.id)
        )

    async def audit(self, key: str) -> list[dict[str, Any]]:
        return await self._rows(
            select(AUDIT).where(AUDIT.c.elicitation_key == key).order_by(AUDIT.c.id)
        )

    async def outbox(self, key: str | None = None) -> list[dict[str, Any]]:
        query = select(OUTBOX).order_by(OUTBOX.c.id)
        if key is not None:
            query = query.where(OUTBOX.c.elicitation_key == key)
        return await self._rows(query)

    async def count(self, table: str) -> int:
        tables = {
            "elicitation": E,
            "inbound": INBOUND,
            "delivery": DELIVERY,
            "outbox": OUTBOX,
            "answer": ANSWER,
            "audit": AUDIT,
            "deadline": DEADLINE,
        }

        def work(conn: Connection) -> Any:
            return int((conn.execute(select(func.count()).select_from(tables[table]))).scalar_one())

        return await self._run(work, write=False)

    async def _rows(self, query: Any) -> list[dict[str, Any]]:
        def work(conn: Connection) -> Any:
            return [dict(r._mapping) for r in (conn.execute(query)).all()]

        return await self._run(work, write=False)

    # -- chat routes and small values ------------------------------------------------------------

    async def add_chat_route(
        self, workspace: str, board: str | None, destination: str, by: str, now: datetime
    ) -> bool:
        def work(conn: Connection) -> Any:
            exists = conn.execute(
                select(ROUTE.c.id).where(
                    ROUTE.c.workspace == workspace,
                    ROUTE.c.destination == destination,
                    ROUTE.c.board.is_(None) if board is None else ROUTE.c.board == board,
                )
            )
            if exists.first() is not None:
                return False
            conn.execute(
                insert(ROUTE).values(
                    workspace=workspace,
                    board=board,
                    destination=destination,
                    created_by=by,
                    created_at=now,
                )
            )
            return True

        return await self._run(work, write=True)

    async def remove_chat_route(self, workspace: str, board: str | None, destination: str) -> int:
        def work(conn: Connection) -> Any:
            result = conn.execute(
                ROUTE.delete()
                .where(
                    ROUTE.c.workspace == workspace,
                    ROUTE.c.destination == destination,
                    ROUTE.c.board.is_(None) if board is None else ROUTE.c.board == board,
                )
                .returning(ROUTE.c.id)
            )
            return len(result.all())

        return await self._run(work, write=True)

    async def chat_routes(self) -> list[dict[str, Any]]:
        return await self._rows(select(ROUTE).order_by(ROUTE.c.id))

    async def get_value(self, key: str) -> str | None:
        def work(conn: Connection) -> Any:
            value = (conn.execute(select(KV.c.value).where(KV.c.key == key))).scalar()
            return None if value is None else str(value)

        return await self._run(work, write=False)

    async def set_value(self, key: str, value: str) -> None:
        def work(conn: Connection) -> Any:
            changed = conn.execute(
                update(KV).where(KV.c.key == key).values(value=value).returning(KV.c.key)
            )
            if changed.first() is None:
                conn.execute(insert(KV).values(key=key, value=value))

        return await self._run(work, write=True)


def _stored(row: Any) -> StoredElicitation:
    return StoredElicitation(
        elicitation=Elicitation.model_validate(row.payload),
        status=Status(row.status),
        answer=Answer.model_validate(row.answer) if row.answer else None,
        version=row.version,
        route=Route.model_validate(row.route),
        created_at=row.created_at,
        updated_at=row.updated_at,
        claim=Claim(row.claim_by, row.claim_until, row.claim_name)
        if row.claim_by and row.claim_until
        else None,
    )


def _outbox_row(
    key: str,
    kind: str,
    target: str,
    now: datetime,
    *,
    delivery_id: int | None = None,
    payload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "elicitation_key": key,
        "kind": kind,
        "target": target,
        "delivery_id": delivery_id,
        "payload": payload,
        "state": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
    }

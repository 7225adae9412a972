"""The SQL store's base: the engine, one transaction per worker-thread hop, the statements built
once, the deadline watchers, and rows turned into the domain's records."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from bot.domain import lanes, payloads
from bot.domain.deadlines import Claim, Copy
from bot.domain.model import Answer, Elicitation, Route, Status
from bot.domain.payloads import Payload
from bot.domain.records import (
    AuditEntry,
    DeadlineKind,
    DeadlineState,
    DeadlineView,
    DeliveryState,
    DeliveryView,
    EffectKind,
    EffectState,
    EffectView,
    Purpose,
    StoredElicitation,
    Writeback,
)
from bot.domain.refs import ref_from_json
from bot.domain.writes import escalation_from_json
from store.db import READ_ONLY
from store.tables import (
    AnswerRow,
    AuditRow,
    DeadlineRow,
    DeliveryRow,
    ElicitationRow,
    InboundRow,
    KeyValueRow,
    OutboxRow,
    PaceRow,
    RefusalToldRow,
    RouteRow,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

E: Table = ElicitationRow.__table__  # type: ignore[attr-defined]
INBOUND: Table = InboundRow.__table__  # type: ignore[attr-defined]
DELIVERY: Table = DeliveryRow.__table__  # type: ignore[attr-defined]
DEADLINE: Table = DeadlineRow.__table__  # type: ignore[attr-defined]
ANSWER: Table = AnswerRow.__table__  # type: ignore[attr-defined]
AUDIT: Table = AuditRow.__table__  # type: ignore[attr-defined]
OUTBOX: Table = OutboxRow.__table__  # type: ignore[attr-defined]
ROUTE: Table = RouteRow.__table__  # type: ignore[attr-defined]
KV: Table = KeyValueRow.__table__  # type: ignore[attr-defined]
PACE: Table = PaceRow.__table__  # type: ignore[attr-defined]
TOLD: Table = RefusalToldRow.__table__  # type: ignore[attr-defined]

T = TypeVar("T")
R = TypeVar("R", bound="DataclassInstance")
NEW_OUTBOX = insert(OUTBOX)
NEW_AUDIT = insert(AUDIT)
COMPLETE_OUTBOX = (
    update(OUTBOX)
    .where(
        OUTBOX.c.id == bindparam("row_id"),
        OUTBOX.c.state == EffectState.CLAIMED.value,
        OUTBOX.c.claimed_by == bindparam("claimer"),
    )
    .values(state=EffectState.DONE.value, done_at=bindparam("at"), last_error=None)
    .returning(OUTBOX.c.id)
)
MARK_POSTED = (
    update(DELIVERY)
    .where(DELIVERY.c.id == bindparam("delivery_id"))
    .values(
        state=DeliveryState.POSTED.value,
        ref=bindparam("new_ref"),
        ref_key=bindparam("new_ref_key"),
        posted_at=bindparam("at"),
        error=None,
    )
)
CURRENT_STATE = select(E.c.version, E.c.status, E.c.route).where(E.c.key == bindparam("ekey"))
PENDING = Status.PENDING.value
CLAIMED = EffectState.CLAIMED.value


class WriteLock:
    """One writer at a time (SQLite), first come first served, except that an urgent writer
    goes ahead of every ordinary one waiting."""

    def __init__(self) -> None:
        self._held = False
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._ordinary: deque[asyncio.Future[None]] = deque()

    async def acquire(self, *, urgent: bool = False) -> None:
        if not self._held and not self._urgent and not self._ordinary:
            self._held = True
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._urgent if urgent else self._ordinary
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed to us just as we were cancelled: pass it on
            elif waiter in queue:
                queue.remove(waiter)
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter (urgent first), or free it."""
        for queue in (self._urgent, self._ordinary):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # still held: ownership moves to the waiter
                    return
        self._held = False


class SqlBase:
    """SQLite (WAL, one writer at a time) or PostgreSQL, chosen by the engine's URL."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.single_process: bool = self.dialect == "sqlite"
        """One process owns a SQLite file: claims found at start are ours to release."""
        self._reader = engine.execution_options(**{READ_ONLY: True})
        # SQLite has one writer: queue our own writers here instead of in its busy handler,
        # which sleeps. Other processes still meet busy_timeout.
        self._write_lock = WriteLock() if self.dialect == "sqlite" else None
        # Statements built once: parameters are bound at execute time (no per-call compiling).
        self._new_inbound = self._insert_ignore(INBOUND, "channel", "inbound_id").returning(
            INBOUND.c.inbound_id
        )
        self._new_elicitation = self._insert_ignore(E, "key").returning(E.c.key)
        self._new_told = self._insert_ignore(TOLD, "elicitation_key", "actor", "code").returning(
            TOLD.c.actor
        )
        self._new_deadline = self._insert_ignore(DEADLINE, "elicitation_key", "kind", "due_at")
        # Due times planned by committed (or failed: a spare wake-up is harmless) transactions,
        # appended on worker threads and handed to the watchers on the event loop.
        self._planned: deque[datetime] = deque()
        self._watchers: list[Callable[[datetime], None]] = []

    async def close(self) -> None:
        await asyncio.to_thread(self.engine.dispose)

    async def ping(self) -> None:
        await self._execute(select(1), write=False)

    async def _execute(self, statement: Any, *, write: bool = True) -> None:
        """Run one statement in a transaction of its own."""

        def work(conn: Connection) -> None:
            conn.execute(statement)

        await self._run(work, write=write)

    async def _run(
        self, work: Callable[[Connection], T], *, write: bool, urgent: bool = False
    ) -> T:
        """Run ``work`` in one transaction on a worker thread: one thread hop per transaction.

        On SQLite, writers in this process queue on a lock here rather than in SQLite's busy
        handler (which sleeps); other processes still meet busy_timeout. An ``urgent`` writer
        (what an acknowledgement waits for) goes ahead of the queued others.
        """
        if write and self._write_lock is not None:
            await self._write_lock.acquire(urgent=urgent)
            try:
                result = await asyncio.to_thread(self._transaction, work, write)
            finally:
                self._write_lock.release()
        else:
            result = await asyncio.to_thread(self._transaction, work, write)
        if self._planned:
            self._tell_watchers()
        return result

    async def _read_rows(
        self, query: Any, record: Callable[[Any], T], params: Mapping[str, Any] | None = None
    ) -> list[T]:
        """Each row ``query`` reads, as ``record`` makes it, in one read-only transaction."""

        def work(conn: Connection) -> list[T]:
            return [record(r) for r in conn.execute(query, params)]

        return await self._run(work, write=False)

    async def _read_value(self, query: Any, value: Callable[[Any], T]) -> T | None:
        """The first column of the first row ``query`` reads, as ``value`` makes it (none: None)."""

        def work(conn: Connection) -> T | None:
            found = conn.execute(query).scalar()
            return None if found is None else value(found)

        return await self._run(work, write=False)

    def watch_deadlines(self, watcher: Callable[[datetime], None]) -> Callable[[], None]:
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
        return self._dialect_insert(table).on_conflict_do_nothing(index_elements=list(index))

    def _dialect_insert(self, table: Table) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_update`` / ``_do_nothing``."""
        dialect_insert = postgresql.insert if self.dialect == "postgresql" else sqlite.insert
        return dialect_insert(table)

    def _locked(self, query: Any) -> Any:
        return query.with_for_update(skip_locked=True) if self.dialect == "postgresql" else query

    def _copies(self, conn: Connection, keys: Iterable[str]) -> dict[str, tuple[Copy, ...]]:
        """Every copy of these elicitations, in the order they were made."""
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
                Copy(
                    r.id,
                    r.destination,
                    r.position,
                    Purpose(r.purpose),
                    DeliveryState(r.state),
                    ref_from_json(r.ref),
                )
            )
        return {key: tuple(copies) for key, copies in found.items()}


def outbox_row(
    key: str,
    kind: EffectKind,
    target: str,
    now: datetime,
    *,
    delivery_id: int | None = None,
    payload: Payload | None = None,
) -> dict[str, Any]:
    return {
        "elicitation_key": key,
        "kind": kind.value,
        "target": target,
        "lane": lanes.lane_of(key, kind, target),
        "delivery_id": delivery_id,
        "payload": payloads.to_json(kind, payload),
        "state": EffectState.PENDING.value,
        "attempts": 0,
        "next_attempt_at": now,
        "created_at": now,
    }


def audit_row(
    key: str,
    now: datetime,
    action: str,
    actor: str | None,
    code: str | None,
    detail: Mapping[str, Any] | None,
) -> dict[str, Any]:
    return {
        "elicitation_key": key,
        "at": now,
        "action": action,
        "actor": actor,
        "code": code,
        "detail": dict(detail) if detail else None,
    }


# -- rows into records ----------------------------------------------------------------------------


def stored_of(row: Any) -> StoredElicitation:
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
        writeback=Writeback.from_json(row.writeback),
    )


def delivery_of(row: Any) -> DeliveryView:
    purpose = Purpose(row.purpose)
    return DeliveryView(
        id=row.id,
        elicitation_key=row.elicitation_key,
        destination=row.destination,
        position=row.position,
        purpose=purpose,
        state=DeliveryState(row.state),
        ref=ref_from_json(row.ref),
        posted_at=row.posted_at,
        created_at=row.created_at,
        error=row.error,
        escalation=escalation_from_json(row.detail) if purpose is Purpose.ESCALATION else None,
    )


def record_of(cls: type[R], row: Any, **converted: Any) -> R:
    """A record whose every field is the row's column of that name (``converted`` aside)."""
    columns = row._mapping
    named = {f.name: columns[f.name] for f in fields(cls) if f.name not in converted}
    return cls(**named, **converted)


def deadline_of(row: Any) -> DeadlineView:
    kind, state = DeadlineKind(row.kind), DeadlineState(row.state)
    return record_of(DeadlineView, row, kind=kind, state=state)


def audit_of(row: Any) -> AuditEntry:
    return record_of(AuditEntry, row)


def effect_of(row: Any) -> EffectView:
    return record_of(EffectView, row, kind=EffectKind(row.kind), state=EffectState(row.state))


# -- the sequences every use case repeats --------------------------------------------------------


def changed(conn: Connection, statement: Any) -> bool:
    """Run a fenced ``UPDATE … RETURNING``: True when it matched a row (the fence held)."""
    return conn.execute(statement).first() is not None


def open_changed(conn: Connection, key: str, now: datetime, *fence: Any, **values: Any) -> bool:
    """Change a still-pending elicitation (and whatever else ``fence`` asks) as a new version;
    False: it closed, or the fence did not hold, and nothing was written."""
    statement = (
        update(E)
        .where(E.c.key == key, E.c.status == PENDING, *fence)
        .values(version=E.c.version + 1, updated_at=now, **values)
        .returning(E.c.key)
    )
    return changed(conn, statement)


def moved(
    conn: Connection,
    table: Table,
    where: Any,
    to: str,
    *,
    was: str | None = None,
    returning: Any = None,
    **values: Any,
) -> list[Any]:
    """Move the rows of ``table`` that match ``where`` (and are in state ``was``, if given) to
    state ``to`` (and ``values``): the ``returning`` column of each row moved (none asked: [])."""
    statement = update(table).where(where).values(state=to, **values)
    if was is not None:
        statement = statement.where(table.c.state == was)
    if returning is None:
        conn.execute(statement)
        return []
    return list(conn.execute(statement.returning(returning)).scalars())


def outbox_fenced(conn: Connection, row_id: int, claimer: str, **values: Any) -> bool:
    """Change an outbox row still claimed by ``claimer``: a claimer whose lease ran out (the row
    retaken, or done by another) changes nothing."""
    statement = (
        update(OUTBOX)
        .where(OUTBOX.c.id == row_id, OUTBOX.c.claimed_by == claimer, OUTBOX.c.state == CLAIMED)
        .values(**values)
        .returning(OUTBOX.c.id)
    )
    return changed(conn, statement)


def released(conn: Connection, table: Table, held: Any, claimer: str | None, **values: Any) -> int:
    """Give back the ``held`` rows of ``table`` (only ``claimer``'s, when given): how many."""
    statement = update(table).where(held)
    if claimer is not None:
        statement = statement.where(table.c.claimed_by == claimer)
    values.update(claimed_by=None, claimed_until=None)
    return len(conn.execute(statement.values(**values).returning(table.c.id)).all())


def rows_of(conn: Connection, table: Table, column: Any, value: Any, *order: Any) -> list[Any]:
    """The rows of ``table`` whose ``column`` is ``value``, in ``order``."""
    return list(conn.execute(select(table).where(column == value).order_by(*order)))

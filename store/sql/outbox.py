"""Outbox completions, retries and failures, each fenced on the row's claim
(:mod:`store.sql.claims`): a claimer whose lease ran out changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from bot.domain import lanes, planning
from bot.domain.model import Route
from bot.domain.payloads import WritebackPayload
from bot.domain.records import DeliveryState, EffectKind, EffectState, OutboxItem, Writeback
from bot.domain.refs import MessageRef
from bot.domain.writes import WriteSet
from store.sql.apply import Applier
from store.sql.base import (
    COMPLETE_OUTBOX,
    CURRENT_STATE,
    DELIVERY,
    MARK_POSTED,
    NEW_AUDIT,
    OUTBOX,
    PACE,
    PENDING,
    E,
    audit_row,
    moved,
    outbox_fenced,
    stored_of,
)


class Outbox(Applier):
    async def complete_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        now: datetime,
        *,
        ref: MessageRef | None = None,
        seed: bool = False,
    ) -> bool:
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

        def work(conn: Connection) -> list[bool]:
            return [self._complete(conn, item, ref, claimer, now, seed) for item, ref in done]

        if not done:
            return []
        return await self._run(work, write=True)

    def _complete(
        self,
        conn: Connection,
        item: OutboxItem,
        ref: MessageRef | None,
        claimer: str,
        now: datetime,
        seed: bool = False,
    ) -> bool:
        finished = conn.execute(
            COMPLETE_OUTBOX, {"row_id": item.id, "claimer": claimer, "at": now}
        ).first()
        if finished is None:
            return False
        if item.kind == EffectKind.WRITEBACK:
            self._sink_up(conn, item)
            self._writeback_done(conn, item, now, error=None, reopen=False)
            return True
        if item.kind != EffectKind.POST or item.delivery_id is None:
            return True
        conn.execute(
            MARK_POSTED,
            {
                "delivery_id": item.delivery_id,
                "new_ref": None if ref is None else ref.to_json(),
                "new_ref_key": None if ref is None else ref.key,
                "at": now,
            },
        )
        current = conn.execute(CURRENT_STATE, {"ekey": item.elicitation_key}).first()
        if current is None:
            return True
        route = Route.model_validate(current.route)
        pending = current.status == PENDING
        copies = (
            self._copies(conn, [item.elicitation_key]).get(item.elicitation_key, ())
            if planning.needs_copies(route, pending=pending)
            else ()
        )
        writes = planning.posted_writes(
            route,
            delivery_id=item.delivery_id,
            destination=item.target,
            pending=pending,
            stale=current.version != item.version,  # answered or revised while it was posted
            copies=copies,
            now=now,
            seed=seed,
        )
        if not writes.empty:
            self._write(conn, item.elicitation_key, writes, now)
        return True

    async def retry_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        error: str,
        at: datetime,
        *,
        refresh_at: datetime | None = None,
    ) -> None:
        def work(conn: Connection) -> None:
            retried = outbox_fenced(
                conn,
                item.id,
                claimer,
                state=EffectState.PENDING.value,
                claimed_by=None,
                claimed_until=None,
                next_attempt_at=at,
                last_error=error[:2000],
            )
            if refresh_at is not None and retried:
                self._write(conn, item.elicitation_key, WriteSet(refresh=True), refresh_at)

        await self._run(work, write=True)

    async def fail_outbox(self, item: OutboxItem, claimer: str, error: str, now: datetime) -> bool:
        """Record a permanent failure, fenced on our claim (a lost lease changes nothing); a
        primary copy that failed for good falls back to the next waiting destination."""

        def work(conn: Connection) -> bool:
            if not self._fail_row(conn, item, error, now, claimer=claimer):
                return False
            if item.kind == EffectKind.WRITEBACK:  # given up on: not known to have landed
                self._writeback_done(conn, item, now, error=error, reopen=False, gave_up=True)
                return True
            post = item.kind == EffectKind.POST and item.delivery_id is not None
            if post:
                copy = DELIVERY.c.id == item.delivery_id
                moved(conn, DELIVERY, copy, DeliveryState.FAILED.value, error=error[:2000])
            detail = {"target": item.target, "error": error[:500]}
            action = f"{item.kind.value}_failed"
            conn.execute(
                NEW_AUDIT, audit_row(item.elicitation_key, now, action, None, None, detail)
            )
            if post and item.delivery_id is not None:
                key = item.elicitation_key
                copies = self._copies(conn, [key]).get(key, ())
                route = conn.execute(select(E.c.route).where(E.c.key == key)).scalar()
                if route is not None:
                    writes = planning.fall_back(
                        key, Route.model_validate(route), copies, item.delivery_id, now
                    )
                    if not writes.empty:
                        self._write(conn, key, writes, now)
            return True

        return await self._run(work, write=True)

    async def drop_outbox(self, item: OutboxItem, claimer: str, what: str, now: datetime) -> bool:

        def work(conn: Connection) -> bool:
            done = EffectState.DONE.value
            if not outbox_fenced(
                conn, item.id, claimer, state=done, done_at=now, last_error=f"dropped: {what}"
            ):
                return False
            if item.kind == EffectKind.POST and item.delivery_id is not None:
                moved(
                    conn, DELIVERY, DELIVERY.c.id == item.delivery_id, DeliveryState.SKIPPED.value
                )
            detail = {"target": item.target, "reason": "no longer pending"}
            action = f"{what}_dropped"
            row = audit_row(item.elicitation_key, now, action, None, None, detail)
            conn.execute(NEW_AUDIT, row)
            return True

        return await self._run(work, write=True)

    async def hold_sink(self, lane: str, now: datetime) -> int:

        def work(conn: Connection) -> int:
            held = conn.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.lane == lane,
                    OUTBOX.c.kind == EffectKind.WRITEBACK.value,
                    OUTBOX.c.state == EffectState.PENDING.value,
                    OUTBOX.c.last_error.is_(None),
                )
                .values(last_error="waiting: the sink is down")
                .returning(OUTBOX.c.elicitation_key)
            ).all()
            for row in held:
                self._write(conn, row.elicitation_key, WriteSet(refresh=True), now)
            return len(held)

        return await self._run(work, write=True)

    def _sink_up(self, conn: Connection, item: OutboxItem) -> None:
        """The sink answered: every write-back waiting on it is due again (:mod:`lanes`)."""
        conn.execute(delete(PACE).where(PACE.c.key == lanes.down_key(item.lane)))

    def _fail_row(
        self, conn: Connection, item: OutboxItem, error: str, now: datetime, *, claimer: str
    ) -> bool:
        failed = EffectState.FAILED.value
        return outbox_fenced(
            conn, item.id, claimer, state=failed, done_at=now, last_error=error[:2000]
        )

    async def refuse_writeback(
        self, item: OutboxItem, claimer: str, error: str, now: datetime, *, reopen: bool
    ) -> Writeback | None:

        def work(conn: Connection) -> Writeback | None:
            if not self._fail_row(conn, item, error, now, claimer=claimer):
                return None
            self._sink_up(conn, item)  # it answered: it is up
            return self._writeback_done(conn, item, now, error=error, reopen=reopen)

        return await self._run(work, write=True)

    def _writeback_done(
        self,
        conn: Connection,
        item: OutboxItem,
        now: datetime,
        *,
        error: str | None,
        reopen: bool,
        gave_up: bool = False,
    ) -> Writeback | None:
        key = item.elicitation_key
        row = conn.execute(select(E).where(E.c.key == key).with_for_update()).first()
        if row is None:
            return None
        round_ = item.payload.round if isinstance(item.payload, WritebackPayload) else 1
        copies = self._copies(conn, [key]).get(key, ())
        writes = planning.writeback_writes(
            stored_of(row), copies, round_, error=error, reopen=reopen, gave_up=gave_up
        )
        if writes.empty or writes.settle is None:
            return None
        self._write(conn, key, writes, now)
        return writes.settle.writeback

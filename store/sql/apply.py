"""Write-sets (:mod:`bot.domain.planning`) applied inside the caller's transaction, keeping the
fences: an activation and a close are conditional ``UPDATE … RETURNING``, an escalation copy an
insert that ignores a second one. Outbox and audit rows are gathered in a :class:`Batch` and
written together; refreshes run at the end, once per elicitation, never for one closed in it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine

from bot.domain import planning
from bot.domain.deadlines import WEB, Copy
from bot.domain.payloads import PostPayload, WritebackPayload
from bot.domain.records import (
    DeadlineKind,
    DeadlineState,
    DeliveryState,
    EffectKind,
    EffectState,
    Purpose,
    Writeback,
)
from bot.domain.writes import (
    SYSTEM,
    Close,
    NewCopy,
    PlannedDeadline,
    Settle,
    WriteSet,
    escalation_json,
)
from store.sql.base import (
    ANSWER,
    DEADLINE,
    DELIVERY,
    NEW_AUDIT,
    NEW_OUTBOX,
    OUTBOX,
    PENDING,
    E,
    SqlBase,
    audit_row,
    moved,
    open_changed,
    outbox_row,
)

TO_FIRE, CANCELLED = DeadlineState.PENDING.value, DeadlineState.CANCELLED.value
WAITING, SKIPPED = DeliveryState.WAITING.value, DeliveryState.SKIPPED.value

ESCALATION_POST = PostPayload(Purpose.ESCALATION)
"""The payload of an escalation copy's post."""


@dataclass
class Batch:
    """Rows written together at the end of one transaction's writes."""

    outbox: list[dict[str, object]] = field(default_factory=list)
    audit: list[dict[str, object]] = field(default_factory=list)
    refresh: set[str] = field(default_factory=set)
    bump: set[str] = field(default_factory=set)
    closed: set[str] = field(default_factory=set)
    updating: set[int] = field(default_factory=set)
    """Copies with an update gathered here (not yet written): coalesced like a pending one."""
    copies: Mapping[str, Sequence[Copy]] | None = None
    """The copies read at the start of the transaction, when the caller has them."""


class Applier(SqlBase):
    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        # For many copies at once (executemany): the rows returned name the new ones and their ids.
        self._new_copies = self._insert_ignore(
            DELIVERY, "elicitation_key", "destination", "purpose"
        ).returning(
            DELIVERY.c.elicitation_key, DELIVERY.c.destination, DELIVERY.c.purpose, DELIVERY.c.id
        )

    def _apply(self, conn: Connection, key: str, ws: WriteSet, now: datetime, batch: Batch) -> bool:
        """Write one write-set; False when its close found the elicitation closed already."""
        for entry in ws.audits:
            batch.audit.append(
                audit_row(key, now, entry.action, entry.actor, entry.code, entry.detail)
            )
        followups = self._add_copies(conn, [(key, ws, now)], batch)[0]
        for a in ws.activations:
            done = conn.execute(
                update(DELIVERY)
                .where(
                    DELIVERY.c.id == a.delivery_id, DELIVERY.c.state == DeliveryState.WAITING.value
                )
                .values(
                    state=a.state.value,
                    ref=None if a.ref is None else a.ref.to_json(),
                    ref_key=None if a.ref is None else a.ref.key,
                    posted_at=now if a.posted else None,
                )
                .returning(DELIVERY.c.id)
            ).first()
            if done is None:  # skipped by a close in between
                continue
            if a.post:
                batch.outbox.append(
                    outbox_row(key, EffectKind.POST, a.destination, now, delivery_id=a.delivery_id)
                )
            if a.followup_at is not None:
                followups.append(
                    PlannedDeadline(DeadlineKind.FOLLOWUP, a.followup_at, {"after": a.delivery_id})
                )
            if a.audit is not None:
                batch.audit.append(
                    audit_row(key, now, a.audit.action, a.audit.actor, a.audit.code, a.audit.detail)
                )
        if ws.replace:
            self._drop_pending(conn, key, ws.replace)
        self._add_deadlines(conn, key, ws.deadlines)
        self._add_deadlines(conn, key, followups)
        for effect in ws.effects:
            batch.outbox.append(
                outbox_row(
                    key,
                    effect.kind,
                    effect.target,
                    now,
                    delivery_id=effect.delivery_id,
                    payload=effect.payload,
                )
            )
        if ws.updates:
            self._update_copies(
                conn, [(key, u.delivery_id, u.destination) for u in ws.updates], now, batch
            )
        if ws.refresh:
            batch.refresh.add(key)
        if ws.new_version:
            batch.bump.add(key)
        if ws.settle is not None:
            self._settle(conn, key, ws.settle, now)
        if ws.close is not None:
            self._flush(conn, batch)  # what was decided before the close is written before it
            return self._close_as(conn, key, ws.close, now, batch)
        return True

    def _finish(self, conn: Connection, batch: Batch, now: datetime) -> None:
        """The refreshes gathered (for elicitations still open), then every gathered row."""
        bump = sorted(batch.bump - batch.closed)
        if bump:
            conn.execute(
                update(E).where(E.c.key.in_(bump)).values(version=E.c.version + 1, updated_at=now)
            )
        self._refresh(conn, batch.refresh - batch.closed, now, batch, batch.copies)
        self._flush(conn, batch)

    def _write(self, conn: Connection, key: str, ws: WriteSet, now: datetime) -> bool:
        """Apply one write-set and write what it gathered."""
        batch = Batch()
        done = self._apply(conn, key, ws, now, batch)
        self._finish(conn, batch, now)
        return done

    def _flush(self, conn: Connection, batch: Batch) -> None:
        if batch.outbox:
            conn.execute(NEW_OUTBOX, batch.outbox)
            batch.outbox.clear()
            batch.updating.clear()
        if batch.audit:
            conn.execute(NEW_AUDIT, batch.audit)
            batch.audit.clear()

    # -- pieces --------------------------------------------------------------------------------

    def _insert_copies(self, conn: Connection, rows: list[dict[str, Any]]) -> Iterable[Any]:
        return conn.execute(self._new_copies, rows)

    def _add_copies(
        self,
        conn: Connection,
        work: Sequence[tuple[str, WriteSet, datetime]],
        batch: Batch,
        *,
        insert: Callable[[Connection, list[dict[str, Any]]], Iterable[Any]] | None = None,
    ) -> list[list[PlannedDeadline]]:
        """The copies of these write-sets in one statement (a duplicate is skipped), each new one's
        post queued; returns each write-set's follow-ups, to plan once ids are known."""
        rows = [copy_row(key, c, now) for key, ws, now in work for c in ws.copies]
        if not rows:
            return [[] for _ in work]
        put = insert or self._insert_copies
        ids = {(r.elicitation_key, r.destination, r.purpose): r.id for r in put(conn, rows)}
        followups: list[list[PlannedDeadline]] = []
        for key, ws, now in work:
            planned: list[PlannedDeadline] = []
            for c in ws.copies:
                delivery_id = ids.get((key, c.destination, c.purpose.value))
                if delivery_id is None:  # this destination has this copy already
                    continue
                if c.post:
                    payload = ESCALATION_POST if c.purpose is Purpose.ESCALATION else None
                    batch.outbox.append(
                        outbox_row(
                            key,
                            EffectKind.POST,
                            c.destination,
                            now,
                            delivery_id=delivery_id,
                            payload=payload,
                        )
                    )
                if c.followup_at is not None:
                    after = {"after": delivery_id}
                    planned.append(PlannedDeadline(DeadlineKind.FOLLOWUP, c.followup_at, after))
            followups.append(planned)
        return followups

    def _add_deadlines(
        self, conn: Connection, key: str, deadlines: Iterable[PlannedDeadline]
    ) -> None:
        for d in deadlines:
            conn.execute(
                self._new_deadline,
                {
                    "elicitation_key": key,
                    "kind": d.kind.value,
                    "due_at": d.due_at,
                    "state": DeadlineState.PENDING.value,
                    "detail": None if d.detail is None else dict(d.detail),
                },
            )
            self._planned.append(d.due_at)

    def _drop_pending(self, conn: Connection, key: str, kinds: Collection[DeadlineKind]) -> None:
        conn.execute(
            DEADLINE.delete().where(
                DEADLINE.c.elicitation_key == key,
                DEADLINE.c.state == DeadlineState.PENDING.value,
                DEADLINE.c.kind.in_(sorted(k.value for k in kinds)),
            )
        )

    def _close_as(
        self, conn: Connection, key: str, close: Close, now: datetime, batch: Batch
    ) -> bool:
        """Close a pending elicitation: cancel its deadlines, update every copy, tell the source."""
        answer = close.answer.model_dump(mode="json") if close.answer else None
        status = close.status.value
        if not open_changed(conn, key, now, status=status, answer=answer, closed_at=now):
            return False
        self._closed(conn, key, now, batch)
        batch.audit.append(audit_row(key, now, close.status.value, SYSTEM, None, close.detail))
        return True

    def _closed(self, conn: Connection, key: str, now: datetime, batch: Batch) -> None:
        """What every close does, once it won: no deadline fires, no waiting copy is posted, and
        the source is told (one writeback, of the next round: the write-back's state says
        "sending" until it is accepted or refused, and then every posted copy shows the result).
        What the close cancelled and skipped is recorded with it, for a refusal to revive."""
        batch.closed.add(key)
        of_key = DEADLINE.c.elicitation_key == key
        cancelled = moved(conn, DEADLINE, of_key, CANCELLED, was=TO_FIRE, returning=DEADLINE.c.id)
        of_key = DELIVERY.c.elicitation_key == key
        skipped = moved(conn, DELIVERY, of_key, SKIPPED, was=WAITING, returning=DELIVERY.c.id)
        previous = conn.execute(select(E.c.writeback).where(E.c.key == key)).scalar()
        sending = planning.sending_writeback(
            Writeback.from_json(previous), cancelled=sorted(cancelled), skipped=sorted(skipped)
        )
        conn.execute(update(E).where(E.c.key == key).values(writeback=sending.to_json()))
        # The copies are rewritten once the source has answered (accepted: "Answered";
        # refused: what went wrong), one update each; the web inbox says "Sending…" meanwhile.
        batch.outbox.append(
            outbox_row(
                key, EffectKind.WRITEBACK, "source", now, payload=WritebackPayload(sending.round)
            )
        )

    def _settle(self, conn: Connection, key: str, settle: Settle, now: datetime) -> None:
        """The write-back's outcome; a reopen puts the answered elicitation back to pending
        without its answer and revives what its close cancelled and skipped."""
        values: dict[str, Any] = {
            "writeback": settle.writeback.to_json(),
            "version": E.c.version + 1,
            "updated_at": now,
        }
        if settle.reopen:
            values.update(status=PENDING, answer=None, closed_at=None)
        conn.execute(update(E).where(E.c.key == key).values(**values))
        if not settle.reopen:
            return
        conn.execute(ANSWER.delete().where(ANSWER.c.elicitation_key == key))
        wb = settle.writeback
        if wb.cancelled:
            ids = DEADLINE.c.id.in_(wb.cancelled)
            due = moved(conn, DEADLINE, ids, TO_FIRE, was=CANCELLED, returning=DEADLINE.c.due_at)
            self._planned.extend(due)
        if wb.skipped:
            moved(conn, DELIVERY, DELIVERY.c.id.in_(wb.skipped), WAITING, was=SKIPPED)

    def _refresh(
        self,
        conn: Connection,
        keys: Collection[str],
        now: datetime,
        batch: Batch,
        known: Mapping[str, Sequence[Copy]] | None,
    ) -> None:
        """One coalesced ``update`` per posted chat copy (the inbox renders the stored state;
        a copy still being posted renders the state current at post time)."""
        if not keys:
            return
        wanted = sorted(keys)
        if known is not None:
            posted = [
                (key, c.id, c.destination)
                for key in wanted
                for c in known.get(key, ())
                if c.state is DeliveryState.POSTED
            ]
        else:
            posted = [
                (r.elicitation_key, r.id, r.destination)
                for r in conn.execute(
                    select(DELIVERY.c.elicitation_key, DELIVERY.c.id, DELIVERY.c.destination)
                    .where(
                        DELIVERY.c.elicitation_key.in_(wanted),
                        DELIVERY.c.state == DeliveryState.POSTED.value,
                    )
                    .order_by(DELIVERY.c.id)
                )
            ]
        self._update_copies(conn, [p for p in posted if p[2] != WEB], now, batch)

    def _update_copies(
        self,
        conn: Connection,
        copies: Sequence[tuple[str, int, str]],
        now: datetime,
        batch: Batch,
    ) -> None:
        """Queue an update of each (key, delivery id, destination) unless an unclaimed one is
        already waiting."""
        if not copies:
            return
        # By delivery alone (its index), filtered here: a predicate on the state would let the
        # planner walk every pending outbox row instead.
        waiting = {
            r.delivery_id
            for r in conn.execute(
                select(OUTBOX.c.delivery_id, OUTBOX.c.kind, OUTBOX.c.state).where(
                    OUTBOX.c.delivery_id.in_(sorted({c[1] for c in copies}))
                )
            )
            if r.kind == EffectKind.UPDATE and r.state == EffectState.PENDING
        }
        for key, delivery_id, destination in copies:
            if delivery_id in waiting or delivery_id in batch.updating:
                continue
            batch.updating.add(delivery_id)
            batch.outbox.append(
                outbox_row(key, EffectKind.UPDATE, destination, now, delivery_id=delivery_id)
            )


def copy_row(key: str, c: NewCopy, now: datetime) -> dict[str, Any]:
    """A delivery row for a new copy."""
    return {
        "elicitation_key": key,
        "destination": c.destination,
        "position": c.position,
        "purpose": c.purpose.value,
        "state": c.state.value,
        "ref": None if c.ref is None else c.ref.to_json(),
        "ref_key": None if c.ref is None else c.ref.key,
        "posted_at": now if c.posted else None,
        "created_at": now,
        "detail": None if c.escalation is None else escalation_json(c.escalation),
    }

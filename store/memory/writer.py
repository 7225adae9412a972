"""The in-memory store's row writes, the same rows the SQL store writes, inside one :class:`Tx`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.domain import lanes, planning
from bot.domain.deadlines import WEB, Copy
from bot.domain.model import Answer, Status
from bot.domain.records import (
    AuditEntry,
    DeadlineKind,
    DeadlineState,
    DeliveryState,
    DeliveryView,
    EffectKind,
    EffectState,
    EffectView,
    Purpose,
)
from bot.domain.writes import Activation, NewCopy, PlannedDeadline, Settle, WriteSet
from store.memory.tables import DeadlineRow, Tx, as_json, utc


class Writer:
    """Row writes shared by every operation (one instance per transaction)."""

    def __init__(self, tx: Tx) -> None:
        self.tx = tx
        self.t = tx.t
        self._refresh: dict[str, datetime] = {}
        self._bump: dict[str, datetime] = {}
        self._closed: set[str] = set()

    # -- single rows ----------------------------------------------------------------------------

    def audit(
        self,
        key: str,
        now: datetime,
        action: str,
        actor: str | None,
        code: str | None,
        detail: Mapping[str, Any] | None,
    ) -> None:
        self.tx.insert_audit(
            AuditEntry(
                id=self.tx.next_id("audit"),
                elicitation_key=key,
                at=utc(now),
                action=action,
                actor=actor,
                code=code,
                detail=as_json(detail) or None,
            )
        )

    def enqueue(
        self,
        key: str,
        kind: EffectKind | str,
        target: str,
        now: datetime,
        *,
        delivery_id: int | None = None,
        payload: Mapping[str, Any] | None = None,
    ) -> int:
        row_id = self.tx.next_id("outbox")
        self.tx.insert_effect(
            EffectView(
                id=row_id,
                elicitation_key=key,
                kind=EffectKind(kind),
                target=target,
                delivery_id=delivery_id,
                state=EffectState.PENDING,
                attempts=0,
                next_attempt_at=utc(now),
                created_at=utc(now),
                payload=as_json(payload),
                lane=lanes.lane_of(key, EffectKind(kind), target),
            )
        )
        return row_id

    def add_delivery(self, row: DeliveryView) -> int | None:
        """Insert a copy unless one exists for (elicitation, destination, purpose)."""
        for d in self.t.deliveries_for(row.elicitation_key):
            if (d.destination, d.purpose) == (row.destination, row.purpose):
                return None
        self.tx.insert_delivery(row)
        return row.id

    def new_delivery_id(self) -> int:
        return self.tx.next_id("delivery")

    def add_deadlines(self, key: str, deadlines: Sequence[PlannedDeadline]) -> None:
        """Insert each unless one exists for (elicitation, kind, due time), in any state."""
        for d in deadlines:
            due_at = utc(d.due_at)
            kind = DeadlineKind(d.kind)
            self.tx.planned.append(due_at)
            existing = self.t.deadlines_for(key)
            if any((r.kind, r.due_at) == (kind, due_at) for r in existing):
                continue
            self.tx.insert_deadline(
                DeadlineRow(
                    id=self.tx.next_id("deadline"),
                    elicitation_key=key,
                    kind=kind,
                    due_at=due_at,
                    state=DeadlineState.PENDING,
                    detail=as_json(d.detail),
                )
            )

    def delete_pending_deadlines(self, key: str, kinds: Sequence[str]) -> None:
        for r in self.t.deadlines_for(key):
            if r.state is DeadlineState.PENDING and r.kind in kinds:
                self.tx.delete_deadline(r.id)

    # -- copies ---------------------------------------------------------------------------------

    def copies(self, key: str) -> tuple[Copy, ...]:
        return tuple(to_copy(d) for d in self.t.deliveries_for(key))

    def update_copy(self, key: str, delivery_id: int, destination: str, now: datetime) -> None:
        """Enqueue an update of one copy unless an unclaimed one is already waiting."""
        for o in self.t.outbox_for(key):
            if (
                o.delivery_id == delivery_id
                and o.kind is EffectKind.UPDATE
                and o.state is EffectState.PENDING
            ):
                return
        self.enqueue(key, EffectKind.UPDATE, destination, now, delivery_id=delivery_id)

    def update_every_copy(self, key: str, now: datetime) -> None:
        """One pending update per posted chat copy (a copy still being posted renders the state
        current at post time; the web inbox renders the stored state)."""
        for d in self.t.deliveries_for(key):
            if d.state is DeliveryState.POSTED and d.destination != WEB:
                self.update_copy(key, d.id, d.destination, now)

    def bump(self, key: str, now: datetime) -> None:
        row = self.t.elicitations[key]
        self.tx.elicitation(key, version=row.version + 1, updated_at=utc(now))

    # -- closing --------------------------------------------------------------------------------

    def close(self, key: str, now: datetime) -> None:
        """What every close does besides the status: pending deadlines are cancelled, waiting
        copies skipped, and the source told (one writeback of the next round; every posted copy
        is updated once it answered; what the close put aside is recorded for a reopen)."""
        self._closed.add(key)
        cancelled = []
        for r in self.t.deadlines_for(key):
            if r.state is DeadlineState.PENDING:
                self.tx.deadline(r.id, state=DeadlineState.CANCELLED)
                cancelled.append(r.id)
        skipped = []
        for d in self.t.deliveries_for(key):
            if d.state is DeliveryState.WAITING:
                self.tx.delivery(d.id, state=DeliveryState.SKIPPED)
                skipped.append(d.id)
        # Copies are rewritten once the source answered (see store.sql.apply._closed).
        sending = planning.sending_writeback(
            self.t.elicitations[key].writeback, cancelled=sorted(cancelled), skipped=sorted(skipped)
        )
        self.tx.elicitation(key, writeback=sending)
        self.enqueue(key, EffectKind.WRITEBACK, "source", now, payload={"round": sending.round})

    def settle(self, key: str, settle: Settle, now: datetime) -> None:
        """The write-back's outcome; a reopen puts the answered elicitation back to pending
        without its answer and revives what its close cancelled and skipped."""
        row = self.t.elicitations[key]
        values: dict[str, Any] = {
            "writeback": settle.writeback,
            "version": row.version + 1,
            "updated_at": utc(now),
        }
        if settle.reopen:
            values.update(status=Status.PENDING, answer=None, closed_at=None)
        self.tx.elicitation(key, **values)
        if not settle.reopen:
            return
        if key in self.t.answers:
            self.tx.drop(self.t.answers, key)
        for deadline_id in settle.writeback.cancelled:
            d = self.t.deadlines.get(deadline_id)
            if d is not None and d.state is DeadlineState.CANCELLED:
                self.tx.deadline(deadline_id, state=DeadlineState.PENDING)
                self.tx.planned.append(d.due_at)
        for delivery_id in settle.writeback.skipped:
            c = self.t.deliveries.get(delivery_id)
            if c is not None and c.state is DeliveryState.SKIPPED:
                self.tx.delivery(delivery_id, state=DeliveryState.WAITING)

    def close_as(
        self,
        key: str,
        status: Status,
        now: datetime,
        answer: Answer | None,
        audit: Mapping[str, Any],
    ) -> bool:
        """Close a pending elicitation: cancel its deadlines, update every copy, tell the source."""
        row = self.t.elicitations.get(key)
        if row is None or row.status is not Status.PENDING:
            return False
        self.tx.elicitation(
            key,
            status=status,
            answer=answer,
            version=row.version + 1,
            updated_at=utc(now),
            closed_at=utc(now),
        )
        self.close(key, now)
        self.audit(key, now, status.value, "system", None, audit)
        return True

    # -- write-sets ---------------------------------------------------------------------------

    def apply(self, key: str, ws: WriteSet, now: datetime, *, batch: bool = False) -> Applied:
        """Write what a decision returned, in the order every store keeps (see
        :mod:`bot.domain.writes`). In a ``batch`` (the deadlines one firing fires), refreshes and
        version bumps wait for :meth:`finish`: once per elicitation, and none for one closed in
        the batch (its close updated every copy already)."""
        for a in ws.audits:
            self.audit(key, now, a.action, a.actor, a.code, a.detail)
        followups: list[PlannedDeadline] = []
        for new in ws.copies:
            self._new_copy(key, new, now, followups)
        activated = sum(self._activate(key, act, now, followups) for act in ws.activations)
        if ws.replace:
            self.delete_pending_deadlines(key, tuple(ws.replace))
        self.add_deadlines(key, ws.deadlines)
        self.add_deadlines(key, followups)
        for effect in ws.effects:
            self.enqueue(
                key,
                effect.kind,
                effect.target,
                now,
                delivery_id=effect.delivery_id,
                payload=effect.payload,
            )
        for u in ws.updates:
            self.update_copy(key, u.delivery_id, u.destination, now)
        if ws.refresh:
            self._refresh.setdefault(key, now)
        if ws.new_version:
            self._bump.setdefault(key, now)
        if ws.settle is not None:
            self.settle(key, ws.settle, now)
        closed = None
        if ws.close is not None:
            c = ws.close
            closed = self.close_as(key, c.status, now, c.answer, c.detail or {})
        if not batch:
            self.finish()
        return Applied(activated=activated, closed=closed)

    def finish(self) -> None:
        """The bumps and refreshes gathered, for elicitations still open."""
        for key in sorted(set(self._bump) - self._closed):
            self.bump(key, self._bump[key])
        for key in sorted(set(self._refresh) - self._closed):
            self.update_every_copy(key, self._refresh[key])
        self._bump.clear()
        self._refresh.clear()
        self._closed.clear()

    def _new_copy(
        self, key: str, new: NewCopy, now: datetime, followups: list[PlannedDeadline]
    ) -> None:
        delivery_id = self.add_delivery(
            DeliveryView(
                id=self.new_delivery_id(),
                elicitation_key=key,
                destination=new.destination,
                position=new.position,
                purpose=new.purpose,
                state=new.state,
                ref=new.ref,
                posted_at=utc(now) if new.posted else None,
                created_at=utc(now),
                escalation=new.escalation,
            )
        )
        if delivery_id is None:  # this destination has its copy already: nothing hangs on it
            return
        if new.post:
            escalating = new.purpose is Purpose.ESCALATION
            payload = {"purpose": Purpose.ESCALATION.value} if escalating else None
            self.enqueue(
                key, EffectKind.POST, new.destination, now, delivery_id=delivery_id, payload=payload
            )
        if new.followup_at is not None:
            followups.append(followup(new.followup_at, delivery_id))

    def _activate(
        self, key: str, act: Activation, now: datetime, followups: list[PlannedDeadline]
    ) -> bool:
        """Fenced on the copy still waiting: a close in between skipped it."""
        current = self.t.deliveries.get(act.delivery_id)
        if current is None or current.state is not DeliveryState.WAITING:
            return False
        self.tx.delivery(
            act.delivery_id,
            state=act.state,
            ref=act.ref,
            posted_at=utc(now) if act.posted else None,
        )
        if act.post:
            self.enqueue(key, EffectKind.POST, act.destination, now, delivery_id=act.delivery_id)
        if act.followup_at is not None:
            followups.append(followup(act.followup_at, act.delivery_id))
        if act.audit is not None:
            a = act.audit
            self.audit(key, now, a.action, a.actor, a.code, a.detail)
        return True


@dataclass(frozen=True)
class Applied:
    """What a write-set's fenced parts did."""

    activated: int = 0
    closed: bool | None = None
    """None: it closed nothing; else whether the close happened (it was still pending)."""


def followup(at: datetime, after: int) -> PlannedDeadline:
    return PlannedDeadline(DeadlineKind.FOLLOWUP, at, {"after": after})


def to_copy(d: DeliveryView) -> Copy:
    return Copy(d.id, d.destination, d.position, d.purpose, d.state, d.ref)

"""Deadlines: due rows claimed under a lease, and fired once, fenced on our claim and on the row
still pending, in the transaction that reads the elicitation as it stands. One waiting for a copy
on its way is put back, due a little later (:mod:`bot.domain.deadlines`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.engine import Connection

from bot.domain import deadlines as dl
from bot.domain import planning
from bot.domain.deadlines import Claim, FireContext, Firing
from bot.domain.model import Elicitation, Route, Status
from bot.domain.records import DeadlineKind, DeadlineState, DueDeadline, FiredDeadline, FireOutcome
from store.sql.apply import Applier, Batch
from store.sql.base import DEADLINE, E, moved, released
from store.sql.votes import votes_for

PENDING_DEADLINE = DeadlineState.PENDING.value


class Deadlines(Applier):
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
                DEADLINE.c.state == PENDING_DEADLINE,
                DEADLINE.c.due_at <= now,
                or_(DEADLINE.c.claimed_until.is_(None), DEADLINE.c.claimed_until < now),
            )
            .order_by(DEADLINE.c.due_at)
            .limit(limit)
        )

        def work(conn: Connection) -> list[DueDeadline]:
            rows = conn.execute(
                update(DEADLINE)
                .where(DEADLINE.c.id.in_(due.scalar_subquery()))
                .values(claimed_by=claimer, claimed_until=now + lease)
                .returning(
                    DEADLINE.c.id,
                    DEADLINE.c.elicitation_key,
                    DEADLINE.c.kind,
                    DEADLINE.c.due_at,
                )
            ).all()
            return sorted(
                (
                    DueDeadline(r.id, r.elicitation_key, DeadlineKind(r.kind), r.due_at)
                    for r in rows
                ),
                key=lambda d: (d.due_at, d.id),
            )

        return await self._run(work, write=True)

    async def mark_fired(self, deadline_id: int, claimer: str, now: datetime) -> bool:
        def work(conn: Connection) -> bool:
            return len(self._mark_fired(conn, [deadline_id], claimer, now)) == 1

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
        elicitation as it stands now."""

        def work(conn: Connection) -> list[FiredDeadline]:
            return self._fire(conn, due, claimer, now, decide)

        if not due:
            return []
        return await self._run(work, write=True)

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
        ours = self._mark_fired(conn, [d.id for d in due], claimer, now)
        results = [_result(d, FireOutcome.LOST) for d in due]
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
        batch = Batch(copies=copies)
        idle: list[int] = []  # and skipped: the row is cancelled either way
        deferred: list[int] = []
        for n, d in enumerate(due):
            if d.id not in ours:
                continue
            key = d.elicitation_key
            row = rows.get(key)
            if row is None or status[key] is not Status.PENDING:
                idle.append(d.id)
                results[n] = _result(d, FireOutcome.IDLE)
                continue
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
            ctx = FireContext(
                d.kind,
                d.due_at,
                now,
                e,
                Status.PENDING,
                route,
                copies.get(key, ()),
                claim,
                ours[d.id],
                votes_for(conn, [key]).get(key, ()) if d.kind is DeadlineKind.REMIND else (),
            )
            fired = planning.firing_writes(ctx, decide(ctx), d.id)
            outcome = fired.outcome
            if outcome is FireOutcome.DEFERRED:
                deferred.append(d.id)
            elif outcome is FireOutcome.WAITING:  # now, so a close later in the batch cancels it
                again = fired.again_at or now + dl.COPY_RETRY
                self._due_again(conn, d, again, fired.again_detail)
            closed = not self._apply(conn, key, fired.writes, now, batch)
            if fired.writes.close is not None:
                if closed:  # closed meanwhile: nothing left to do
                    outcome = FireOutcome.IDLE
                else:
                    status[key] = fired.writes.close.status
            if outcome in (FireOutcome.IDLE, FireOutcome.SKIPPED):
                idle.append(d.id)
            results[n] = _result(d, outcome)
        if deferred:  # a new row at the claim's lapse takes its place
            moved(conn, DEADLINE, DEADLINE.c.id.in_(deferred), DeadlineState.DEFERRED.value)
        if idle:  # nothing was done (or nothing could be: skipped, audited): the row says so
            moved(conn, DEADLINE, DEADLINE.c.id.in_(idle), DeadlineState.CANCELLED.value)
        self._finish(conn, batch, now)
        return results

    def _mark_fired(
        self, conn: Connection, ids: Sequence[int], claimer: str, now: datetime
    ) -> dict[int, dict[str, Any] | None]:
        """Mark these deadlines fired, fenced on our claim and on them still pending: the detail
        of each one that was ours."""
        fired = conn.execute(
            update(DEADLINE)
            .where(
                DEADLINE.c.id.in_(ids),
                DEADLINE.c.claimed_by == claimer,
                DEADLINE.c.state == PENDING_DEADLINE,
            )
            .values(state=DeadlineState.FIRED.value, fired_at=now)
            .returning(DEADLINE.c.id, DEADLINE.c.detail)
        )
        return {r.id: r.detail for r in fired}

    def _due_again(
        self, conn: Connection, d: DueDeadline, at: datetime, detail: Mapping[str, Any] | None
    ) -> None:
        """Put a deadline waiting for a copy back, pending, due at the first instant from ``at``
        that no other row of its kind holds (one row per kind and due time)."""
        taken = set(
            conn.execute(
                select(DEADLINE.c.due_at).where(
                    DEADLINE.c.elicitation_key == d.elicitation_key,
                    DEADLINE.c.kind == d.kind.value,
                    DEADLINE.c.id != d.id,
                )
            ).scalars()
        )
        again = dl.free_instant(at, taken)
        moved(
            conn,
            DEADLINE,
            DEADLINE.c.id == d.id,
            PENDING_DEADLINE,
            due_at=again,
            detail=dict(detail or {}),
            fired_at=None,
            claimed_by=None,
            claimed_until=None,
        )
        self._planned.append(again)

    async def next_deadline_at(self, now: datetime) -> datetime | None:
        """When the next deadline nobody holds is due (None: none is free); a row held under
        another's lease is its holder's to fire, or a sweep's once the lease has run out."""

        def work(conn: Connection) -> datetime | None:
            found: datetime | None = conn.execute(
                select(DEADLINE.c.due_at)
                .where(
                    DEADLINE.c.state == PENDING_DEADLINE,
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
            held = and_(DEADLINE.c.state == PENDING_DEADLINE, DEADLINE.c.claimed_by.is_not(None))
            return released(conn, DEADLINE, held, claimer)

        return await self._run(work, write=True)


def _result(d: DueDeadline, outcome: FireOutcome) -> FiredDeadline:
    return FiredDeadline(d.id, d.elicitation_key, d.kind, d.due_at, outcome)

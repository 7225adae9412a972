"""Single-owner leases and shared pacing in SQL: each a row every replica writes through one atomic
statement, so two replicas can never both win.

- ``acquire_lease``: one upsert whose ``WHERE`` (run out, or ours) takes or renews; someone else's
  live lease returns nothing. PostgreSQL re-evaluates the ``WHERE`` on the winner's row after its
  lock; SQLite serialises writers (``BEGIN IMMEDIATE``).
- ``reserve_slot``: the slot is ``max(now, not_before)``, then ``not_before`` is ``slot +
  interval``: one upsert on PostgreSQL; SQLite (timestamps as text, no microsecond arithmetic)
  reads and writes the row in one ``BEGIN IMMEDIATE`` transaction.

Times are the callers' clocks: replicas must keep them within a small part of a lease's ttl (NTP).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Interval, Table, and_, case, delete, func, literal, or_, select
from sqlalchemy.engine import Connection

from bot.domain.records import EffectKind, EffectState, LeaseView
from store.sql.base import OUTBOX, PACE, SqlBase, changed
from store.tables import LeaseRow, UtcDateTime

LEASE: Table = LeaseRow.__table__  # type: ignore[attr-defined]


def _at(value: datetime) -> Any:
    """A timestamp bound as the tables keep them (aware UTC in, naive UTC text on SQLite)."""
    return literal(value, UtcDateTime())


class Leases(SqlBase):
    """The Leases and Pacing ports of :class:`bot.domain.store.Store`."""

    async def acquire_lease(self, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
        until = now + ttl
        insert = self._dialect_insert(LEASE).values(
            name=name, holder=holder, until=until, since=now
        )
        ours_and_live = and_(LEASE.c.holder == holder, LEASE.c.until >= _at(now))
        statement = insert.on_conflict_do_update(
            index_elements=[LEASE.c.name],
            set_={
                "holder": holder,
                "until": _at(until),
                # A renewal keeps its start; a take-over (or ours retaken once run out) restarts.
                "since": case((ours_and_live, LEASE.c.since), else_=_at(now)),
            },
            where=or_(LEASE.c.until < _at(now), LEASE.c.holder == holder),
        ).returning(LEASE.c.holder)

        def work(conn: Connection) -> bool:
            return changed(conn, statement)

        return await self._run(work, write=True)

    async def release_lease(self, name: str, holder: str) -> None:
        """Give ``name`` up at once (an orderly stop), if we still hold it."""
        await self._execute(delete(LEASE).where(LEASE.c.name == name, LEASE.c.holder == holder))

    async def leases(self) -> list[LeaseView]:
        query = select(LEASE).order_by(LEASE.c.name)
        return await self._read_rows(query, lambda r: LeaseView(r.name, r.holder, r.until, r.since))

    async def question_claimed(self, lane: str, now: datetime) -> bool:
        query = (
            select(OUTBOX.c.id)
            .where(
                OUTBOX.c.lane == lane,
                OUTBOX.c.kind == EffectKind.POST.value,
                or_(
                    # Claimed (a lease run out too: the post is taken again at once), or due
                    # and about to be claimed: between one post done and the next claimed.
                    OUTBOX.c.state == EffectState.CLAIMED.value,
                    and_(
                        OUTBOX.c.state == EffectState.PENDING.value,
                        OUTBOX.c.next_attempt_at <= now,
                    ),
                ),
            )
            .limit(1)
        )

        def work(conn: Connection) -> bool:
            return conn.execute(query).first() is not None

        return await self._run(work, write=False)

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        gap = timedelta(seconds=interval)
        if self.dialect == "postgresql":
            statement = (
                self._dialect_insert(PACE)
                .values(key=key, not_before=now + gap)
                .on_conflict_do_update(
                    index_elements=[PACE.c.key],
                    set_={
                        "not_before": func.greatest(
                            PACE.c.not_before, _at(now), type_=UtcDateTime()
                        )
                        + literal(gap, Interval())
                    },
                )
                .returning(PACE.c.not_before)
            )

            def upsert(conn: Connection) -> datetime:
                not_before: datetime = conn.execute(statement).scalar_one()
                return not_before - gap

            return await self._run(upsert, write=True)

        def read_then_write(conn: Connection) -> datetime:
            held = conn.execute(select(PACE.c.not_before).where(PACE.c.key == key)).scalar()
            slot = now if held is None else max(now, held)
            conn.execute(
                self._dialect_insert(PACE)
                .values(key=key, not_before=slot + gap)
                .on_conflict_do_update(
                    index_elements=[PACE.c.key], set_={"not_before": _at(slot + gap)}
                )
            )
            return slot

        return await self._run(read_then_write, write=True)

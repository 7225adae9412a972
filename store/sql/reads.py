"""Reads (typed records, never rows), chat routes and small durable values."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.engine import Connection

from bot.domain.deadlines import Timer
from bot.domain.model import ElicitationKey
from bot.domain.records import (
    AuditEntry,
    DeadlineKind,
    DeadlineState,
    DeadlineView,
    DeliveryView,
    EffectView,
    StoredElicitation,
    Timeline,
)
from store.sql.base import (
    ANSWER,
    AUDIT,
    DEADLINE,
    DELIVERY,
    INBOUND,
    KV,
    OUTBOX,
    E,
    SqlBase,
    audit_of,
    deadline_of,
    delivery_of,
    effect_of,
    rows_of,
    stored_of,
)
from store.sql.votes import votes_for


class Reads(SqlBase):
    async def resolve_key(self, ident: str) -> ElicitationKey | None:

        def work(conn: Connection) -> ElicitationKey | None:
            hit = conn.execute(select(E.c.key).where(E.c.key == ident)).scalar()
            if hit is not None:
                return ElicitationKey(str(hit))
            rows = conn.execute(select(E.c.key).where(E.c.source_id == ident).limit(2)).all()
            return ElicitationKey(str(rows[0][0])) if len(rows) == 1 else None

        return await self._run(work, write=False)

    async def get(self, key: ElicitationKey) -> StoredElicitation | None:
        def work(conn: Connection) -> StoredElicitation | None:
            return next(iter(_stored(conn, rows_of(conn, E, E.c.key, key))), None)

        return await self._run(work, write=False)

    async def get_many(
        self, keys: Sequence[ElicitationKey]
    ) -> dict[ElicitationKey, StoredElicitation]:
        def work(conn: Connection) -> dict[ElicitationKey, StoredElicitation]:
            rows = conn.execute(select(E).where(E.c.key.in_(sorted(set(keys))))).all()
            return dict(
                zip((ElicitationKey(r.key) for r in rows), _stored(conn, rows), strict=True)
            )

        if not keys:
            return {}
        return await self._run(work, write=False)

    async def key_for_message(self, ref_key: str) -> ElicitationKey | None:
        query = select(DELIVERY.c.elicitation_key).where(DELIVERY.c.ref_key == ref_key).limit(1)
        return await self._read_value(query, lambda found: ElicitationKey(str(found)))

    async def list_elicitations(
        self, *, status: str | None = None, after: str | None = None, limit: int = 50
    ) -> list[StoredElicitation]:

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
            return _stored(conn, conn.execute(query).all())

        return await self._run(work, write=False)

    async def deliveries(self, key: ElicitationKey) -> list[DeliveryView]:
        query = select(DELIVERY).where(DELIVERY.c.elicitation_key == key).order_by(DELIVERY.c.id)
        return await self._read_rows(query, delivery_of)

    async def delivery(self, delivery_id: int) -> DeliveryView | None:
        found = await self._read_rows(
            select(DELIVERY).where(DELIVERY.c.id == delivery_id), delivery_of
        )
        return found[0] if found else None

    async def deadlines(self, key: ElicitationKey) -> list[DeadlineView]:
        query = (
            select(DEADLINE)
            .where(DEADLINE.c.elicitation_key == key)
            .order_by(DEADLINE.c.due_at, DEADLINE.c.id)
        )
        return await self._read_rows(query, deadline_of)

    async def audit(self, key: ElicitationKey) -> list[AuditEntry]:
        query = select(AUDIT).where(AUDIT.c.elicitation_key == key).order_by(AUDIT.c.id)
        return await self._read_rows(query, audit_of)

    async def outbox(self, key: ElicitationKey | None = None) -> list[EffectView]:
        query = select(OUTBOX).order_by(OUTBOX.c.id)
        if key is not None:
            query = query.where(OUTBOX.c.elicitation_key == key)
        return await self._read_rows(query, effect_of)

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

        def work(conn: Connection) -> int:
            return int(conn.execute(select(func.count()).select_from(tables[table])).scalar_one())

        return await self._run(work, write=False)

    async def timelines(self, keys: Sequence[ElicitationKey]) -> dict[ElicitationKey, Timeline]:
        """Copies and pending deadlines of each elicitation: what its schedule is built from."""

        def work(conn: Connection) -> dict[ElicitationKey, Timeline]:
            wanted = sorted(set(keys))
            copies = self._copies(conn, wanted)
            timers: dict[str, list[Timer]] = defaultdict(list)
            for r in conn.execute(
                select(DEADLINE.c.elicitation_key, DEADLINE.c.kind, DEADLINE.c.due_at)
                .where(
                    DEADLINE.c.elicitation_key.in_(wanted),
                    DEADLINE.c.state == DeadlineState.PENDING.value,
                )
                .order_by(DEADLINE.c.due_at, DEADLINE.c.id)
            ):
                timers[r.elicitation_key].append(Timer(DeadlineKind(r.kind), r.due_at))
            return {
                key: Timeline(copies.get(key, ()), tuple(timers.get(key, ()))) for key in wanted
            }

        if not keys:
            return {}
        return await self._run(work, write=False)

    # -- small values ------------------------------------------------------------------------

    async def get_value(self, key: str) -> str | None:
        return await self._read_value(select(KV.c.value).where(KV.c.key == key), str)

    async def set_value(self, key: str, value: str) -> None:
        def work(conn: Connection) -> None:
            changed = conn.execute(
                update(KV).where(KV.c.key == key).values(value=value).returning(KV.c.key)
            )
            if changed.first() is None:
                conn.execute(insert(KV).values(key=key, value=value))

        await self._run(work, write=True)


def _stored(conn: Connection, rows: Sequence[Any]) -> list[StoredElicitation]:
    """Elicitation rows as records, each with its votes (read for them all at once)."""
    votes = votes_for(conn, [r.key for r in rows])
    return [replace(stored_of(r), votes=votes.get(r.key, ())) for r in rows]

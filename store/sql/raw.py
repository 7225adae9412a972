"""Raw inbound chat events, recorded before their ack and marked handled after (durable before
ack: a restart handles what was recorded and not yet handled).

Recording is deduplicated by ``INSERT … ON CONFLICT (channel, dedupe_key) DO NOTHING RETURNING
id``, one statement on SQLite and PostgreSQL alike: a second delivery of the same event gets no
id, whichever replica it reaches, without a read-then-write race.
"""

from __future__ import annotations

from datetime import datetime
from functools import cached_property
from typing import Any

from sqlalchemy import Table, bindparam, delete, select, update
from sqlalchemy.engine import Connection

from bot.domain.records import RawEvent
from store.sql.base import SqlBase
from store.tables import RawEventRow

RAW: Table = RawEventRow.__table__  # type: ignore[attr-defined]


class Raw(SqlBase):
    @cached_property
    def _new_raw(self) -> Any:
        """Built on first use (the statement depends on the dialect; no ``__init__`` here, so
        the store's mixins need not agree on one)."""
        return self._insert_ignore(RAW, "channel", "dedupe_key").returning(RAW.c.id)

    async def record_raw(
        self, channel: str, dedupe_key: str, body: dict[str, object], now: datetime
    ) -> int | None:
        """Record once; None when (channel, dedupe_key) was recorded before."""
        statement = self._new_raw
        row = {
            "channel": channel,
            "dedupe_key": dedupe_key,
            "body": body,
            "received_at": now,
            "handled_at": None,
        }

        def work(conn: Connection) -> int | None:
            found = conn.execute(statement, row).scalar()
            return None if found is None else int(found)

        return await self._run(work, write=True)

    async def handled_raw(self, raw_id: int, now: datetime) -> None:
        """Mark handled; the first time stays (a second mark changes nothing)."""

        def work(conn: Connection) -> None:
            conn.execute(_HANDLED, {"raw_id": raw_id, "at": now})

        await self._run(work, write=True)

    async def purge_raw(self, handled_before: datetime) -> int:
        """Forget events handled before ``handled_before`` (their dedupe keys with them)."""

        def work(conn: Connection) -> int:
            return len(conn.execute(_PURGE, {"before": handled_before}).all())

        return await self._run(work, write=True)

    async def open_raw(self, channel: str, *, limit: int = 100) -> list[RawEvent]:
        """Recorded and not handled, in the order they were recorded (oldest first)."""

        def work(conn: Connection) -> list[RawEvent]:
            rows = conn.execute(_OPEN, {"channel": channel, "limit": limit})
            return [
                RawEvent(
                    id=r.id,
                    channel=r.channel,
                    dedupe_key=r.dedupe_key,
                    body=r.body,
                    received_at=r.received_at,
                )
                for r in rows
            ]

        return await self._run(work, write=False)


_PURGE = delete(RAW).where(RAW.c.handled_at < bindparam("before")).returning(RAW.c.id)

_HANDLED = (
    update(RAW)
    .where(RAW.c.id == bindparam("raw_id"), RAW.c.handled_at.is_(None))
    .values(handled_at=bindparam("at"))
)
_OPEN = (
    select(RAW.c.id, RAW.c.channel, RAW.c.dedupe_key, RAW.c.body, RAW.c.received_at)
    .where(RAW.c.channel == bindparam("channel"), RAW.c.handled_at.is_(None))
    .order_by(RAW.c.id)
    .limit(bindparam("limit"))
)

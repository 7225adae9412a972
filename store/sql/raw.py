"""Raw inbound chat events, recorded before their ack and marked handled after (a restart handles
what was recorded and not yet handled). Recording is one ``INSERT … ON CONFLICT DO NOTHING
RETURNING id``: a second delivery of an event gets no id, whichever replica it reaches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import Table, bindparam, delete, select, update
from sqlalchemy.engine import Connection

from bot.domain.records import RawEvent
from store.sql.base import SqlBase, record_of
from store.tables import RawEventRow

RAW: Table = RawEventRow.__table__  # type: ignore[attr-defined]
T = TypeVar("T")


_Entry = tuple[Callable[[Connection], Any], "asyncio.Future[Any]"]


class _Group:
    """Group commit for small independent writes (a click's record is on Slack's ack path; on SQLite
    a transaction each would queue the acks): those that arrive while a transaction runs share the
    next one, and if it fails each is retried in its own."""

    MAX = 64

    def __init__(self, store: SqlBase, *, urgent: bool = False) -> None:
        self.store = store
        self.urgent = urgent
        self.pending: list[_Entry] = []
        self.drainer: asyncio.Task[None] | None = None

    async def run(self, work: Callable[[Connection], T]) -> T:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((work, future))
        if self.drainer is None or self.drainer.done():
            self.drainer = asyncio.create_task(self._drain())
        result: T = await future
        return result

    async def _drain(self) -> None:
        while self.pending:
            group = self.pending[: self.MAX]
            del self.pending[: self.MAX]
            await self._flush(group)

    async def _flush(
        self, group: list[tuple[Callable[[Connection], Any], asyncio.Future[Any]]]
    ) -> None:
        def work(conn: Connection) -> list[Any]:
            return [one(conn) for one, _ in group]

        try:
            results = await self.store._run(work, write=True, urgent=self.urgent)
        except Exception as exc:
            if len(group) == 1:
                if not group[0][1].done():
                    group[0][1].set_exception(exc)
                return
            for entry in group:
                await self._flush([entry])
            return
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)


class Raw(SqlBase):
    @cached_property
    def _raw_group(self) -> _Group:
        """Records (Slack's ack waits for them) go ahead of other writers; marks follow."""
        return _Group(self, urgent=True)

    @cached_property
    def _handled_group(self) -> _Group:
        return _Group(self)

    @cached_property
    def _new_raw(self) -> Any:
        """Built on first use (the statement depends on the dialect; no ``__init__`` here, so
        the store's mixins need not agree on one)."""
        return self._insert_ignore(RAW, "channel", "dedupe_key").returning(RAW.c.id)

    async def record_raw(
        self, channel: str, dedupe_key: str, body: dict[str, object], now: datetime
    ) -> int | None:
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

        return await self._raw_group.run(work)

    async def handled_raw(self, raw_id: int, now: datetime) -> None:
        """Mark handled; the first time stays (a second mark changes nothing)."""

        def work(conn: Connection) -> None:
            conn.execute(_HANDLED, {"raw_id": raw_id, "at": now})

        await self._handled_group.run(work)

    async def purge_raw(self, handled_before: datetime) -> int:

        def work(conn: Connection) -> int:
            return len(conn.execute(_PURGE, {"before": handled_before}).all())

        return await self._run(work, write=True)

    async def open_raw(self, channel: str, *, limit: int = 100) -> list[RawEvent]:
        params = {"channel": channel, "limit": limit}
        return await self._read_rows(_OPEN, lambda r: record_of(RawEvent, r), params)


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

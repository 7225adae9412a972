"""The Matrix device's end-to-end crypto state in SQL: one row per owner, the blob replaced whole.

A save is one upsert (the same on SQLite and PostgreSQL), fenced when given the lease: the check
and the write are one statement; on PostgreSQL the ``EXISTS`` locks the lease row ``FOR SHARE``,
so a take-over waits for a save in flight; SQLite serialises writers. The blob holds the device's
keys: never logged, bound once per save (the update takes the inserted row's, ``excluded``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, LargeBinary, String, Table, exists, literal, select, true
from sqlalchemy.engine import Connection

from store.sql.base import SqlBase
from store.tables import LeaseRow, MatrixCryptoRow, UtcDateTime

CRYPTO: Table = MatrixCryptoRow.__table__  # type: ignore[attr-defined]
LEASE: Table = LeaseRow.__table__  # type: ignore[attr-defined]


def _held(lease: tuple[str, str], now: datetime) -> Any:
    """``lease`` is (name, holder)'s and has not run out at ``now`` (row locked on PostgreSQL;
    SQLite renders no lock)."""
    name, holder = lease
    live = (
        select(LEASE.c.name)
        .where(
            LEASE.c.name == name,
            LEASE.c.holder == holder,
            LEASE.c.until > literal(now, UtcDateTime()),
        )
        .with_for_update(read=True)
    )
    return exists(live)


class Crypto(SqlBase):
    """The CryptoStates port of :class:`bot.domain.store.Store`."""

    async def save_crypto(
        self, owner: str, blob: bytes, now: datetime, *, lease: tuple[str, str] | None = None
    ) -> bool:
        row = select(
            literal(owner, String()),
            literal(bytes(blob), LargeBinary()),
            literal(now, UtcDateTime()),
            literal(1, Integer()),
        ).where(true() if lease is None else _held(lease, now))  # SQLite's upsert needs a WHERE
        insert = self._dialect_insert(CRYPTO).from_select(
            ["owner", "blob", "updated_at", "version"], row
        )
        statement = insert.on_conflict_do_update(
            index_elements=[CRYPTO.c.owner],
            set_={
                "blob": insert.excluded.blob,
                "updated_at": insert.excluded.updated_at,
                "version": CRYPTO.c.version + 1,
            },
        ).returning(CRYPTO.c.version)

        def work(conn: Connection) -> bool:
            return conn.execute(statement).first() is not None

        return await self._run(work, write=True)

    async def load_crypto(self, owner: str) -> bytes | None:
        return await self._read_value(select(CRYPTO.c.blob).where(CRYPTO.c.owner == owner), bytes)

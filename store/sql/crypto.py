"""The Matrix device's end-to-end crypto state in SQL: one row per owner (``<user id>|<device
id>``), the blob replaced whole on each save.

A save is one ``INSERT … ON CONFLICT (owner) DO UPDATE`` that also counts the saves in
``version``, the same statement on SQLite and PostgreSQL. Only the holder of the Matrix lease
writes an owner's row, so saves do not race; if two ever did, the last one wins whole (a row is
never a mix of two blobs). The blob holds the device's keys, pickled with the pickle key: it is
never logged, and never read back except by :meth:`Crypto.load_crypto`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, select
from sqlalchemy.engine import Connection

from store.sql.base import SqlBase
from store.tables import MatrixCryptoRow

CRYPTO: Table = MatrixCryptoRow.__table__  # type: ignore[attr-defined]


class Crypto(SqlBase):
    """The CryptoStates port of :class:`bot.domain.store.Store`."""

    async def save_crypto(self, owner: str, blob: bytes, now: datetime) -> None:
        statement = (
            self._dialect_insert(CRYPTO)
            .values(owner=owner, blob=blob, updated_at=now, version=1)
            .on_conflict_do_update(
                index_elements=[CRYPTO.c.owner],
                set_={"blob": blob, "updated_at": now, "version": CRYPTO.c.version + 1},
            )
        )

        def work(conn: Connection) -> None:
            conn.execute(statement)

        await self._run(work, write=True)

    async def load_crypto(self, owner: str) -> bytes | None:
        def work(conn: Connection) -> bytes | None:
            found = conn.execute(select(CRYPTO.c.blob).where(CRYPTO.c.owner == owner)).scalar()
            return None if found is None else bytes(found)

        return await self._run(work, write=False)

"""The Matrix device's end-to-end crypto state in memory: the SQL store's rules (one blob per
owner, replaced whole, saves counted; a save given a lease written only while that holder has it
and it has not run out) on one dict.

No method awaits, so each runs whole on the event loop: the lease check and the write are as
atomic as the SQL statement. The lease is read from :class:`~store.memory.leases.MemoryLeases`'s
rows on the same store object; a store without leases holds none, so a fenced save is refused.
The dict is made on first use (``MemoryStore.__init__`` builds only its own tables). Whatever
bytes-like value comes in, bytes come out, as from a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store.memory.leases import MemoryLeases
from store.memory.tables import utc


@dataclass(frozen=True)
class _CryptoRow:
    blob: bytes
    updated_at: datetime
    version: int


class MemoryCrypto:
    """The CryptoStates port of :class:`bot.domain.store.Store`, in this process."""

    @property
    def _crypto_rows(self) -> dict[str, _CryptoRow]:
        rows: dict[str, _CryptoRow] = self.__dict__.setdefault("_memory_crypto", {})
        return rows

    async def save_crypto(
        self, owner: str, blob: bytes, now: datetime, *, lease: tuple[str, str] | None = None
    ) -> bool:
        at = utc(now)
        if lease is not None and not self._holds(lease, at):
            return False
        held = self._crypto_rows.get(owner)
        version = 1 if held is None else held.version + 1
        self._crypto_rows[owner] = _CryptoRow(bytes(blob), at, version)
        return True

    async def load_crypto(self, owner: str) -> bytes | None:
        held = self._crypto_rows.get(owner)
        return None if held is None else bytes(held.blob)

    def _holds(self, lease: tuple[str, str], now: datetime) -> bool:
        if not isinstance(self, MemoryLeases):
            return False
        name, holder = lease
        row = self._lease_rows.get(name)
        return row is not None and row.holder == holder and row.until > now

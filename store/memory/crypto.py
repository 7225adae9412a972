"""The Matrix device's end-to-end crypto state in memory: the SQL store's rule (one blob per owner,
replaced whole, saves counted) on one dict.

No method awaits, so each runs whole on the event loop. The dict is made on first use
(``MemoryStore.__init__`` builds only its own tables). Whatever bytes-like value comes in, bytes
come out, as from a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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

    async def save_crypto(self, owner: str, blob: bytes, now: datetime) -> None:
        held = self._crypto_rows.get(owner)
        version = 1 if held is None else held.version + 1
        self._crypto_rows[owner] = _CryptoRow(bytes(blob), utc(now), version)

    async def load_crypto(self, owner: str) -> bytes | None:
        held = self._crypto_rows.get(owner)
        return None if held is None else bytes(held.blob)

"""Raw inbound chat events in memory: recorded once per (channel, dedupe key), handled after.

Each method runs without awaiting, so it is atomic on the event loop (no lock needed). The state
is created on first use: :class:`~store.memory.store.MemoryStore` builds its own and calls no
mixin's ``__init__``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from bot.domain.records import RawEvent
from store.memory.tables import as_json, utc


@dataclass
class _RawTable:
    rows: dict[int, RawEvent] = field(default_factory=dict)
    """Open and handled alike, by id (ids grow in the order events were recorded)."""
    ids: dict[tuple[str, str], int] = field(default_factory=dict)
    handled: dict[int, datetime] = field(default_factory=dict)
    next_id: int = 1


class MemoryRaw:
    _raw_table: _RawTable

    def _raw(self) -> _RawTable:
        try:
            return self._raw_table
        except AttributeError:
            self._raw_table = _RawTable()
            return self._raw_table

    async def record_raw(
        self, channel: str, dedupe_key: str, body: dict[str, object], now: datetime
    ) -> int | None:
        """Record once; None when (channel, dedupe_key) was recorded before."""
        t = self._raw()
        if (channel, dedupe_key) in t.ids:
            return None
        stored = as_json(body) or {}  # a copy, refused unless JSON (as the SQL column is)
        raw_id = t.next_id
        t.next_id += 1
        t.ids[channel, dedupe_key] = raw_id
        t.rows[raw_id] = RawEvent(raw_id, channel, dedupe_key, stored, utc(now))
        return raw_id

    async def handled_raw(self, raw_id: int, now: datetime) -> None:
        """Mark handled; the first time stays."""
        t = self._raw()
        if raw_id in t.rows:
            t.handled.setdefault(raw_id, utc(now))

    async def open_raw(self, channel: str, *, limit: int = 100) -> list[RawEvent]:
        """Recorded and not handled, oldest first; each body a copy (as a read from SQL is)."""
        t = self._raw()
        found = [
            replace(row, body=as_json(row.body) or {})
            for raw_id, row in sorted(t.rows.items())
            if row.channel == channel and raw_id not in t.handled
        ]
        return found[: max(limit, 0)]

    async def purge_raw(self, handled_before: datetime) -> int:
        """Forget events handled before ``handled_before`` (their dedupe keys with them)."""
        t = self._raw()
        gone = [raw_id for raw_id, at in t.handled.items() if at < handled_before]
        for raw_id in gone:
            row = t.rows.pop(raw_id)
            t.ids.pop((row.channel, row.dedupe_key), None)
            del t.handled[raw_id]
        return len(gone)

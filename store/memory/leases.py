"""Single-owner leases and shared pacing in memory: the SQL store's rules on two dicts.

No method awaits, so each runs whole on the event loop: as atomic as the SQL statements. The
dicts are made on first use (``MemoryStore.__init__`` builds only its own tables).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.domain.records import LeaseView


class MemoryLeases:
    """The Leases and Pacing ports of :class:`bot.domain.store.Store`, in this process."""

    @property
    def _lease_rows(self) -> dict[str, LeaseView]:
        rows: dict[str, LeaseView] = self.__dict__.setdefault("_memory_leases", {})
        return rows

    @property
    def _pace_rows(self) -> dict[str, datetime]:
        rows: dict[str, datetime] = self.__dict__.setdefault("_memory_pace", {})
        return rows

    async def acquire_lease(self, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
        held = self._lease_rows.get(name)
        if held is not None and held.holder != holder and held.until >= now:
            return False
        renewal = held is not None and held.holder == holder and held.until >= now
        since = held.since if renewal and held is not None else now
        self._lease_rows[name] = LeaseView(name, holder, now + ttl, since)
        return True

    async def release_lease(self, name: str, holder: str) -> None:
        held = self._lease_rows.get(name)
        if held is not None and held.holder == holder:
            del self._lease_rows[name]

    async def leases(self) -> list[LeaseView]:
        return [self._lease_rows[name] for name in sorted(self._lease_rows)]

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        held = self._pace_rows.get(key)
        slot = now if held is None else max(now, held)
        self._pace_rows[key] = slot + timedelta(seconds=interval)
        return slot

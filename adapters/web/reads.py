"""What the inbox reads, as the views every surface renders. It never writes the store: every
answer and claim goes through :meth:`~bot.domain.ports.Elicitations.act`."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlencode

from adapters.web.pages import Filters
from bot.domain.bounds import lookup_problem
from bot.domain.model import Elicitation
from bot.domain.ports import Clock, CopyPolicy, PromptView
from bot.domain.records import StoredElicitation
from bot.domain.store import ElicitationReads
from bot.domain.views import prompt_view

PAGE_LIMIT = 100
RECENT_SCAN = 300
"""Newest elicitations read for the history and the filter choices."""
SCAN_BATCH = 200
SCAN_LIMIT = 5000
"""Most rows read to fill one filtered page (filters run here, not in the store)."""
VERSION_CACHE_SECONDS = 0.25
VERSION_PENDING = 500


class Fingerprint:
    """What is pending (keys and versions) plus how many elicitations exist, as one short hash,
    shared by every open page and recomputed at most every :data:`VERSION_CACHE_SECONDS`."""

    def __init__(self, store: ElicitationReads) -> None:
        self.store = store
        self._value = ""
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        async with self._lock:  # pages polling together share one computation
            if time.monotonic() - self._at < VERSION_CACHE_SECONDS:
                return self._value
            pending = await self.store.list_elicitations(status="pending", limit=VERSION_PENDING)
            total = await self.store.count("elicitation")
            digest = hashlib.sha256(f"{total}\n".encode())
            for s in pending:
                digest.update(f"{s.elicitation.key}\x00{s.version}\n".encode())
            self._value = digest.hexdigest()[:16]
            self._at = time.monotonic()
            return self._value


class Reads:
    """The store's reads as the pages need them."""

    def __init__(
        self,
        store: ElicitationReads,
        clock: Clock,
        *,
        policy: Callable[[Elicitation], Awaitable[CopyPolicy]] | None = None,
    ) -> None:
        """``policy``: an elicitation's policy route (the service's), so a card offers
        approving options only where its route allows the web inbox and names who may still
        approve."""
        self.store = store
        self.clock = clock
        self.policy = policy
        self.fingerprint = Fingerprint(store)

    async def views(self, items: Sequence[StoredElicitation]) -> list[PromptView]:
        """Each elicitation as it stands now, with its schedule (one read for all timelines)."""
        if not items:
            return []
        timelines = await self.store.timelines([s.elicitation.key for s in items])
        now = self.clock.now()
        return [
            prompt_view(
                s,
                timelines.get(s.elicitation.key),
                link=f"/?{urlencode({'key': s.elicitation.key})}",  # the page of this one
                now=now,
                policy=None if self.policy is None else await self.policy(s.elicitation),
            )
            for s in items
        ]

    async def view(self, stored: StoredElicitation) -> PromptView:
        [view] = await self.views([stored])
        return view

    async def scan(
        self,
        status: str | None,
        filters: Filters,
        after: str | None,
        limit: int,
        cap: int = SCAN_LIMIT,
    ) -> tuple[list[StoredElicitation], str | None]:
        """Up to ``limit`` matches, newest first, and the next page's cursor (None: no more)."""
        found: list[StoredElicitation] = []
        cursor = after
        scanned = 0
        while scanned < cap:
            batch = await self.store.list_elicitations(
                status=status, after=cursor, limit=SCAN_BATCH
            )
            scanned += len(batch)
            for stored in batch:
                if filters.matches(stored.elicitation):
                    found.append(stored)
                    if len(found) == limit:
                        return found, stored.elicitation.key
            if len(batch) < SCAN_BATCH:
                return found, None
            cursor = batch[-1].elicitation.key
        return found, cursor

    async def one(self, ident: str) -> StoredElicitation | None:
        """``<source>:<id>`` or a bare source id."""
        if not ident or lookup_problem(ident) is not None:
            return None  # could name nothing: not asked of the store (a NUL would upset it)
        key = await self.store.resolve_key(ident)
        return await self.store.get(key) if key is not None else None

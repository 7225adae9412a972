"""The database out of reach, as HTTP clients and the log see it: ``503`` with ``Retry-After`` and a
problem+json body, counted; nothing was accepted, so the client retries. The log says once when the
outage starts and once when it ends, never a traceback per request.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Iterator

import psycopg
import structlog
from fastapi.responses import JSONResponse
from prometheus_client import Counter
from prometheus_client.registry import CollectorRegistry
from sqlalchemy.exc import DBAPIError

from bot.domain.errors import PROBLEM, problem_body
from bot.domain.store import Store

log = structlog.get_logger("elicitbot.http")

RETRY_AFTER_SECONDS = 5
PROBE_SECONDS = 1.0
CAUSE = "the database is not reachable"
_CONNECTION_SQLSTATES = ("08", "57P01", "57P02", "57P03")
"""connection_exception (class 08), admin_shutdown, crash_shutdown, cannot_connect_now."""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached (not that it refused a query)."""
    for e in _chain(exc):
        if isinstance(e, DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, psycopg.OperationalError):
            state = e.sqlstate
            if state is None or state.startswith(_CONNECTION_SQLSTATES):
                return True
    return False


_COUNTERS: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def _counter(registry: CollectorRegistry) -> Counter:
    """One counter per registry, however many apps are built on it."""
    if registry not in _COUNTERS:
        _COUNTERS[registry] = Counter(
            "elicitbot_store_unavailable",
            "Requests answered 503 because the database could not be reached",
            registry=registry,
        )
    return _COUNTERS[registry]


class StoreOutage:
    """One outage at a time: when it began, how many requests it refused."""

    def __init__(
        self,
        store: Store,
        registry: CollectorRegistry,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.monotonic = monotonic
        self.refused = _counter(registry)
        self.since: float | None = None
        self.count = 0
        self._probed_at = float("-inf")
        self._probe: asyncio.Task[None] | None = None

    def refuse(self, exc: BaseException, path: str | None) -> JSONResponse:
        """The 503 for a request the store's absence failed; logs the outage's start once."""
        self.refused.inc()
        self.count += 1
        if self.since is None:
            self.since = self.monotonic()
            log.warning("store.unreachable", error=f"{type(exc).__name__}: {exc}"[:300], path=path)
        body = problem_body(
            503, "Service Unavailable", f"{CAUSE.capitalize()}; nothing was accepted. Retry."
        )
        body["cause"] = CAUSE
        return JSONResponse(
            body,
            status_code=503,
            media_type=PROBLEM,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    def served(self) -> None:
        """A request went through: during an outage, look whether the store is back."""
        if self.since is None or self._probe is not None:
            return
        now = self.monotonic()
        if now - self._probed_at < PROBE_SECONDS:
            return
        self._probed_at = now
        self._probe = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        try:
            await self.store.ping()
        except Exception:  # still out: the next request that goes through looks again
            return
        finally:
            self._probe = None
        if self.since is not None:
            log.warning(
                "store.reachable",
                down_seconds=round(self.monotonic() - self.since, 1),
                refused=self.count,
            )
            self.since, self.count = None, 0

"""``/metrics`` on the work waiting in the database: each lane's backlog and oldest row, the oldest
write-back not delivered, and who holds each single-owner lease.

prometheus_client collects synchronously and the store is async: ``/metrics`` awaits
:meth:`StoreMetrics.refresh` and ``collect()`` renders that snapshot. A failed read sets
``elicitbot_store_up`` 0, so a dead database never looks like an empty backlog. The
``MAX_CHAT_LANES`` deepest chat lanes get their own series; the rest fold into ``lane="other"``
(rows summed, oldest kept, so an age alert still fires).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import structlog
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from bot.domain.lanes import SINK
from bot.domain.records import LaneView, LeaseView

log = structlog.get_logger("elicitbot.metrics")

MAX_CHAT_LANES = 50
"""Chat lanes with their own series; the rest are one ``lane="other"``."""
OTHER = "other"
"""The folded lanes' label (real lanes always start with ``chat:`` or ``sink:``)."""
NEVER = datetime.max.replace(tzinfo=UTC)
READ_TIMEOUT_SECONDS = 5.0
"""Under Prometheus' default 10 s scrape timeout: a hung database gives ``elicitbot_store_up 0``
and the process's other metrics, not a failed scrape."""


class Backlog(Protocol):
    """The two store reads the collector needs (``bot.domain.store.Store`` has both)."""

    async def lanes(self) -> list[LaneView]: ...

    async def leases(self) -> list[LeaseView]: ...


@dataclass(frozen=True)
class Snapshot:
    """One read of the store, and when it was taken (every age is measured from ``at``)."""

    at: datetime
    lanes: Sequence[LaneView]
    """Folded: sink lanes, the deepest chat lanes, then ``other``."""
    lane_count: dict[str, int]
    """Lanes with rows before folding, by kind (``chat``, ``sink``)."""
    leases: Sequence[LeaseView]


def fold(lanes: Iterable[LaneView], cap: int = MAX_CHAT_LANES) -> list[LaneView]:
    """Every sink lane, the ``cap`` deepest other lanes, and one ``other`` for the rest."""
    sinks: list[LaneView] = []
    chats: list[LaneView] = []
    for view in lanes:
        (sinks if view.lane.startswith(SINK) else chats).append(view)
    chats.sort(key=lambda v: (-(v.pending + v.claimed), v.oldest or NEVER, v.lane))
    kept, rest = chats[:cap], chats[cap:]
    if rest:
        oldest = [v.oldest for v in rest if v.oldest is not None]
        kept.append(
            LaneView(
                lane=OTHER,
                pending=sum(v.pending for v in rest),
                claimed=sum(v.claimed for v in rest),
                oldest=min(oldest) if oldest else None,
            )
        )
    return sorted(sinks, key=lambda v: v.lane) + kept


def _age(at: datetime, since: datetime | None) -> float:
    """Seconds from ``since`` to ``at``; 0 for none, and never negative (replicas' clocks drift)."""
    return 0.0 if since is None else max(0.0, (at - since).total_seconds())


class StoreMetrics(Collector):
    """The store-backed gauges; ``refresh()`` before each ``generate_latest``."""

    def __init__(
        self,
        store: Backlog,
        registry: CollectorRegistry | None = None,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_chat_lanes: int = MAX_CHAT_LANES,
    ) -> None:
        self.store = store
        self.now = now
        self.max_chat_lanes = max_chat_lanes
        self.snapshot: Snapshot | None = None
        if registry is not None:
            registry.register(self)

    async def refresh(self) -> None:
        """Read the store once; on any failure the next render says ``elicitbot_store_up 0``."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                lanes = await self.store.lanes()
                leases = await self.store.leases()
        except Exception as exc:  # any failure: a gauge says so, the scrape still succeeds
            log.warning("metrics.store_unreadable", error=repr(exc))
            self.snapshot = None
            return
        count = {"chat": 0, "sink": 0}
        for view in lanes:
            count["sink" if view.lane.startswith(SINK) else "chat"] += 1
        self.snapshot = Snapshot(
            at=self.now(),
            lanes=fold(lanes, self.max_chat_lanes),
            lane_count=count,
            leases=sorted(leases, key=lambda v: v.name),
        )

    def describe(self) -> Iterator[Metric]:
        """The families without samples: registering the same names twice on one registry fails."""
        return iter(_families(None))

    def collect(self) -> Iterator[Metric]:
        return iter(_families(self.snapshot))


def _families(snap: Snapshot | None) -> list[Metric]:
    up = GaugeMetricFamily(
        "elicitbot_store_up", "1 when this scrape read the lanes and leases from the store"
    )
    depth = GaugeMetricFamily(
        "elicitbot_lane_depth",
        "Outbox rows in a lane: pending (waiting, due or not) or claimed (in flight)",
        labels=["lane", "state"],
    )
    age = GaugeMetricFamily(
        "elicitbot_lane_oldest_age_seconds",
        "Age of the oldest unfinished row in a lane (since it was queued)",
        labels=["lane"],
    )
    count = GaugeMetricFamily(
        "elicitbot_lanes",
        f"Lanes with unfinished rows, by kind, before the deepest {MAX_CHAT_LANES} chat lanes "
        f"are kept and the rest folded into lane={OTHER!r}",
        labels=["kind"],
    )
    writeback = GaugeMetricFamily(
        "elicitbot_writeback_oldest_pending_age_seconds",
        "Age of the oldest write-back not yet delivered to its upstream system (0: none)",
    )
    holder = GaugeMetricFamily(
        "elicitbot_lease_holder",
        "1 for the replica holding a single-owner lease; 0 when its lease ran out unrenewed",
        labels=["name", "holder"],
    )
    expires = GaugeMetricFamily(
        "elicitbot_lease_expires_in_seconds",
        "Seconds until a lease runs out unless renewed (negative: it ran out, nobody took it)",
        labels=["name"],
    )
    held = GaugeMetricFamily(
        "elicitbot_lease_held_seconds",
        "Seconds the current holder has held a lease (resets when the lease moves)",
        labels=["name"],
    )
    families: list[Metric] = [up, depth, age, count, writeback, holder, expires, held]
    if snap is None:
        up.add_metric([], 0.0)
        return families
    up.add_metric([], 1.0)
    oldest_writeback: datetime | None = None
    for view in snap.lanes:
        depth.add_metric([view.lane, "pending"], float(view.pending))
        depth.add_metric([view.lane, "claimed"], float(view.claimed))
        age.add_metric([view.lane], _age(snap.at, view.oldest))
        if view.lane.startswith(SINK) and view.oldest is not None:
            oldest_writeback = min(oldest_writeback or view.oldest, view.oldest)
    for kind, n in snap.lane_count.items():
        count.add_metric([kind], float(n))
    writeback.add_metric([], _age(snap.at, oldest_writeback))
    for lease in snap.leases:
        holder.add_metric([lease.name, lease.holder], 1.0 if lease.until >= snap.at else 0.0)
        expires.add_metric([lease.name], (lease.until - snap.at).total_seconds())
        held.add_metric([lease.name], _age(snap.at, lease.since))
    return families


__all__ = ["MAX_CHAT_LANES", "OTHER", "Backlog", "Snapshot", "StoreMetrics", "fold"]

"""``/metrics`` on the work in the database: lane depth and age, the oldest pending write-back,
lease holders (``bot.app.metrics``).

The backlog figures come from real stores (SQLite, PostgreSQL) with rows queued through
the service; folding, a failed read and the scrape-time refresh use a small fake store, where
every figure is chosen by the test.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from adapters.sources.superpipeline.parse import parse_body
from bot.app.http import Runtime, create_app
from bot.app.metrics import MAX_CHAT_LANES, OTHER, StoreMetrics
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Attempt, ElicitationKey, Identity, People, Route
from bot.domain.records import LaneView, LeaseView
from bot.domain.store import Store
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeSink
from tests.unit.sources.superpipeline_fixtures import VALID

C1, C2 = "slack:C1", "slack:C2"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
T0 = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    s = SqlStore.from_url(db_url)
    try:
        yield s
    finally:
        await s.close()


def value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


async def take_in(service: Service, inbound_id: str) -> ElicitationKey:
    data = copy.deepcopy(VALID["options"])
    data["elicitationId"] = f"eli_{inbound_id}"
    e = parse_body(data, workspace="acme")
    [outcome] = await service.intake([Inbound("ce:/superpipeline/test", inbound_id, e, {})])
    assert outcome.result == "accepted", outcome
    return outcome.key


def rig(store: Store, clock: FakeClock) -> tuple[Service, Dispatcher]:
    dispatcher = Dispatcher(
        store, clock, {"slack": FakeChat("slack")}, {"superpipeline": FakeSink()}, "/#{}".format
    )
    people = People(principals={"slack:U0ALICE": "usr_alice"})
    return Service(store, clock, people, [Route(destinations=(C1, C2))]), dispatcher


# --------------------------------------------------------------------------- real stores


async def test_queued_posts_show_per_lane_depth_state_and_age(
    store: Store, clock: FakeClock
) -> None:
    service, _ = rig(store, clock)
    registry = CollectorRegistry()
    metrics = StoreMetrics(store, registry, now=clock.now)

    await take_in(service, "a1")
    clock.advance(30)
    await take_in(service, "a2")
    clock.advance(12)
    [held] = await store.claim_outbox(clock.now(), "replica-a", limit=1)
    await metrics.refresh()

    assert value(registry, "elicitbot_store_up") == 1
    for lane in (f"chat:{C1}", f"chat:{C2}"):
        claimed = 1 if held.lane == lane else 0
        assert value(registry, "elicitbot_lane_depth", lane=lane, state="pending") == 2 - claimed
        assert value(registry, "elicitbot_lane_depth", lane=lane, state="claimed") == claimed
        assert value(registry, "elicitbot_lane_oldest_age_seconds", lane=lane) == 42
    assert value(registry, "elicitbot_lanes", kind="chat") == 2
    assert value(registry, "elicitbot_lanes", kind="sink") == 0
    assert value(registry, "elicitbot_writeback_oldest_pending_age_seconds") == 0


async def test_an_answer_shows_its_pending_write_back_until_it_is_delivered(
    store: Store, clock: FakeClock
) -> None:
    service, dispatcher = rig(store, clock)
    registry = CollectorRegistry()
    metrics = StoreMetrics(store, registry, now=clock.now)
    key = await take_in(service, "b1")
    assert await dispatcher.drain() == 2  # both posts out: the chat lanes are empty again

    assert (
        await service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("allow_once",), via=C1)
        )
    ).won
    clock.advance(7.5)
    await metrics.refresh()

    assert value(registry, "elicitbot_writeback_oldest_pending_age_seconds") == 7.5
    sink = "sink:superpipeline"
    assert value(registry, "elicitbot_lane_depth", lane=sink, state="pending") == 1
    assert value(registry, "elicitbot_lane_oldest_age_seconds", lane=sink) == 7.5
    assert value(registry, "elicitbot_lanes", kind="sink") == 1

    await dispatcher.drain()
    await metrics.refresh()
    assert value(registry, "elicitbot_writeback_oldest_pending_age_seconds") == 0
    assert value(registry, "elicitbot_lane_depth", lane=sink, state="pending") is None
    assert value(registry, "elicitbot_lanes", kind="sink") == 0


async def test_a_lease_shows_its_holder_then_the_replica_it_moved_to(
    store: Store, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    metrics = StoreMetrics(store, registry, now=clock.now)
    ttl = timedelta(seconds=10)
    assert await store.acquire_lease("matrix", "replica-a", clock.now(), ttl)
    clock.advance(4)
    await metrics.refresh()
    assert value(registry, "elicitbot_lease_holder", name="matrix", holder="replica-a") == 1
    assert value(registry, "elicitbot_lease_expires_in_seconds", name="matrix") == 6
    assert value(registry, "elicitbot_lease_held_seconds", name="matrix") == 4

    clock.advance(11)  # replica-a died 15 s ago and never renewed
    await metrics.refresh()
    assert value(registry, "elicitbot_lease_holder", name="matrix", holder="replica-a") == 0
    assert value(registry, "elicitbot_lease_expires_in_seconds", name="matrix") == -5

    assert await store.acquire_lease("matrix", "replica-b", clock.now(), ttl)
    await metrics.refresh()
    assert value(registry, "elicitbot_lease_holder", name="matrix", holder="replica-b") == 1
    assert value(registry, "elicitbot_lease_holder", name="matrix", holder="replica-a") is None
    assert value(registry, "elicitbot_lease_held_seconds", name="matrix") == 0


# --------------------------------------------------------------------------- a fake store


@dataclass
class Backlog:
    """``lanes()`` and ``leases()`` as the test sets them; ``broken`` makes both raise."""

    lane_views: list[LaneView] = field(default_factory=list)
    lease_views: list[LeaseView] = field(default_factory=list)
    broken: bool = False
    reads: int = 0

    async def lanes(self) -> list[LaneView]:
        self.reads += 1
        if self.broken:
            raise ConnectionError("database is down")
        return list(self.lane_views)

    async def leases(self) -> list[LeaseView]:
        if self.broken:
            raise ConnectionError("database is down")
        return list(self.lease_views)


async def test_lanes_beyond_the_deepest_fold_into_other_and_keep_the_oldest_row() -> None:
    at = T0 + timedelta(hours=1)
    chats = [
        LaneView(
            f"chat:slack:C{n:03}", pending=100 + n, claimed=0, oldest=at - timedelta(seconds=n)
        )
        for n in range(MAX_CHAT_LANES)
    ]
    # Shallow but stuck for an hour: folded, yet its age must survive in "other".
    small = [
        LaneView("chat:slack:STUCK", pending=1, claimed=1, oldest=T0),
        LaneView("chat:slack:NEW", pending=3, claimed=0, oldest=at - timedelta(seconds=5)),
    ]
    sinks = [LaneView("sink:pinework", pending=1, claimed=0, oldest=at - timedelta(seconds=2))]
    registry = CollectorRegistry()
    metrics = StoreMetrics(Backlog(chats + small + sinks), registry, now=lambda: at)

    await metrics.refresh()

    lanes = {
        s.labels["lane"]
        for f in registry.collect()
        if f.name == "elicitbot_lane_depth"
        for s in f.samples
    }
    assert lanes == {v.lane for v in chats} | {OTHER, "sink:pinework"}
    assert value(registry, "elicitbot_lane_depth", lane=OTHER, state="pending") == 4
    assert value(registry, "elicitbot_lane_depth", lane=OTHER, state="claimed") == 1
    assert value(registry, "elicitbot_lane_oldest_age_seconds", lane=OTHER) == 3600
    assert value(registry, "elicitbot_lanes", kind="chat") == MAX_CHAT_LANES + 2
    assert value(registry, "elicitbot_writeback_oldest_pending_age_seconds") == 2


async def test_leases_show_their_holder_until_the_lease_runs_out() -> None:
    at = T0 + timedelta(minutes=5)
    store = Backlog(
        lease_views=[
            LeaseView("matrix", "replica-a", until=at + timedelta(seconds=8), since=T0),
            LeaseView("pinework:ws", "replica-b", until=at - timedelta(seconds=3), since=T0),
        ]
    )
    registry = CollectorRegistry()
    await StoreMetrics(store, registry, now=lambda: at).refresh()

    assert value(registry, "elicitbot_lease_holder", name="matrix", holder="replica-a") == 1
    assert value(registry, "elicitbot_lease_expires_in_seconds", name="matrix") == 8
    assert value(registry, "elicitbot_lease_held_seconds", name="matrix") == 300
    # Ran out, not renewed, nobody took it yet: the last holder is named, with 0.
    assert value(registry, "elicitbot_lease_holder", name="pinework:ws", holder="replica-b") == 0
    assert value(registry, "elicitbot_lease_expires_in_seconds", name="pinework:ws") == -3


async def test_a_failed_read_drops_every_figure_rather_than_show_old_ones() -> None:
    store = Backlog([LaneView("chat:slack:C1", pending=5, claimed=0, oldest=T0)])
    registry = CollectorRegistry()
    metrics = StoreMetrics(store, registry, now=lambda: T0)
    await metrics.refresh()
    assert value(registry, "elicitbot_lane_depth", lane="chat:slack:C1", state="pending") == 5

    store.broken = True
    await metrics.refresh()

    assert value(registry, "elicitbot_store_up") == 0
    assert value(registry, "elicitbot_lane_depth", lane="chat:slack:C1", state="pending") is None
    assert value(registry, "elicitbot_writeback_oldest_pending_age_seconds") is None

    store.broken = False
    await metrics.refresh()
    assert value(registry, "elicitbot_store_up") == 1


async def test_each_scrape_of_the_endpoint_reads_the_store_afresh() -> None:
    queued = datetime.now(UTC) - timedelta(seconds=60)
    store = Backlog([LaneView("sink:handup", pending=2, claimed=1, oldest=queued)])
    # The shell's /metrics needs only these two reads of the store.
    app = create_app(Runtime(store=store))  # type: ignore[arg-type]

    async def scrape() -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot") as http:
            response = await http.get("/metrics")
        assert response.status_code == 200
        return {
            f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
            for f in text_string_to_metric_families(response.text)
        }

    first = await scrape()
    assert first["elicitbot_lane_depth"][(("lane", "sink:handup"), ("state", "claimed"))] == 1
    assert 60 <= first["elicitbot_writeback_oldest_pending_age_seconds"][()] < 120

    store.lane_views = []
    second = await scrape()
    assert store.reads == 2
    assert second["elicitbot_lane_depth"] == {}
    assert second["elicitbot_writeback_oldest_pending_age_seconds"][()] == 0


def test_one_registry_cannot_take_the_store_gauges_twice() -> None:
    registry = CollectorRegistry()
    StoreMetrics(Backlog(), registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        StoreMetrics(Backlog(), registry)

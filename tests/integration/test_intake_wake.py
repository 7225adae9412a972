"""Intake wakes the dispatcher only when it may have queued an effect.

A new elicitation for the web inbox alone queues nothing (its copy is posted in the intake
transaction); waking the dispatcher for it cost a claim and a next-due query per event, a quarter
of the server's CPU under load. Everything that may queue an effect must still wake it.
"""

from __future__ import annotations

from bot.domain.model import People, Route
from bot.domain.store import Store
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.contract.test_store import SLACK, make

WEB_ONLY = Route()
SLACK_ROUTE = Route(destinations=(SLACK,))


async def wakes_of(store: Store, *intakes: Inbound) -> list[int]:
    """How many times each intake (in turn, on ``store``) woke the dispatcher."""
    wakes: list[int] = []
    service = Service(store, FakeClock(), People(), [], on_change=lambda: wakes.append(1))
    counts = []
    for inbound in intakes:
        before = len(wakes)
        await service.intake([inbound])
        counts.append(len(wakes) - before)
    return counts


def inbound(
    event_id: str, route: Route, *, expires: float | None = None, question: str = "Run it?"
) -> Inbound:
    e = make(FakeClock().now(), "eli_1", expires=expires, question=question)
    return Inbound("ce:/test", event_id, e, {}, route)


async def test_a_web_only_elicitation_wakes_nobody(sqlite_store: Store) -> None:
    assert await wakes_of(sqlite_store, inbound("ev-1", WEB_ONLY)) == [0]


async def test_a_chat_destination_wakes_the_dispatcher(sqlite_store: Store) -> None:
    assert await wakes_of(sqlite_store, inbound("ev-1", SLACK_ROUTE)) == [1]


async def test_expired_on_arrival_wakes_it_for_the_write_back(sqlite_store: Store) -> None:
    assert await wakes_of(sqlite_store, inbound("ev-1", WEB_ONLY, expires=-1)) == [1]


async def test_a_revision_wakes_it_and_a_duplicate_or_a_repeat_does_not(
    sqlite_store: Store,
) -> None:
    first = inbound("ev-1", WEB_ONLY)
    revised = inbound("ev-2", WEB_ONLY, question="Changed?")
    repeated = inbound("ev-3", WEB_ONLY, question="Changed?")  # unchanged since the revision

    assert await wakes_of(sqlite_store, first, revised, first, repeated) == [0, 1, 0, 0]

""":class:`adapters.slack.intake.durable.Durable` on its own, on SQLite and PostgreSQL: what is
marked handled when, what stays open for a replay, and what a replay round does (no Bolt, no
listener: ``handle`` stands for the listeners' path)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.slack.intake.durable import KEEP_HANDLED, Durable, NotRecordedError
from adapters.slack.intake.trims import RAW_CHANNEL
from bot.domain.records import RawEvent
from store.sql import SqlStore
from tests.conftest import FakeClock


def click(trigger: str) -> dict[str, Any]:
    return {"type": "block_actions", "trigger_id": trigger, "actions": [{"action_id": "x"}]}


class Handled:
    """The replay path: what it was handed, in order."""

    def __init__(self) -> None:
        self.events: list[RawEvent] = []

    async def __call__(self, event: RawEvent) -> None:
        self.events.append(event)


async def open_ids(store: SqlStore) -> list[int]:
    return [r.id for r in await store.open_raw(RAW_CHANNEL)]


async def test_a_record_is_made_once_and_never_acked_unrecorded(
    store: SqlStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    durable = Durable(store, clock, Handled())
    handle, raw_id = await durable.record(click("1.a"))
    assert handle
    assert raw_id is not None
    assert await durable.record(click("1.a")) == (False, None), "a redelivery is not handled"

    async def down(*_: object) -> int:
        raise ConnectionError("secret=hunter2 in the statement")

    monkeypatch.setattr(store, "record_raw", down)
    with pytest.raises(NotRecordedError):
        await durable.record(click("2.a"))


async def test_a_failed_handling_is_marked_and_a_cancelled_one_is_left_for_a_replay(
    store: SqlStore, clock: FakeClock
) -> None:
    handled = Handled()
    durable = Durable(store, clock, handled)
    _, failed = await durable.record(click("1.a"))
    _, killed = await durable.record(click("2.a"))

    async def fails() -> None:
        raise RuntimeError("the core broke")

    await durable.guard(fails(), "click", sensitive=False, raw_id=failed)
    assert await open_ids(store) == [killed], "a failure is marked: a replay would fail alike"

    stuck = asyncio.Event()

    async def waits() -> None:
        await stuck.wait()

    task = asyncio.create_task(durable.guard(waits(), "click", False, raw_id=killed))
    await asyncio.sleep(0)
    assert await durable.replay(before=clock.advance(3600)) == 0, "in hand here: left alone"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await open_ids(store) == [killed], "cancelled (a stop, a kill): still open"

    again = Durable(store, clock, handled)  # the next process
    assert await again.replay(before=clock.advance(1)) == 1
    assert [e.id for e in handled.events] == [killed]
    assert await open_ids(store) == []


async def test_settle_marks_the_record_as_soon_as_the_core_has_the_action(
    store: SqlStore, clock: FakeClock
) -> None:
    durable = Durable(store, clock, Handled())
    _, raw_id = await durable.record(click("1.a"))
    noted = asyncio.Event()
    seen_open: list[list[int]] = []

    async def work() -> None:
        await durable.settle()  # act() returned
        seen_open.append(await open_ids(store))
        await noted.wait()  # the thread note, which a kill interrupts

    task = asyncio.create_task(durable.guard(work(), "click", False, raw_id=raw_id))
    await asyncio.sleep(0.05)
    assert seen_open == [[]], "marked before the thread note"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await durable.replay(before=clock.advance(3600)) == 0, "nothing to act on again"


async def test_a_round_replays_a_predecessors_records_at_once_and_purges_old_ones(
    store: SqlStore, clock: FakeClock
) -> None:
    old = await store.record_raw(RAW_CHANNEL, "action:old", click("0.a"), clock.now())
    assert old is not None
    await store.handled_raw(old, clock.now())
    clock.advance(KEEP_HANDLED.total_seconds() + 1)
    predecessor = await store.record_raw(RAW_CHANNEL, "action:1.a", click("1.a"), clock.now())
    clock.advance(1)
    stop = asyncio.Event()

    async def handle(event: RawEvent) -> None:
        handled.events.append(event)
        stop.set()

    handled = Handled()
    durable = Durable(store, clock, handle)
    await asyncio.wait_for(durable.run_replays(stop, ours=True, every=0.01), 5)

    assert [e.id for e in handled.events] == [predecessor], "one process owns SQLite: at once"
    assert await open_ids(store) == []
    assert await store.record_raw(RAW_CHANNEL, "action:old", {}, clock.now()) is not None, (
        "purged with its dedupe key"
    )

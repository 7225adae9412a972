"""A thread note gives way to a question another replica has claimed in the same channel (real
time, short rates; the store's claims and shared slots in memory).

With replicas on one database a note used to give way only to the questions queued in its own
process: replica B's note took the channel's shared slot while replica A's claimed question was
still on its way to its Pacer, and the busy channel lost that turn (bench/effects.py
``--replicas 3``). The note now asks the store whether the channel has a question claimed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from adapters.slack.api.pacing import Pacer, Rate
from bot.domain.errors import TransientDeliveryError

CHANNEL = "C0BUSY"
KEY = ("chat.postMessage", CHANNEL)
LANE = f"chat:slack:{CHANNEL}"
RATE = Rate(per_second=10.0, burst=1, margin=0.0)  # one call every 0.1 s


class Store:
    """The shared slots and which lanes have a question claimed, as every replica sees them."""

    def __init__(self) -> None:
        self.not_before: dict[str, datetime] = {}
        self.claimed: set[str] = set()
        self.asked: list[str] = []

    async def question_claimed(self, lane: str, now: datetime) -> bool:
        self.asked.append(lane)
        return lane in self.claimed

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        at = max(now, self.not_before.get(key, now))
        self.not_before[key] = at + timedelta(seconds=interval)
        return at


def replica(store: Store, max_wait: float = 15.0) -> Pacer:
    return Pacer({"chat.postMessage": RATE}, max_wait=max_wait, slots=store)


class Sent:
    def __init__(self) -> None:
        self.order: list[str] = []

    def call(self, name: str) -> Callable[[], Awaitable[str]]:
        async def send() -> str:
            self.order.append(name)
            return name

        return send


async def test_a_note_waits_for_a_question_claimed_by_another_replica() -> None:
    store, sent = Store(), Sent()
    a, b = replica(store), replica(store)
    store.claimed.add(LANE)  # replica A claimed the channel's next question; not sent yet

    note = asyncio.create_task(b.send(KEY, sent.call("note"), gives_way=True))
    await asyncio.sleep(0.35)  # several of the channel's turns: B's own queue is empty
    assert sent.order == [], "the note did not take the turn of A's claimed question"

    question = await a.send(KEY, sent.call("question"))  # A's question reaches its Pacer
    store.claimed.discard(LANE)  # ... and is done: nothing of the channel is claimed
    started = time.monotonic()
    await note

    print("channel, in order:", " ".join(sent.order))
    assert question == "question"
    assert sent.order == ["question", "note"]
    assert time.monotonic() - started < RATE.interval * 3, "then the note goes at its turn"
    assert LANE in store.asked


async def test_a_note_behind_another_replica_s_backlog_is_handed_back_unsent() -> None:
    store, sent = Store(), Sent()
    store.claimed.add(LANE)  # a busy channel: a question is always claimed somewhere
    with pytest.raises(TransientDeliveryError) as raised:
        await replica(store, max_wait=0.3).send(KEY, sent.call("note"), gives_way=True)
    assert raised.value.retry_after is not None
    assert sent.order == []


async def test_other_keys_do_not_ask_the_store() -> None:
    store, sent = Store(), Sent()
    store.claimed.add(LANE)
    pacer = Pacer({"chat.update": RATE}, slots=store)
    assert await pacer.send(("chat.update", "T0ACME"), sent.call("u"), gives_way=True) == "u"
    assert store.asked == []

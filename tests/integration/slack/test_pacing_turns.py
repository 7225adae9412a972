"""Whose turn it is on a paced Slack key: a thread note gives way to the channel's questions,
and the shared slot is taken while the local wait runs, not after it (real time, short rates).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from adapters.slack.api.pacing import Pacer, Rate
from bot.domain.errors import TransientDeliveryError

KEY = ("chat.postMessage", "C0BUSY")
RATE = Rate(per_second=10.0, burst=1, margin=0.0)  # one call every 0.1 s


def pacer(max_wait: float = 15.0, slots: SlowSlots | None = None) -> Pacer:
    return Pacer({"chat.postMessage": RATE}, max_wait=max_wait, slots=slots)


class Sent:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.at: list[float] = []

    def call(self, name: str) -> Callable[[], Awaitable[str]]:
        async def send() -> str:
            self.order.append(name)
            self.at.append(time.monotonic())
            return name

        return send


async def test_a_note_gives_way_to_questions_that_come_while_it_waits() -> None:
    p, sent = pacer(), Sent()
    first = asyncio.create_task(p.send(KEY, sent.call("q1")))
    await asyncio.sleep(0.01)
    note = asyncio.create_task(p.send(KEY, sent.call("note"), gives_way=True))
    await asyncio.sleep(0.03)  # the note waits for the key's rate; two questions come
    questions = [asyncio.create_task(p.send(KEY, sent.call(f"q{n}"))) for n in (2, 3)]
    await asyncio.gather(first, note, *questions)
    # What the channel shows, in order: before this change the note took the second turn
    # (q1, note, q2, q3), holding both questions back a second; now every question first.
    print("channel, in order:", " ".join(sent.order))
    assert sent.order == ["q1", "q2", "q3", "note"]
    gaps = [b - a for a, b in zip(sent.at, sent.at[1:], strict=False)]
    assert min(gaps) >= RATE.interval - 0.01, "the rate holds for the note too"
    assert sent.at[1] - sent.at[0] < RATE.interval + 0.05, "q2 lost no turn to the note"


async def test_a_note_in_a_quiet_channel_goes_at_its_turn() -> None:
    p, sent = pacer(), Sent()
    started = time.monotonic()
    assert await p.send(KEY, sent.call("note"), gives_way=True) == "note"
    assert sent.at[0] - started < 0.05


async def test_a_note_that_finds_no_gap_within_max_wait_is_handed_back_unsent() -> None:
    p, sent = pacer(max_wait=0.25), Sent()
    questions = [asyncio.create_task(p.send(KEY, sent.call(f"q{n}"))) for n in range(3)]
    await asyncio.sleep(0)  # three questions: the key is wanted until after the note's wait
    with pytest.raises(TransientDeliveryError) as raised:
        await p.send(KEY, sent.call("note"), gives_way=True)
    assert raised.value.retry_after is not None
    assert raised.value.retry_after > 0
    await asyncio.gather(*questions)
    assert sent.order == [f"q{n}" for n in range(3)], "every question, and no note"
    assert p.stats.deferred == 1


class SlowSlots:
    """Shared reservations a round trip away (``delay`` seconds each), as a loaded store."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.not_before: dict[str, datetime] = {}

    async def question_claimed(self, lane: str, now: datetime) -> bool:
        return False

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        await asyncio.sleep(self.delay)
        at = max(now, self.not_before.get(key, now))
        self.not_before[key] = at + timedelta(seconds=interval)
        return at


async def test_the_shared_slot_s_round_trip_overlaps_the_local_wait() -> None:
    """Back-to-back posts on a shared key go one interval apart, not one interval plus the
    store's round trip: the slot is reserved for the moment the local turn comes."""
    p, sent = pacer(slots=SlowSlots(delay=0.04)), Sent()
    await asyncio.gather(*(p.send(KEY, sent.call(f"q{n}")) for n in range(6)))
    gaps = [b - a for a, b in zip(sent.at, sent.at[1:], strict=False)]
    assert min(gaps) >= RATE.interval - 0.01
    assert sum(gaps) / len(gaps) < RATE.interval + 0.02, gaps


async def test_a_call_answered_late_pushes_the_next_one_past_its_answer() -> None:
    """A call that reached Slack late (its answer took 0.15 s: a starved loop, a cold
    connection) must not let the next one arrive less than the bare interval after it: the
    next goes no sooner than one interval (less the margin) after that answer came back."""
    p, sent = pacer(), Sent()
    answered: list[float] = []

    async def slow() -> str:
        sent.order.append("slow")
        sent.at.append(time.monotonic())
        await asyncio.sleep(0.15)
        answered.append(time.monotonic())
        return "slow"

    await asyncio.gather(p.send(KEY, slow), p.send(KEY, sent.call("next")))
    assert sent.order == ["slow", "next"]
    assert sent.at[1] - answered[0] >= RATE.interval - RATE.margin - 0.005
    print(f"answered {answered[0] - sent.at[0]:.3f} s, next sent {sent.at[1] - sent.at[0]:.3f} s")

"""Calls the Pacer hands back to the outbox come back one turn apart, not all at once.

A backlog of updates against the workspace's chat.update budget (a reminder refreshes every
copy it reminds) used to be handed back with the same wait each: every one of them was claimed,
rendered and handed back again every ``max_wait`` seconds, about 25 outbox retries a second in
bench/deadlines.py while 1 update a second could go. Each is now promised its own later turn.
"""

from __future__ import annotations

import pytest

from adapters.slack.api.pacing import Pacer, Rate
from bot.domain.errors import TransientDeliveryError

KEY = ("chat.update", "T0ACME")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def never_sent() -> None:
    raise AssertionError("a handed-back call is not sent")


async def handed_back(pacer: Pacer) -> float:
    with pytest.raises(TransientDeliveryError) as raised:
        await pacer.send(KEY, never_sent)
    assert raised.value.retry_after is not None
    return raised.value.retry_after


async def test_calls_handed_back_together_come_back_one_interval_apart() -> None:
    clock = Clock()
    rate = Rate(per_second=1.0, margin=0.0)
    pacer = Pacer({"chat.update": rate}, max_wait=15.0, monotonic=clock, jitter=lambda: 0.0)
    pacer.block(KEY, 20.0)  # nothing on the key for 20 s: every call now is handed back

    waits = [await handed_back(pacer) for _ in range(4)]

    assert waits == pytest.approx([20.0, 21.0, 22.0, 23.0])
    assert pacer.stats.deferred == 4


async def test_a_hand_back_long_after_the_last_one_waits_only_its_own_turn() -> None:
    clock = Clock()
    pacer = Pacer(
        {"chat.update": Rate(per_second=1.0, margin=0.0)},
        max_wait=15.0,
        monotonic=clock,
        jitter=lambda: 0.0,
    )
    pacer.block(KEY, 20.0)
    assert await handed_back(pacer) == pytest.approx(20.0)

    clock.now += 60.0  # the promised turn is long past
    pacer.block(KEY, 30.0)

    assert await handed_back(pacer) == pytest.approx(30.0)

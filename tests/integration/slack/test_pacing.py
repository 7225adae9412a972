"""Slack pacing end to end: posts paced per channel, a 429 storm, long ``Retry-After``s, coalesced
updates, clicks acked fast during a storm, and replicas sharing one rate through shared slots."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime, timedelta

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.api.pacing import Pacer, Rate, slot_name
from adapters.slack.chat import SlackChat
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import (
    Destination,
    Status,
)
from bot.domain.ports import PromptView
from tests.integration.slack.rig import (
    BOB,
    C1,
    C2,
    Rig,
    button,
    has_actions,
)
from tests.slack_fake import FakeSlack, SlackCall
from tests.unit.domain.builders import elicitation

# --------------------------------------------------------------------------- pacing, 429


class MemorySlots:
    """The store's shared reservations (:class:`~bot.domain.store.Pacing`), in memory: what
    every replica's pacer asks before it sends on a paced key."""

    def __init__(self) -> None:
        self.not_before: dict[str, datetime] = {}
        self.reserved: list[tuple[str, float]] = []

    async def question_claimed(self, lane: str, now: datetime) -> bool:
        return False

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        at = max(now, self.not_before.get(key, now))
        self.not_before[key] = at + timedelta(seconds=interval)
        self.reserved.append((key, interval))
        return at


def chat_with(fake: FakeSlack, pacer: Pacer, slots: MemorySlots | None = None) -> SlackChat:
    return SlackChat(
        AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]),
        pacer=pacer,
        slots=slots,
    )


def pview(title: str = "Deploy?") -> PromptView:
    from tests.unit.domain.builders import NOW

    e = elicitation(title=title)
    return PromptView(
        elicitation=e, status=Status.PENDING, answer=None, version=1, link="", now=NOW
    )


def gaps(calls: list[SlackCall]) -> list[float]:
    times = [c.at for c in calls]
    return [b - a for a, b in itertools.pairwise(times)]


async def test_posts_are_paced_per_channel_not_across_channels(fake: FakeSlack) -> None:
    chat = chat_with(fake, Pacer({"chat.postMessage": Rate(5.0, 1)}))
    started = time.monotonic()

    await asyncio.gather(
        *(
            chat.post(
                Destination(f"slack:{channel}"),
                pview(),
                idempotency_key=f"{channel}-{i}",
                uncertain=None,
            )
            for i in range(4)
            for channel in (C1, C2)
        )
    )

    elapsed = time.monotonic() - started
    for channel in (C1, C2):
        posts = [c for c in fake.calls_to("chat.postMessage") if c.params["channel"] == channel]
        assert len(posts) == 4
        assert min(gaps(posts)) >= 0.18, gaps(posts)
    assert 0.55 <= elapsed < 1.2, "channels do not wait for each other"


@pytest.mark.slow
async def test_a_429_storm_sends_one_request_per_window_per_key_and_loses_nothing(
    fake: FakeSlack,
) -> None:
    pacer = Pacer({"chat.postMessage": Rate(50.0, 5)}, jitter=lambda: 0.05)
    chat = chat_with(fake, pacer)
    fake.storm("chat.postMessage", 2.5, retry_after=1)

    async def post_until_taken(channel: str, i: int) -> None:
        """What the outbox does with a transient failure: try again after retry_after."""
        while True:
            try:
                await chat.post(
                    Destination(f"slack:{channel}"),
                    pview(),
                    idempotency_key=f"{channel}-{i}",
                    uncertain=None,
                )
            except TransientDeliveryError as exc:
                await asyncio.sleep(exc.retry_after or 1.0)
            else:
                return

    await asyncio.gather(*(post_until_taken(ch, i) for i in range(5) for ch in (C1, C2)))

    for channel in (C1, C2):
        calls = [c for c in fake.calls_to("chat.postMessage") if c.params["channel"] == channel]
        limited = [c for c in calls if c.status == 429]
        assert len([m for m in fake.messages(channel) if "thread_ts" not in m]) == 5, "none lost"
        assert 2 <= len(limited) <= 4, [c.status for c in calls]
        for call in limited:
            after = [c for c in calls if c.at > call.at]
            if after:
                assert after[0].at - call.at >= 1.0, "a request inside the Retry-After window"
        assert len(calls) <= 5 + len(limited), "no busy loop"
    assert pacer.stats.rate_limited >= 4


async def test_a_long_retry_after_defers_without_sending(fake: FakeSlack) -> None:
    chat = chat_with(fake, Pacer())
    fake.script("chat.postMessage", status=429, retry_after=30)

    with pytest.raises(TransientDeliveryError) as first:
        await chat.post(Destination(f"slack:{C1}"), pview(), idempotency_key="k1", uncertain=None)
    with pytest.raises(TransientDeliveryError) as second:
        await chat.post(Destination(f"slack:{C1}"), pview(), idempotency_key="k2", uncertain=None)
    await chat.post(Destination(f"slack:{C2}"), pview(), idempotency_key="k3", uncertain=None)

    assert 30 <= (first.value.retry_after or 0) < 31
    assert 29 <= (second.value.retry_after or 0) <= 31
    assert [(c.params["channel"], c.status) for c in fake.calls_to("chat.postMessage")] == [
        (C1, 429),
        (C2, 200),
    ], "the second post to C1 was never sent; C2 is not held up"


@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared-slots"])
async def test_pending_updates_of_one_message_are_coalesced(fake: FakeSlack, shared: bool) -> None:
    """Also with shared slots: a newer update replaces one waiting for its slot."""
    chat = chat_with(fake, Pacer({"chat.update": Rate(2.0, 1)}), MemorySlots() if shared else None)
    ref = await chat.post(Destination(f"slack:{C1}"), pview(), idempotency_key="k", uncertain=None)

    await asyncio.gather(
        *(
            chat.update(
                Destination(f"slack:{C1}"), ref, pview(f"Revision {i}"), idempotency_key=f"u{i}"
            )
            for i in range(6)
        )
    )

    updates = fake.calls_to("chat.update")
    assert len(updates) == 2, "the first, then the newest of the five that waited"
    final = fake.message(C1, ref.ts)
    assert final is not None
    assert final["blocks"][0]["text"]["text"] == "Revision 5"


@pytest.mark.slow
async def test_clicks_are_acked_fast_during_a_429_storm_and_the_answer_goes_through(
    rig: Rig,
) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    for method in ("chat.update", "chat.postMessage", "chat.postEphemeral"):
        rig.fake.storm(method, 2.0, retry_after=1)

    started = time.monotonic()
    response = await rig.click(message, button(message, "deny"))
    acked = time.monotonic() - started
    await asyncio.sleep(0.1)  # Alice's answer is recorded (the storm holds up only Slack calls)
    await rig.click(message, button(message, "deny"), user=BOB)
    await rig.drain()

    assert response.status_code == 200
    assert acked < 0.5
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert not has_actions(rewritten)
    assert len(rig.thread(message)) == 1
    [told] = rig.ephemerals(BOB)
    assert told["text"].startswith("Already answered by u0alice (Deny)")


# --------------------------------------------------------------------------- replicas


REPLICA_RATE = Rate(4.0, 1)
"""Each replica's own pace (0.26 s apart), a little inside the fake's 5 a second per channel."""


def replicas(fake: FakeSlack, slots: MemorySlots | None) -> list[SlackChat]:
    """Two processes' SlackChats: each its own pacer, both posting to the fake."""
    return [chat_with(fake, Pacer({"chat.postMessage": REPLICA_RATE}), slots) for _ in range(2)]


async def post_all(chats: list[SlackChat], per_chat: int) -> None:
    await asyncio.gather(
        *(
            chat.post(
                Destination(f"slack:{C1}"), pview(), idempotency_key=f"r{n}-{i}", uncertain=None
            )
            for n, chat in enumerate(chats)
            for i in range(per_chat)
        )
    )


@pytest.mark.slow
async def test_two_replicas_sharing_slots_keep_to_one_channels_rate(fake: FakeSlack) -> None:
    fake.limit("chat.postMessage", per_second=5.0, burst=1)
    slots = MemorySlots()
    chats = replicas(fake, slots)

    await post_all(chats, 5)

    posts = fake.calls_to("chat.postMessage")
    assert [c.status for c in posts] == [200] * 10, "the fake saw no more than its rate"
    assert min(gaps(posts)) >= 0.2, gaps(posts)
    assert len(fake.messages(C1)) == 10
    assert {key for key, _ in slots.reserved} == {slot_name(("chat.postMessage", C1))}
    assert {interval for _, interval in slots.reserved} == {REPLICA_RATE.interval}
    assert all(chat.pacer is not None and chat.pacer.stats.rate_limited == 0 for chat in chats)


@pytest.mark.slow
async def test_two_replicas_alone_go_over_the_channels_rate(fake: FakeSlack) -> None:
    """The same two replicas without shared slots: each keeps its own pace, together they are
    twice as fast, and the fake answers 429 (why the slots are there)."""
    fake.limit("chat.postMessage", per_second=5.0, burst=1)

    await post_all(replicas(fake, None), 2)

    statuses = [c.status for c in fake.calls_to("chat.postMessage")]
    assert 429 in statuses
    assert len(fake.messages(C1)) == 4, "retried after Retry-After, nothing lost"


async def test_shared_slots_space_a_workspaces_updates_across_pacers() -> None:
    """The chat.update budget is per workspace: two pacers' updates on one team leave one
    interval apart, with no burst across replicas (the local burst of 3 is each one's own)."""
    slots = MemorySlots()
    rate = Rate(10.0, 3)
    pacers = [Pacer({"chat.update": rate}, slots=slots) for _ in range(2)]
    sent: list[float] = []

    async def update() -> None:
        sent.append(time.monotonic())

    await asyncio.gather(
        *(pacer.send(("chat.update", "T0ACME"), update) for pacer in pacers for _ in range(3))
    )

    assert len(sent) == 6
    assert min(b - a for a, b in itertools.pairwise(sorted(sent))) >= rate.interval - 0.01
    assert {key for key, _ in slots.reserved} == {"slack:chat.update:T0ACME"}


async def test_calls_without_a_rate_take_no_shared_slot() -> None:
    slots = MemorySlots()
    pacer = Pacer(slots=slots)

    async def call() -> str:
        return "ok"

    assert await pacer.send(("conversations.history", "T0ACME"), call) == "ok"
    assert slots.reserved == []

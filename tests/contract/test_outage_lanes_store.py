"""Lanes after a failure, on every store (issue 26): a Slack channel's post waiting for its retry
holds the channel's later posts (they go in the order they came), a sink that is down is probed
one write-back at a time and is up again at the first that goes through, and the next due time
says when something can really be claimed (no spinning on rows that wait behind another)."""

from __future__ import annotations

from datetime import timedelta

from bot.domain import lanes
from bot.domain.records import EffectKind
from bot.domain.refs import SlackRef
from bot.domain.store import Store
from tests.conftest import FakeClock
from tests.contract.test_lanes_store import queue
from tests.contract.test_store import answer

CHANNEL = "slack:C0ORDER"


async def test_a_retrying_post_holds_its_channels_later_posts(
    store: Store, clock: FakeClock
) -> None:
    keys = await queue(store, clock, 3, CHANNEL, "o")
    [head] = await store.claim_outbox(clock.now(), "w")
    assert head.elicitation_key == keys[0]
    await store.set_pace(lanes.pace_key(head.lane), clock.now() + timedelta(seconds=1))
    retry_at = clock.now() + timedelta(seconds=2)
    await store.retry_outbox(head, "w", "slack is down", retry_at)

    clock.advance(1.5)  # past the pace, before the retry: the later posts wait
    assert await store.claim_outbox(clock.now(), "w") == []
    assert await store.next_outbox_at() == retry_at, "the head's retry, not the held posts"

    clock.advance(0.5)
    [again] = await store.claim_outbox(clock.now(), "w")
    assert again.elicitation_key == keys[0], "the head first, though the others were due first"
    assert await store.complete_outbox(again, "w", clock.now(), ref=SlackRef("C0ORDER", "1.1"))
    [second] = await store.claim_outbox(clock.now(), "w")
    assert second.elicitation_key == keys[1]


async def test_a_sink_that_is_down_is_probed_one_write_back_at_a_time(
    store: Store, clock: FakeClock
) -> None:
    keys = await queue(store, clock, 4, CHANNEL, "s")
    for _ in keys:  # every post made, so only the write-backs are left
        [post] = await store.claim_outbox(clock.now(), "w")
        assert await store.complete_outbox(post, "w", clock.now(), ref=SlackRef("C0ORDER", "2"))
    for key in keys:
        won = await store.record_answer(
            key, answer("slack:U0ALICE", clock.now()), clock.now(), approving=True, audit={}
        )
        assert won.won
    writebacks = [
        i
        for i in await store.claim_outbox(clock.now(), "w", limit=20)
        if i.kind is EffectKind.WRITEBACK
    ]
    assert len(writebacks) == 4, "a sink that is up takes several at once"
    probe_at = clock.now() + timedelta(seconds=3)
    for wb in writebacks:
        await store.retry_outbox(wb, "w", "HTTP 503", clock.now() + timedelta(seconds=1))
    await store.set_pace(lanes.down_key(writebacks[0].lane), probe_at)

    clock.advance(1)  # every row's own retry is due, but the sink is probed no sooner
    held = await store.claim_outbox(clock.now(), "w", limit=20)
    assert [i for i in held if i.kind is EffectKind.WRITEBACK] == []
    assert await store.next_outbox_at() == probe_at
    clock.advance(2)
    probe = await store.claim_outbox(clock.now(), "w", limit=20)
    assert [i.kind for i in probe] == [EffectKind.WRITEBACK], "one at a time while it is down"
    assert await store.claim_outbox(clock.now(), "w", limit=20) == []

    assert await store.complete_outbox(probe[0], "w", clock.now())  # it went through: up
    rest = await store.claim_outbox(clock.now(), "w", limit=20)
    assert [i.kind for i in rest].count(EffectKind.WRITEBACK) == 3, "the rest at once"

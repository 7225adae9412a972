"""Whether a channel has a question claimed by any owner, or due to be claimed (what a thread
note gives way to across replicas: :meth:`adapters.slack.api.pacing.Pacer.send` with
``gives_way``)."""

from __future__ import annotations

from bot.domain.records import EffectKind
from bot.domain.store import Store
from tests.conftest import FakeClock
from tests.contract.test_lanes_store import BUSY, CALM, queue

BUSY_LANE = f"chat:{BUSY}"
CALM_LANE = f"chat:{CALM}"


async def test_a_claimed_or_due_post_counts_until_done(store: Store, clock: FakeClock) -> None:
    await queue(store, clock, 2, BUSY, "b")
    await queue(store, clock, 1, CALM, "c")
    assert await store.question_claimed(BUSY_LANE, clock.now()), "due, about to be claimed"
    assert not await store.question_claimed("chat:slack:C0QUIET", clock.now())

    claimed = await store.claim_outbox(clock.now(), "owner-a", limit=20)
    posts = {i.lane: i for i in claimed if i.kind is EffectKind.POST}
    assert set(posts) == {BUSY_LANE, CALM_LANE}
    assert await store.question_claimed(BUSY_LANE, clock.now()), "another owner's claim counts"

    await store.complete_outbox(posts[CALM_LANE], "owner-a", clock.now())
    assert not await store.question_claimed(CALM_LANE, clock.now()), "done, none left"

    await store.complete_outbox(posts[BUSY_LANE], "owner-a", clock.now())
    assert await store.question_claimed(BUSY_LANE, clock.now()), "the busy lane's next is due"
    again = await store.claim_outbox(clock.now(), "owner-b", limit=20)
    assert [i.lane for i in again if i.kind is EffectKind.POST] == [BUSY_LANE]
    clock.advance(60)  # owner-b died: its claim ran out, and its post is due to be taken again
    assert await store.question_claimed(BUSY_LANE, clock.now())

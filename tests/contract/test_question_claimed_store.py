"""Whether a channel has a question claimed, by any owner (what a thread note gives way to
across replicas: :meth:`adapters.slack.pacing.Pacer.send` with ``gives_way``)."""

from __future__ import annotations

from bot.domain.records import EffectKind
from bot.domain.store import Store
from tests.conftest import FakeClock
from tests.contract.test_lanes_store import BUSY, CALM, queue

BUSY_LANE = f"chat:{BUSY}"
CALM_LANE = f"chat:{CALM}"


async def test_a_claimed_post_counts_until_done_or_its_lease_runs_out(
    store: Store, clock: FakeClock
) -> None:
    await queue(store, clock, 2, BUSY, "b")
    await queue(store, clock, 1, CALM, "c")
    assert not await store.question_claimed(BUSY_LANE, clock.now()), "pending is not claimed"

    claimed = await store.claim_outbox(clock.now(), "owner-a", limit=20)
    posts = {i.lane: i for i in claimed if i.kind is EffectKind.POST}
    assert set(posts) == {BUSY_LANE, CALM_LANE}
    assert await store.question_claimed(BUSY_LANE, clock.now()), "another owner's claim counts"

    await store.complete_outbox(posts[CALM_LANE], "owner-a", clock.now())
    assert not await store.question_claimed(CALM_LANE, clock.now()), "done is not claimed"

    clock.advance(60)  # owner-a died: its claim ran out
    assert not await store.question_claimed(BUSY_LANE, clock.now())

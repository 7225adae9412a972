"""Lanes in the store: every store claims the outbox lane by lane, the same way.

A channel has at most one post and two effects in flight in the whole deployment (claims of every
owner count), a sink has eight; a channel's next post is claimed the moment the one before it is
done, ahead of its pace (it waits for its slot in the adapter), and is not one the channel could
make now until the pace comes, so the lane's updates go out meanwhile; lanes are served
round-robin, so one deep lane never crowds out the others; a heartbeat keeps an owner's
claims, and a claim nobody renews runs out in seconds.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from bot.domain import lanes
from bot.domain.model import ElicitationKey, Route
from bot.domain.records import EffectKind
from bot.domain.refs import MatrixRef, SlackRef
from bot.domain.store import Store
from tests.conftest import FakeClock
from tests.contract.test_deadline_store import fire_due
from tests.contract.test_store import SLACK, answer, item, make

BUSY = "slack:C0BUSY"
CALM = "slack:C0CALM"


async def queue(
    store: Store, clock: FakeClock, n: int, destination: str, tag: str
) -> list[ElicitationKey]:
    now = clock.now()
    route = Route(destinations=(destination,))
    outcomes = await store.intake(
        [item(make(now, f"eli_{tag}{i:04d}"), f"ev-{tag}-{i}", route) for i in range(n)], now
    )
    return [o.key for o in outcomes]


async def test_one_post_per_channel_in_flight_whoever_claims(
    store: Store, clock: FakeClock
) -> None:
    await queue(store, clock, 5, BUSY, "b")
    await queue(store, clock, 2, CALM, "c")
    first = await store.claim_outbox(clock.now(), "owner-a", limit=20)
    second = await store.claim_outbox(clock.now(), "owner-b", limit=20)

    assert Counter(i.lane for i in first) == {f"chat:{BUSY}": 1, f"chat:{CALM}": 1}
    assert second == [], "the other owner's live claims count against each lane"
    assert {i.first_attempt_at for i in first} == {clock.now()}


async def test_lanes_are_served_round_robin(store: Store, clock: FakeClock) -> None:
    """A deep lane's backlog does not crowd out the others: with room for three, three lanes
    get one each before any gets a second."""
    for tag, destination in (("a", "slack:C0A"), ("b", "slack:C0B"), ("c", "slack:C0C")):
        await queue(store, clock, 1 if tag != "a" else 40, destination, tag)
    got = await store.claim_outbox(clock.now(), "w", limit=3)
    assert sorted(i.lane for i in got) == ["chat:slack:C0A", "chat:slack:C0B", "chat:slack:C0C"]


async def test_a_paced_post_is_claimed_ahead_of_its_pace_and_its_lane_s_updates_go_meanwhile(
    store: Store, clock: FakeClock
) -> None:
    """Pace from the slot, not from the work: the moment a channel's post is done, its next post
    is claimed (to wait for the channel's slot in the adapter), whoever claims; it is not one
    the channel could make now until the pace comes, so the channel's rewrites go meanwhile."""
    [answered, waiting, third] = await queue(store, clock, 3, BUSY, "p")
    [post] = await store.claim_outbox(clock.now(), "w")
    assert post.elicitation_key == answered
    await store.set_pace(lanes.pace_key(post.lane), clock.now() + timedelta(seconds=1))
    assert await store.complete_outbox(post, "w", clock.now(), ref=SlackRef("C0BUSY", "1.1"))
    result = await store.record_answer(
        answered,
        answer("slack:U0ALICE", clock.now()),
        clock.now(),
        approving=True,
        audit={"action": "answered"},
    )
    assert result.won

    # The next post is claimed at once, a second ahead of its pace, by another owner too; the
    # answer's write-back beside it (its own lane). The third waits: one post in flight.
    got = await store.claim_outbox(clock.now(), "other", limit=20)
    assert sorted((i.kind, i.elicitation_key) for i in got) == sorted(
        [(EffectKind.POST, waiting), (EffectKind.WRITEBACK, answered)]
    )
    [writeback] = [i for i in got if i.kind is EffectKind.WRITEBACK]
    [ahead] = [i for i in got if i.kind is EffectKind.POST]
    assert await store.complete_outbox(writeback, "other", clock.now())
    # Once the source accepted the answer, the answered copy's update is claimed while the
    # claimed post waits for its slot (messages first holds nothing back before the pace).
    [update] = await store.claim_outbox(clock.now(), "w", limit=20)
    assert (update.kind, update.elicitation_key) == (EffectKind.UPDATE, answered)
    assert update.lane == f"chat:{BUSY}"
    assert await store.claim_outbox(clock.now(), "w", limit=20) == []

    # The slot comes, the post goes; the third is claimed the moment it is done.
    clock.advance(1)
    await store.set_pace(lanes.pace_key(ahead.lane), clock.now() + timedelta(seconds=1))
    assert await store.complete_outbox(ahead, "other", clock.now(), ref=SlackRef("C0BUSY", "1.2"))
    [later] = await store.claim_outbox(clock.now(), "w", limit=20)
    assert (later.kind, later.elicitation_key) == (EffectKind.POST, third)


async def test_a_post_waiting_for_its_retry_holds_the_channel_s_next_even_ahead_of_its_pace(
    store: Store, clock: FakeClock
) -> None:
    """Claiming ahead changes nothing of the order: a post handed back for a retry (a 429's
    ``Retry-After``) holds its channel's later posts until it has gone, pace or no pace."""
    [head, second] = await queue(store, clock, 2, BUSY, "r")
    [first] = await store.claim_outbox(clock.now(), "w")
    assert first.elicitation_key == head
    retry_at = clock.now() + timedelta(seconds=2)
    await store.retry_outbox(first, "w", "429 Retry-After 2", retry_at)
    assert await store.claim_outbox(clock.now(), "w", limit=20) == []
    assert await store.claim_outbox(clock.advance(1.5), "other", limit=20) == []
    [again] = await store.claim_outbox(clock.advance(0.5), "w", limit=20)
    assert (again.elicitation_key, again.attempts) == (head, 2)
    await store.set_pace(lanes.pace_key(again.lane), clock.now() + timedelta(seconds=1))
    assert await store.complete_outbox(again, "w", clock.now(), ref=SlackRef("C0BUSY", "1.1"))
    [then] = await store.claim_outbox(clock.now(), "w", limit=20)
    assert then.elicitation_key == second


async def test_a_heartbeat_keeps_claims_and_a_dead_owner_s_run_out(
    store: Store, clock: FakeClock
) -> None:
    await queue(store, clock, 1, BUSY, "h1")
    await queue(store, clock, 1, CALM, "h2")
    alive_rows = await store.claim_outbox(clock.now(), "alive", limit=1)
    dead_rows = await store.claim_outbox(clock.now(), "dead", limit=1)
    assert len(alive_rows) == len(dead_rows) == 1

    clock.advance(lanes.HEARTBEAT.total_seconds())
    assert await store.renew_claims("alive", clock.now() + lanes.CLAIM_LEASE) == 1
    clock.advance(lanes.CLAIM_LEASE.total_seconds() - lanes.HEARTBEAT.total_seconds() + 0.5)
    retaken = await store.claim_outbox(clock.now(), "restarted", limit=10)
    assert [i.id for i in retaken] == [dead_rows[0].id], "only the unrenewed claim ran out"
    assert retaken[0].attempts == 2
    assert retaken[0].first_attempt_at == dead_rows[0].first_attempt_at


async def test_write_backs_have_their_own_lane(store: Store, clock: FakeClock) -> None:
    """A channel's backlog never holds a write-back back: the sink lane is claimed beside it."""
    keys = await queue(store, clock, 30, SLACK, "w")
    [post] = await store.claim_outbox(clock.now(), "w")
    result = await store.record_answer(
        keys[-1],
        answer("slack:U0BOB", clock.now()),
        clock.now(),
        approving=True,
        audit={"action": "answered"},
    )
    assert result.won
    got = await store.claim_outbox(clock.now(), "w", limit=20)
    assert [(i.kind, i.lane) for i in got] == [(EffectKind.WRITEBACK, "sink:superpipeline")]
    assert post.lane == f"chat:{SLACK}"
    views = {v.lane: v for v in await store.lanes()}
    assert views[f"chat:{SLACK}"].pending == 29
    assert views[f"chat:{SLACK}"].claimed == 1
    assert views["sink:superpipeline"].claimed == 1


async def test_updates_waiting_on_their_budget_never_hold_back_a_channel_s_notices(
    store: Store, clock: FakeClock
) -> None:
    """One update per channel in flight; the channel's other updates, however many and however
    long due, take no place ahead of its reminders."""
    t0 = clock.now()
    route = Route(destinations=(BUSY,))
    items = [
        item(make(t0, f"eli_u{i}", remind=30 if i == 3 else None), f"ev-u{i}", route)
        for i in range(4)
    ]
    keys = [o.key for o in await store.intake(items, t0)]
    for _ in keys:
        [post] = await store.claim_outbox(clock.now(), "w")
        assert await store.complete_outbox(post, "w", clock.now(), ref=SlackRef("C0BUSY", "1.1"))
    for key in keys[:3]:
        won = await store.record_answer(
            key, answer("slack:U0ALICE", t0), t0, approving=True, audit={}
        )
        assert won.won
    # Each answer is written back first; the copies are updated once the source accepted it.
    writebacks = await store.claim_outbox(t0, "w", limit=20)
    assert [i.kind for i in writebacks] == [EffectKind.WRITEBACK] * 3
    for writeback in writebacks:
        assert await store.complete_outbox(writeback, "w", t0)
    held = await store.claim_outbox(t0, "w", limit=20, lease=timedelta(minutes=5))
    assert [i.kind for i in held if i.lane == f"chat:{BUSY}"] == [EffectKind.UPDATE]

    [fired] = await fire_due(store, clock.advance(31))
    assert fired.outcome == "fired"
    got = await store.claim_outbox(clock.now(), "w2", limit=20)
    assert [i.kind for i in got if i.lane == f"chat:{BUSY}"] == [EffectKind.NOTIFY]


ROOM = "matrix:!burst:example.org"


async def test_messages_first_a_room_s_posts_go_before_its_reactions_edits_and_notices(
    store: Store, clock: FakeClock
) -> None:
    """While a room has a post it could make now, nothing else of the room is claimed: the
    seeded reactions of a posted prompt (queued when its post completes, ``seed``) and an
    answered prompt's edit wait until every question of the burst is posted."""
    [first] = await queue(store, clock, 1, ROOM, "f")
    [post] = await store.claim_outbox(clock.now(), "w")
    assert await store.complete_outbox(
        post, "w", clock.now(), ref=MatrixRef("!burst", "$f"), seed=True
    )
    [seed] = await store.claim_outbox(clock.now(), "w")
    assert (seed.kind, seed.elicitation_key) == (EffectKind.SEED, first)
    assert await store.complete_outbox(seed, "w", clock.now())
    burst = await queue(store, clock, 5, ROOM, "b")
    assert (
        await store.record_answer(
            first, answer("matrix:@alice:x", clock.now()), clock.now(), approving=True, audit={}
        )
    ).won
    # The answer's write-back goes at once (its sink's lane never waits for a room); once it is
    # accepted, first's edit is due beside its seed: both wait while burst posts are left.
    order: list[tuple[EffectKind, str]] = []
    for _ in range(20):
        got = await store.claim_outbox(clock.now(), "w", limit=20)
        for n, i in enumerate(got):
            ref = MatrixRef("!burst", f"${i.id}-{n}") if i.kind is EffectKind.POST else None
            assert await store.complete_outbox(i, "w", clock.now(), ref=ref, seed=ref is not None)
        order += [(i.kind, i.elicitation_key) for i in got]
    chat = [(k, key) for k, key in order if k is not EffectKind.WRITEBACK]
    assert chat[:5] == [(EffectKind.POST, key) for key in burst], "every question first"
    assert Counter(k for k, _ in chat[5:]) == {EffectKind.SEED: 5, EffectKind.UPDATE: 1}
    # Every burst prompt is seeded once; first's seed went before its answer's edit came.
    assert {key for kind, key in chat if kind is EffectKind.SEED} == set(burst)
    assert [key for kind, key in chat if kind is EffectKind.UPDATE] == [first]


async def test_a_completed_post_queues_its_seed_only_when_asked_and_still_pending(
    store: Store, clock: FakeClock
) -> None:
    """Slack copies carry buttons (no ``seed``); a copy answered while it was posted needs none."""
    [slack_key] = await queue(store, clock, 1, SLACK, "s")
    [room_key] = await queue(store, clock, 1, ROOM, "m")
    posts = {i.elicitation_key: i for i in await store.claim_outbox(clock.now(), "w", limit=20)}
    assert (
        await store.record_answer(
            room_key, answer("matrix:@alice:x", clock.now()), clock.now(), approving=True, audit={}
        )
    ).won
    assert await store.complete_outbox(posts[slack_key], "w", clock.now(), ref=SlackRef("C0", "1"))
    assert await store.complete_outbox(
        posts[room_key], "w", clock.now(), ref=MatrixRef("!burst", "$m"), seed=True
    )
    seeds = [o for o in await store.outbox() if o.kind == EffectKind.SEED]
    assert seeds == []


async def test_an_unpaced_room_s_posts_are_claimed_as_a_chain_in_the_order_they_came(
    store: Store, clock: FakeClock
) -> None:
    """``chained`` lanes (platforms with no pace) take up to ``POST_CHAIN`` posts at once, for
    one task to send in order; other lanes keep one post in flight."""
    room = await queue(store, clock, lanes.POST_CHAIN + 5, ROOM, "r")
    await queue(store, clock, 3, BUSY, "s")
    chained = (lanes.chained_prefix("matrix"),)
    limit = lanes.POST_CHAIN + 10  # more than the chain: the lane's cap is what binds
    got = await store.claim_outbox(clock.now(), "w", limit=limit, chained=chained)
    by_lane = Counter(i.lane for i in got)
    assert by_lane == {f"chat:{ROOM}": lanes.POST_CHAIN, f"chat:{BUSY}": 1}
    assert [i.elicitation_key for i in got if i.lane == f"chat:{ROOM}"] == room[: lanes.POST_CHAIN]
    assert await store.claim_outbox(clock.now(), "w2", limit=limit, chained=chained) == []
    # Without ``chained`` (a paced platform's replica, or an older one) a room keeps one.
    assert await store.claim_outbox(clock.now(), "w3", limit=limit) == []


async def test_a_channel_s_post_goes_before_its_updates_when_its_pace_allows(
    store: Store, clock: FakeClock
) -> None:
    """Slack: a post the channel's pace allows now is claimed before the channel's rewrites;
    while the pace holds the next post back, the rewrites go (the test above)."""
    [answered] = await queue(store, clock, 1, BUSY, "a")
    [post] = await store.claim_outbox(clock.now(), "w")
    assert await store.complete_outbox(post, "w", clock.now(), ref=SlackRef("C0BUSY", "1.1"))
    assert (
        await store.record_answer(
            answered, answer("slack:U0ALICE", clock.now()), clock.now(), approving=True, audit={}
        )
    ).won
    [writeback] = await store.claim_outbox(clock.now(), "w")
    assert await store.complete_outbox(writeback, "w", clock.now())
    [waiting] = await queue(store, clock, 1, BUSY, "n")  # no pace set: it may go now
    [first] = await store.claim_outbox(clock.now(), "w", limit=20)
    assert (first.kind, first.elicitation_key) == (EffectKind.POST, waiting)
    await store.set_pace(lanes.pace_key(first.lane), clock.now() + timedelta(seconds=1))
    assert await store.complete_outbox(first, "w", clock.now(), ref=SlackRef("C0BUSY", "1.2"))
    [then] = await store.claim_outbox(clock.now(), "w", limit=20)
    assert (then.kind, then.elicitation_key) == (EffectKind.UPDATE, answered)


async def test_a_chained_room_s_reactions_keep_the_lane_s_usual_slots(
    store: Store, clock: FakeClock
) -> None:
    """A chain has room for its posts; the seeds that follow go three at a time, so a burst's
    reactions do not all reach the homeserver at once."""
    await queue(store, clock, lanes.POST_CHAIN, ROOM, "k")
    chained = (lanes.chained_prefix("matrix"),)
    limit = lanes.POST_CHAIN + 10
    posts = await store.claim_outbox(clock.now(), "w", limit=limit, chained=chained)
    assert len(posts) == lanes.POST_CHAIN
    for n, post in enumerate(posts):
        ref = MatrixRef("!burst", f"$k{n}")
        assert await store.complete_outbox(post, "w", clock.now(), ref=ref, seed=True)
    seeds = await store.claim_outbox(clock.now(), "w", limit=limit, chained=chained)
    assert [s.kind for s in seeds] == [EffectKind.SEED] * lanes.CHAT_LANE_SLOTS

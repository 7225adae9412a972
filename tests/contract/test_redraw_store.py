"""Redrawing waiting copies when who may decide changes, on both stores (SQLite and
PostgreSQL): the store queues one update per posted chat copy of each still-pending question
(coalesced with one already waiting, none for the web inbox, none for a closed question) with a
``redraw`` audit row; the service asks for exactly the questions whose policy route changed, on
``subscribe``/``unsubscribe`` and once at start against the config routes last served."""

from __future__ import annotations

from bot.domain.model import ElicitationKey, People, Route, RouteMatch
from bot.domain.policy import RoutePolicy
from bot.domain.records import EffectView
from bot.redraws import CONFIG_ROUTES
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.contract.test_store import MATRIX, SLACK, accept, answer, make, post_all

WEB_ONLY = RoutePolicy(approve_on=("web",))
TO_SLACK = Route(destinations=(SLACK, MATRIX, "web"))


def updates(rows: list[EffectView]) -> list[tuple[str, str]]:
    return [(r.target, r.state) for r in rows if r.kind == "update"]


async def test_a_redraw_queues_one_update_per_posted_chat_copy_of_a_pending_question(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    waiting = await accept(store, make(now, "eli_1"), now, TO_SLACK, "ev-1")
    closed = await accept(store, make(now, "eli_2"), now, TO_SLACK, "ev-2")
    await post_all(store, now, only={SLACK})  # the Matrix copy is still being posted
    recorded = await store.record_answer(
        closed, answer("slack:U1", now), now, approving=True, audit={}
    )
    assert recorded.won
    before = {k: updates(await store.outbox(k)) for k in (waiting, closed)}

    done = await store.redraw(
        [waiting, closed, ElicitationKey("superpipeline:nope")], "slack:U0ADA", now, {"why": "t"}
    )
    assert done == 1
    assert updates(await store.outbox(waiting)) == [(SLACK, "pending")]
    assert updates(await store.outbox(closed)) == before[closed]
    [audit] = [a for a in await store.audit(waiting) if a.action == "redraw"]
    assert (audit.actor, audit.detail) == ("slack:U0ADA", {"why": "t"})

    # A second redraw before the first update went out is the same update (coalesced).
    assert await store.redraw([waiting], "slack:U0ADA", now, {"why": "again"}) == 1
    assert updates(await store.outbox(waiting)) == [(SLACK, "pending")]
    assert await store.redraw([], "slack:U0ADA", now, {}) == 0


async def test_subscribe_redraws_exactly_the_questions_its_route_decides(
    store: SqlStore, clock: FakeClock
) -> None:
    """A config route listed first keeps its question; an unchanged subscribe redraws nothing;
    unsubscribing the route redraws its questions again (their policy falls back)."""
    first = Route(match=RouteMatch(workspace="acme", board="brd_config"), destinations=(SLACK,))
    service = Service(store, clock, People(), [first])
    now = clock.now()
    mine = await accept(store, make(now, "eli_1"), now, TO_SLACK, "ev-1")
    theirs_e = make(now, "eli_2").model_copy(
        update={"context": make(now).context.model_copy(update={"board_id": "brd_config"})}
    )
    theirs = await accept(store, theirs_e, now, TO_SLACK, "ev-2")
    await post_all(store, now)

    await service.subscribe("acme", None, SLACK, "slack:U0ADA")  # new route: default policy
    assert [updates(await store.outbox(k)) for k in (mine, theirs)] == [[], []]

    await service.subscribe("acme", None, SLACK, "slack:U0ADA", policy=WEB_ONLY)
    assert updates(await store.outbox(mine)) == [(SLACK, "pending"), (MATRIX, "pending")]
    assert updates(await store.outbox(theirs)) == []
    redraws = [a.detail for a in await store.audit(mine) if a.action == "redraw"]
    assert redraws == [{"why": f"subscribe {SLACK}"}]

    await post_all(store, clock.now())  # (the updates stay; only posts are completed here)
    await service.subscribe("acme", None, SLACK, "slack:U0ADA", policy=WEB_ONLY)
    assert len([a for a in await store.audit(mine) if a.action == "redraw"]) == 1

    assert await service.unsubscribe("acme", None, SLACK) == 1
    redraws = [a.detail for a in await store.audit(mine) if a.action == "redraw"]
    assert redraws[-1] == {"why": f"unsubscribe {SLACK}"}
    assert [a for a in await store.audit(theirs) if a.action == "redraw"] == []


async def test_at_start_the_config_routes_last_served_are_compared_with_todays(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    plain = await accept(store, make(now, "eli_1"), now, TO_SLACK, "ev-1")
    await post_all(store, now)

    async def redraws() -> int:
        return len([a for a in await store.audit(plain) if a.action == "redraw"])

    # A first start (nothing stored): only questions of routes with approve_on are redrawn.
    everywhere = Service(store, clock, People(), [Route(destinations=(SLACK,))])
    assert await everywhere.redraw_at_start() == 0
    assert await store.get_value(CONFIG_ROUTES) is not None
    # Restarted unchanged: nothing.
    assert await everywhere.redraw_at_start() == 0

    # The config now says web-only: its questions are redrawn, once.
    web_only = Service(store, clock, People(), [Route(destinations=(SLACK,), approve_on=("web",))])
    assert await web_only.redraw_at_start() == 1
    assert await redraws() == 1
    assert await web_only.redraw_at_start() == 0
    # And back: redrawn again.
    assert await everywhere.redraw_at_start() == 1
    assert await redraws() == 2

    # An unreadable stored value is a first start: with approve_on set, every question of
    # that route is redrawn.
    await accept(store, make(now, "eli_3"), now, TO_SLACK, "ev-3")
    await post_all(store, now)
    await store.set_value(CONFIG_ROUTES, "not json")
    assert await web_only.redraw_at_start() == 2
    assert await redraws() == 3

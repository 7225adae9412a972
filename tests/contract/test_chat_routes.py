"""Chat-made routes with who may decide, on both stores (SQLite and PostgreSQL): the policy a
``subscribe`` gives is stored whole and read back as written; a ``subscribe`` without policy
words keeps it; one with words replaces it (saying what it replaced); the service resolves it."""

from __future__ import annotations

from datetime import timedelta

from bot.domain.model import Identity, People
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy
from bot.domain.records import Subscribed
from bot.domain.routing import resolve_route
from bot.domain.store import Store
from bot.service import Service
from tests.conftest import FakeClock
from tests.unit.domain.builders import NOW, elicitation

DEPLOYS = "slack:C0DEPLOYS"
ADA = "slack:U0ADA"
TWO_OF = RoutePolicy(
    approvers=("slack:U0BOB", "matrix:@bob:example.org", "web:dave", "admins"),
    quorum=2,
    approve_on=("slack", "web"),
    anyone_may_reject=True,
)


async def test_a_policy_is_stored_whole_kept_and_replaced(store: Store) -> None:
    assert await store.add_chat_route("acme", "brd_1", DEPLOYS, ADA, NOW, TWO_OF) == Subscribed(
        changed=True, policy=TWO_OF
    )
    # No policy words: the route keeps its policy.
    assert await store.add_chat_route("acme", "brd_1", DEPLOYS, "slack:U0EVE", NOW) == Subscribed(
        changed=False, policy=TWO_OF
    )
    # The same words again change nothing.
    later = NOW + timedelta(minutes=1)
    assert await store.add_chat_route("acme", "brd_1", DEPLOYS, ADA, later, TWO_OF) == Subscribed(
        changed=False, policy=TWO_OF
    )
    # New words replace the whole policy, and say what they replaced.
    web_only = RoutePolicy(approvers=("admins",), approve_on=("web",))
    assert await store.add_chat_route("acme", "brd_1", DEPLOYS, ADA, later, web_only) == Subscribed(
        changed=True, policy=web_only, previous=TWO_OF
    )
    # Another board, and a route with the defaults, beside it.
    await store.add_chat_route("acme", None, DEPLOYS, ADA, NOW)
    await store.add_chat_route("acme", None, "matrix:!ops:example.org", ADA, NOW, TWO_OF)

    routes = await store.chat_routes()
    assert [(r.workspace, r.board, r.destination, r.policy) for r in routes] == [
        ("acme", "brd_1", DEPLOYS, web_only),
        ("acme", None, DEPLOYS, DEFAULT_POLICY),
        ("acme", None, "matrix:!ops:example.org", TWO_OF),
    ]
    assert routes[0].created_by == ADA, "who made the route stays its maker"

    # Back to the defaults: words that say the defaults.
    assert await store.add_chat_route(
        "acme", "brd_1", DEPLOYS, ADA, later, DEFAULT_POLICY
    ) == Subscribed(changed=True, policy=DEFAULT_POLICY, previous=web_only)
    assert await store.remove_chat_route("acme", "brd_1", DEPLOYS) == 1
    assert [r.board for r in await store.chat_routes()] == [None, None]


async def test_the_service_resolves_a_chat_routes_policy(store: Store) -> None:
    service = Service(store, FakeClock(NOW), People(), [])
    e = elicitation()
    assert e.workspace is not None
    await service.subscribe(e.workspace, e.context.board_id, DEPLOYS, ADA, policy=TWO_OF)

    route = resolve_route(await service.routes(), e)
    assert (route.origin, route.destinations) == ("chat", (DEPLOYS,))
    assert (route.approvers, route.quorum, route.approve_on, route.anyone_may_reject) == (
        TWO_OF.approvers,
        2,
        ("slack", "web"),
        True,
    )
    assert Identity(platform="slack", user="U0BOB").key in (route.approvers or ())

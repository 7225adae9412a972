"""Messages first, through the dispatcher, on every store: a burst to a Matrix room is posted
(in chains, in order) before any prompt's reactions are seeded, every prompt is seeded once
after its own post, and a post that fails in the middle of a chain holds back none of the others.
"""

from __future__ import annotations

import copy

from adapters.sources.superpipeline.parse import parse_body
from bot.domain import lanes
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import People, Route
from bot.domain.store import Store
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.fakes import FakeChat
from tests.integration import test_outbox
from tests.unit.sources.superpipeline_fixtures import VALID

store = test_outbox.store
"""Every test here runs on every store behind the port (the outbox tests' fixture)."""
ROOM = "matrix:!burst:example.org"
BURST = lanes.POST_CHAIN + 10
"""More than one chain: the first POST_CHAIN go together, the rest after them."""


async def burst(store: Store, clock: FakeClock, chat: FakeChat) -> tuple[Dispatcher, list[str]]:
    dispatcher = Dispatcher(store, clock, {"matrix": chat}, {}, lambda key: f"http://x/#{key}")
    service = Service(store, clock, People(), [Route(destinations=(ROOM,))])
    inbound = []
    for n in range(BURST):
        data = copy.deepcopy(VALID["options"])
        data["elicitationId"] = f"eli_burst{n:04d}"
        inbound.append(Inbound("ce:/burst", f"ev-{n}", parse_body(data, workspace="acme"), {}))
    return dispatcher, [o.key for o in await service.intake(inbound)]


async def test_a_burst_is_posted_in_order_before_any_reaction_is_seeded(
    store: Store, clock: FakeClock
) -> None:
    chat = FakeChat("matrix")
    dispatcher, keys = await burst(store, clock, chat)

    assert await dispatcher.drain() == 2 * BURST
    methods = [c.method for c in chat.calls]
    assert methods == ["post"] * BURST + ["seed"] * BURST, "every question, then reactions"
    assert [p.view.elicitation.key for p in chat.posted] == keys, "in the order they came"
    assert sorted(s.view.elicitation.key for s in chat.seeded) == sorted(keys)
    refs = {p.view.elicitation.key: p.ref for p in chat.posted}
    assert all(s.ref == refs[s.view.elicitation.key] for s in chat.seeded)


async def test_a_post_failing_inside_a_chain_holds_back_none_of_the_others(
    store: Store, clock: FakeClock
) -> None:
    chat = FakeChat("matrix")
    dispatcher, keys = await burst(store, clock, chat)
    chat.fail_next(1, TransientDeliveryError("homeserver 502"), methods=["post"])

    # One chain of POST_CHAIN posts (more than the dispatcher's concurrency of 16: a chain is
    # one unit): the first fails, the others are posted all the same.
    assert await dispatcher.run_once() == lanes.POST_CHAIN
    assert [p.view.elicitation.key for p in chat.posted] == keys[1 : lanes.POST_CHAIN]
    await dispatcher.drain()
    assert sorted(p.view.elicitation.key for p in chat.posted) == sorted(keys[1:])
    clock.advance(60)  # past the failed post's backoff
    await dispatcher.drain()
    assert sorted(p.view.elicitation.key for p in chat.posted) == sorted(keys)
    assert sorted(s.view.elicitation.key for s in chat.seeded) == sorted(keys)
    assert len(chat.posted) == BURST, "each posted once"

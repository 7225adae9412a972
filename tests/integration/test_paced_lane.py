"""A paced channel through the dispatcher, on every store, on the injected clock: pace from the
slot, not from the work.

The chat here keeps Slack's pace itself, as the real adapter's Pacer does: a post handed to it
goes out in the channel's next slot (one a second), the clock moved on to that slot, as if the
adapter had slept until then. The dispatcher hands a channel's next post over the moment the one
before it is done, ahead of the channel's pace, so the posts go out one slot apart with nothing
between them; one at a time, in the order they came, whichever owner claims them.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta

from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import People, Route
from bot.domain.ports import PromptView
from bot.domain.refs import MessageRef
from bot.domain.store import Store
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.fakes import FakeChat
from tests.integration import test_outbox
from tests.unit.sources.superpipeline_fixtures import VALID

store = test_outbox.store
"""Every test here runs on every store behind the port (the outbox tests' fixture)."""
BUSY = "slack:C0BUSY"
INTERVAL = 1.0


class SlottedChat(FakeChat):
    """A Slack fake that keeps the channel's pace: each post in the next free slot."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__("slack")
        self.post_interval = INTERVAL
        self.clock = clock
        self.next_slot: datetime | None = None
        self.handed: list[datetime] = []
        """When each post was handed over (the dispatcher's clock)."""
        self.sent: list[datetime] = []
        """When each went out: its slot."""
        self.in_flight = 0
        self.most_in_flight = 0

    async def post(
        self,
        destination: str,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MessageRef:
        self.handed.append(self.clock.now())
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            slot = max(self.clock.now(), self.next_slot or self.clock.now())
            self.clock.current = slot  # "slept" until the channel's slot
            self.next_slot = slot + timedelta(seconds=INTERVAL)
            self.sent.append(slot)
            return await super().post(
                destination, view, idempotency_key=idempotency_key, uncertain=uncertain
            )
        finally:
            self.in_flight -= 1


async def backlog(store: Store, clock: FakeClock, n: int) -> list[str]:
    service = Service(store, clock, People(), [Route(destinations=(BUSY,))])
    inbound = []
    for i in range(n):
        data = copy.deepcopy(VALID["options"])
        data["elicitationId"] = f"eli_paced{i:04d}"
        inbound.append(Inbound("ce:/paced", f"ev-{i}", parse_body(data, workspace="acme"), {}))
    return [o.key for o in await service.intake(inbound)]


def dispatcher(store: Store, clock: FakeClock, chat: FakeChat, claimer: str) -> Dispatcher:
    return Dispatcher(
        store, clock, {"slack": chat}, {}, lambda key: f"http://x/#{key}", claimer=claimer
    )


async def test_a_busy_channel_s_posts_go_one_slot_apart_with_nothing_between(
    store: Store, clock: FakeClock
) -> None:
    chat = SlottedChat(clock)
    keys = await backlog(store, clock, 6)
    start = clock.now()

    # Each post is handed over the moment the one before it is done, a whole interval ahead of
    # the channel's pace: drained without the clock moving but for the slots themselves.
    assert await dispatcher(store, clock, chat, "w").drain() == 6
    assert [p.view.elicitation.key for p in chat.posted] == keys, "in the order they came"
    assert chat.sent == [start + timedelta(seconds=INTERVAL * i) for i in range(6)]
    assert chat.handed == [start, *chat.sent[:-1]], "each handed over as the last went out"
    assert chat.most_in_flight == 1, "one post of the channel at a time"


async def test_owners_take_turns_on_one_channel_and_keep_its_order_and_its_slots(
    store: Store, clock: FakeClock
) -> None:
    """Two replicas (owners) on one store: whoever claims next, the channel's next post is
    claimed once the one before it is done, and never two at once."""
    chat = SlottedChat(clock)
    keys = await backlog(store, clock, 6)
    start = clock.now()
    a, b = dispatcher(store, clock, chat, "a"), dispatcher(store, clock, chat, "b")

    for turn in range(6):
        assert await (a if turn % 2 == 0 else b).run_once() == 1
    assert await a.run_once() == await b.run_once() == 0
    assert [p.view.elicitation.key for p in chat.posted] == keys
    assert chat.sent == [start + timedelta(seconds=INTERVAL * i) for i in range(6)]
    assert chat.most_in_flight == 1

"""The rig of the Matrix end-to-end tests against a real Synapse: SqlStore + Service + Dispatcher +
MatrixChat/Listener.

Each test gets fresh rooms (made by alice, a workspace admin; bob, the agent's account and the
bot join) and a fresh SQLite database; the accounts are shared by the session. The service's
clock is a FakeClock (2026-11-10 09:30 UTC, before the approval subject expires); the homeserver
runs on real time. People act through the raw client-server API (``Homeserver``), the bot
through nio; everything is checked on what the homeserver holds, not only on our own records.

The outage test stops Synapse for ``OUTAGE_SECONDS`` (20 s rather than a minute, to keep the suite
short; the behaviour does not depend on the length: the listener backs off at most 5 s between
attempts and the outbox retries on its clock).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from nio import AsyncClient

from adapters.matrix import MatrixChat, MatrixListener, make_client
from adapters.matrix.intake.reactions import KEYCAPS
from adapters.matrix.render import MARKER
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import Answer, Destination, Elicitation, ElicitationKey, People, Route, Status
from bot.domain.refs import MatrixRef
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.synapse import Cast, Homeserver, MatrixUser, Synapse
from tests.unit.sources.superpipeline_fixtures import VALID

AGENT_ID = "agt_9e8d7c6b5a493827"
OUTAGE_SECONDS = 20.0
WAIT = 15.0
ONE, TWO, THREE = KEYCAPS[:3]


def people(cast: Cast) -> People:
    return People(
        admins=frozenset({cast.alice.key}),
        principals={cast.agent.key: AGENT_ID},
        bot_identities=frozenset({cast.bot.key}),
    )


async def until(
    check: Callable[[], Awaitable[Any]], what: str, within: float = WAIT, every: float = 0.05
) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within} s waiting for {what}; last: {value!r}")
        await asyncio.sleep(every)


def flag(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def poll() -> bool:
        return check()

    return poll


@dataclass
class Bot:
    """One elicitbot process: its nio client, chat adapter, outbox dispatcher, service, listener."""

    chat: MatrixChat
    dispatcher: Dispatcher
    service: Service
    listener: MatrixListener

    async def close(self) -> None:
        await self.listener.stop()
        await self.chat.client.close()


@dataclass
class Rig:
    hs: Homeserver
    synapse: Synapse
    cast: Cast
    room: str
    store: SqlStore
    clock: FakeClock
    sink: FakeSink
    url: str
    bots: list[Bot] = field(default_factory=list)
    routes: list[Route] | None = None
    """The service's routes; None: one route to :attr:`destination` with the defaults."""

    @property
    def bot(self) -> Bot:
        return self.bots[-1]

    @property
    def destination(self) -> Destination:
        return Destination(f"matrix:{self.room}")

    def bot_client(self) -> AsyncClient:
        """A nio client on the bot's token and device (what a bot process makes at start)."""
        user = self.cast.bot
        return make_client(self.hs.base_url, user.user_id, user.device_id, user.access_token)

    async def start_bot(self, *, chat: MatrixChat | None = None, **listener_options: Any) -> Bot:
        """A new bot process on the same store, token and device (as after a restart);
        ``chat``: its MatrixChat (a test's subclass, on :meth:`bot_client`)."""
        user = self.cast.bot
        chat = chat or MatrixChat(self.bot_client())
        dispatcher = Dispatcher(
            self.store,
            self.clock,
            {"matrix": chat},
            {"superpipeline": self.sink, "handup": self.sink},
            lambda key: f"http://127.0.0.1:8787/#{key}",
            claimer=f"bot-{len(self.bots)}",
        )
        service = Service(
            self.store,
            self.clock,
            people(self.cast),
            self.routes or [Route(destinations=(self.destination,))],
            on_change=dispatcher.wake,
        )
        dispatcher.effects.policy = service.copy_policy  # the root passes it
        listener = MatrixListener(
            chat, service, self.store, device_id=user.device_id, **listener_options
        )
        await listener.start()
        bot = Bot(chat, dispatcher, service, listener)
        self.bots.append(bot)
        await until(flag(lambda: listener.ready), "the first sync")
        return bot

    async def intake(self, case: str = "options", **changes: Any) -> ElicitationKey:
        data = copy.deepcopy(VALID[case])
        data.update(changes)
        return await self.intake_elicitation(parse_body(data, workspace="acme"))

    async def intake_elicitation(self, e: Elicitation) -> ElicitationKey:
        [outcome] = await self.bot.service.intake(
            [Inbound("ce:/superpipeline/test", f"ce-{e.key}", e, {})]
        )
        assert outcome.result == "accepted", outcome
        return outcome.key

    async def post(self, case: str = "options", **changes: Any) -> tuple[ElicitationKey, str]:
        """Take a fixture in, post it and seed its reactions (the post's ``seed`` effect, next);
        returns (elicitation key, event id)."""
        key = await self.intake(case, **changes)
        assert await self.bot.dispatcher.run_once() == 1
        assert await self.bot.dispatcher.run_once() == 1
        [delivery] = await self.store.deliveries(key)
        assert delivery.state == "posted", delivery
        ref = delivery.ref
        assert isinstance(ref, MatrixRef), ref
        assert ref.to_json() == {
            "room_id": self.room,
            "event_id": ref.event_id,
            "key": ref.event_id,
        }
        assert ref.key == ref.event_id
        return key, ref.event_id

    async def settle(self, user: MatrixUser) -> None:
        """Send a plain message and wait until the listener has seen it: everything sent
        before it has been handled."""
        marker = await self.hs.say(user, self.room, "marker")

        async def passed() -> bool:
            """The listener went through the marker (its last event is the marker or later:
            the bot's own notices may follow it)."""
            last = self.bot.listener.last_event_id
            if last == marker:
                return True
            ids = [e["event_id"] for e in await self.timeline()]
            return last in ids and marker in ids and ids.index(last) > ids.index(marker)

        await until(passed, "the marker")
        await self.bot.listener.drain()
        await asyncio.sleep(0.3)  # a notice sent in reply would be in the timeline by now

    async def status(self, key: ElicitationKey) -> Status:
        view = await self.bot.service.view(key)
        assert view is not None
        return view.status

    async def answered(self, key: ElicitationKey) -> Answer:
        async def check() -> Answer | None:
            view = await self.bot.service.view(key)
            return view.answer if view is not None and view.status is Status.ANSWERED else None

        answer: Answer = await until(check, f"{key} answered")
        return answer

    async def timeline(self) -> list[dict[str, Any]]:
        return await self.hs.messages(self.cast.alice, self.room)

    async def notices(self, root: str) -> list[dict[str, Any]]:
        """The bot's notices in the thread of ``root``, oldest first."""
        return [
            e
            for e in await self.timeline()
            if e["sender"] == self.cast.bot.user_id
            and e["content"].get("msgtype") == "m.notice"
            and e["content"].get("m.relates_to", {}).get("event_id") == root
        ]

    async def wait_notices(self, root: str, n: int) -> list[dict[str, Any]]:
        await self.bot.listener.drain()

        async def check() -> list[dict[str, Any]] | None:
            found = await self.notices(root)
            return found if len(found) >= n else None

        found: list[dict[str, Any]] = await until(check, f"{n} notices under {root}")
        return found

    async def edits(self, root: str) -> list[dict[str, Any]]:
        return [
            e
            for e in await self.timeline()
            if e["sender"] == self.cast.bot.user_id
            and e["content"].get("m.relates_to", {}).get("rel_type") == "m.replace"
            and e["content"]["m.relates_to"]["event_id"] == root
        ]

    async def prompts(self, key: str) -> list[dict[str, Any]]:
        """The bot's prompt events (not edits) for elicitation ``key`` in the room."""
        return [
            e
            for e in await self.timeline()
            if e["sender"] == self.cast.bot.user_id
            and e["type"] == "m.room.message"
            and e["content"].get(MARKER, {}).get("key") == key
        ]

    async def seeded(self, root: str) -> list[str]:
        return [
            e["content"]["m.relates_to"]["key"]
            for e in await self.timeline()
            if e["sender"] == self.cast.bot.user_id
            and e["type"] == "m.reaction"
            and e["content"]["m.relates_to"]["event_id"] == root
        ]


@pytest.fixture
async def rig(
    homeserver: Homeserver, synapse: Synapse, cast: Cast, sqlite_url: str, clock: FakeClock
) -> AsyncIterator[Rig]:
    # The bot moderates (power 50): it may take a secret typed in the room out again.
    room = await homeserver.make_room(
        cast.alice, [cast.bot, cast.bob, cast.agent], power={cast.bot.user_id: 50}
    )
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(homeserver, synapse, cast, room, store, clock, FakeSink(), sqlite_url)
    await rig.start_bot()
    try:
        yield rig
    finally:
        for bot in rig.bots:
            await bot.close()
        await store.close()


def name_of(user: MatrixUser) -> str:
    """How elicitbot names ``user``: their display name, which Synapse sets to the localpart
    when an account is registered without one."""
    return user.user_id[1:].split(":", 1)[0]


def refusal_of(notice: dict[str, Any], user: MatrixUser) -> str:
    """The text of a notice that must name and mention ``user``."""
    content = notice["content"]
    assert content["m.mentions"] == {"user_ids": [user.user_id]}, content
    prefix = f"{user.user_id}: "
    assert content["body"].startswith(prefix), content["body"]
    return str(content["body"][len(prefix) :])

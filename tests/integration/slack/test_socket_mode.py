"""Socket Mode against a local websocket: the fake's ``apps.connections.open`` (app-level
``xapp-`` token only) hands out ``ws://127.0.0.1:<port>/link``; the fake says ``hello``, pushes
envelopes and records what the client sends back.

The same Bolt app as in HTTP mode (no signing secret: Socket Mode requests are not signed) runs
behind slack_bolt's aiohttp ``AsyncSocketModeHandler``
(:class:`adapters.slack.intake.socket.SlackSocket`).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.api.pacing import Pacer, Rate
from adapters.slack.chat import SlackChat
from adapters.slack.intake.socket import SlackSocket
from adapters.slack.listener import SlackInteractivity, build_app
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import People, Route, Status
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.slack_fake import BOT_USER, TEAM_ID, FakeSlack
from tests.unit.sources.superpipeline_fixtures import VALID

CHANNEL = "C0APPROVALS"


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as slack:
        yield slack


async def eventually(probe: Callable[[], Any], within: float = 10.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


class SocketRig:
    def __init__(self, store: SqlStore, clock: FakeClock, fake: FakeSlack) -> None:
        self.fake = fake
        self.store = store
        self.sink = FakeSink()
        self.chat = SlackChat(
            AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]),
            pacer=Pacer({"chat.postMessage": Rate(1000.0, 100), "chat.update": Rate(1000, 100)}),
        )
        self.dispatcher = Dispatcher(
            store, clock, {"slack": self.chat}, {"superpipeline": self.sink}, lambda k: f"/#{k}"
        )
        self.service = Service(
            store,
            clock,
            People(bot_identities=frozenset({f"slack:{BOT_USER}"})),
            [Route(destinations=(f"slack:{CHANNEL}",))],
            on_change=self.dispatcher.wake,
        )
        self.slack: SlackInteractivity
        self.socket: SlackSocket

    async def start(self) -> None:
        await self.chat.verify()
        self.slack = build_app(self.chat, self.service, signing_secret=None)
        self.socket = SlackSocket(self.slack.app, self.fake.app_token)
        await self.socket.start()

    async def drain(self) -> None:
        await self.slack.idle()
        while await self.dispatcher.run_once():
            pass


@pytest.fixture
async def rig(sqlite_url: str, clock: FakeClock, fake: FakeSlack) -> AsyncIterator[SocketRig]:
    store = SqlStore.from_url(sqlite_url)
    rig = SocketRig(store, clock, fake)
    await rig.start()
    try:
        yield rig
    finally:
        await rig.socket.stop()
        await rig.slack.aclose()
        await store.close()


async def test_an_envelope_is_acked_by_its_id_and_the_click_answers(rig: SocketRig) -> None:
    [opened] = rig.fake.calls_to("apps.connections.open")
    assert opened.ok
    assert opened.headers["authorization"] == f"Bearer {rig.fake.app_token}"
    assert rig.socket.connected()
    e = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
    [outcome] = await rig.service.intake([Inbound("test", "in-1", e, {})])
    await rig.drain()
    [message] = rig.fake.messages(CHANNEL)
    deny = next(
        {**el, "block_id": b["block_id"]}
        for b in message["blocks"]
        if b["type"] == "actions"
        for el in b["elements"]
        if json.loads(el["value"]).get("o") == "deny"
    )
    click = {
        "type": "block_actions",
        "team": {"id": TEAM_ID, "domain": "acme"},
        "user": {"id": "U0ALICE", "name": "alice", "team_id": TEAM_ID},
        "api_app_id": "A0ELICITBOT",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": CHANNEL},
        "trigger_id": rig.fake.issue_trigger(),
        "channel": {"id": CHANNEL, "name": "approvals"},
        "message": message,
        "state": {"values": {}},
        "actions": [{**deny, "action_ts": "1700000100.000001"}],
    }

    sent = time.monotonic()
    await asyncio.to_thread(
        rig.fake.socket_send,
        {
            "envelope_id": "env-click-1",
            "type": "interactive",
            "accepts_response_payload": True,
            "payload": click,
        },
    )
    [ack] = await eventually(
        lambda: [a for a in rig.fake.socket_acks() if a.get("envelope_id") == "env-click-1"]
    )
    acked = time.monotonic() - sent
    await rig.drain()

    assert acked < 1.0, f"acked after {acked:.2f} s"
    assert ack == {"envelope_id": "env-click-1"}
    view = await rig.service.view(outcome.key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.respondent == "slack:U0ALICE"
    rewritten = rig.fake.message(CHANNEL, message["ts"])
    assert rewritten is not None
    assert not any(b["type"] == "actions" for b in rewritten["blocks"])

    # An Events API envelope redelivered (retry_attempt 1): acked, and deduplicated by event_id.
    reply = {
        "type": "event_callback",
        "team_id": TEAM_ID,
        "event_id": "Ev0SOCKET",
        "event": {
            "type": "message",
            "channel": CHANNEL,
            "user": "U0BOB",
            "team": TEAM_ID,
            "text": "3",
            "ts": "1700000200.000001",
            "thread_ts": message["ts"],
        },
    }
    for attempt in (0, 1):
        await asyncio.to_thread(
            rig.fake.socket_send,
            {
                "envelope_id": f"env-event-{attempt}",
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": attempt,
                "retry_reason": "timeout" if attempt else "",
                "payload": reply,
            },
        )
    await eventually(lambda: len(rig.fake.socket_acks()) == 3)
    await rig.drain()
    told = [e for e in rig.fake.ephemerals() if e["user"] == "U0BOB"]
    assert [t["text"][:32] for t in told] == ["Already answered by alice (Deny)"]
    assert len(rig.sink.delivered) == 1


async def test_a_refused_app_token_fails_the_start_at_once(rig: SocketRig) -> None:
    socket = SlackSocket(rig.slack.app, "xapp-1-not-this-apps-token")

    started = time.monotonic()
    with pytest.raises(PermanentDeliveryError, match="not_allowed_token_type"):
        await socket.start()

    assert time.monotonic() - started < 5.0, "no retry loop"
    assert not socket.connected()
    assert rig.fake.socket_connections == 1, "only the rig's own connection"
    await rig.socket.stop()
    assert not rig.socket.connected()

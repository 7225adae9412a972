"""A mixed route end to end (issue 14): one SuperPipeline elicitation routed at once to a Slack
channel (the fake Web API, :mod:`tests.slack_fake`), an encrypted Matrix room on the real
Synapse and ``matrix:@alice:localhost`` (a direct message the bot makes), through the real
Service, outbox Dispatcher, MatrixChat with encryption and its listener, SlackChat and the Bolt
app behind the FastAPI shell reached with signed requests. Two people answer at once, Alice by
an encrypted reaction in the DM and Bob by a Slack button: one answer is recorded, the other
person is told, the write-back goes upstream once, and every copy is edited to the answer.

Composed from the rigs' parts (tests/integration/slack/rig.py, tests/integration/matrix_e2ee/),
not from the rigs themselves: each of those builds a dispatcher for its own platform only.
Alice is an E2EE client of her own (nio with encryption, her own store) on fresh accounts.
The two answers are made to enter the core together (:class:`AtOnce`), so either may win; the
test holds for both outcomes and prints which it was.

The second test is the DM copy's share of the write-back loop: a refused write-back of an
answer given in the DM is told in that copy's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from nio import ReactionEvent, RoomMessageNotice, RoomMessageText
from slack_sdk.web.async_client import AsyncWebClient

from adapters.matrix import MatrixChat, MatrixListener, matrix_chat
from adapters.slack.api.pacing import Pacer
from adapters.slack.chat import SlackChat
from adapters.slack.intake.routes import slack_router
from adapters.slack.listener import SlackInteractivity, build_app
from adapters.sources.superpipeline.parse import parse_body
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from bot.app.http import Runtime, create_app
from bot.domain.actions import Action, Command, Outcome
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Answer, ElicitationKey, People, Route, Status
from bot.domain.refs import MatrixRef, SlackRef
from bot.outbox import Dispatcher, writeback_key
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.matrix.rig import ONE, flag, until
from tests.integration.matrix_e2ee.adapter_rig import KEY_WAIT, Reader, encrypted_room
from tests.integration.matrix_e2ee.clients import PICKLE_KEY, _person, sync
from tests.integration.matrix_e2ee.test_e2ee import (
    reaction,
    send_encrypted,
    server_bytes,
    server_events,
)
from tests.integration.slack.rig import (
    ADMIN,
    BOB,
    C1,
    FAST,
    SIGNING_SECRET,
    button,
    has_actions,
    message_click,
    post_interaction,
)
from tests.slack_fake import BOT_USER, FakeSlack
from tests.synapse import Homeserver, MatrixUser, Synapse
from tests.unit.sources.superpipeline_fixtures import VALID

WAIT = 15.0
REFUSAL = "SuperPipeline refused the answer (HTTP 422): option allow_once is retired."


class AtOnce(Service):
    """The real service, except that :meth:`hold` makes the next ``parties`` actions wait for
    each other on their way in: the two answers then enter the core together, both in flight
    at once, however much longer a Matrix reaction takes to arrive (a sync) than a Slack click
    (an HTTP request). Who wins is up to the core and the store."""

    gate: asyncio.Barrier | None = None
    held: tuple[str, ...] = ()
    """Where the held actions came from (their ``via``), in the order they arrived."""

    def hold(self, parties: int) -> None:
        self.gate, self.held = asyncio.Barrier(parties), ()

    async def act(self, action: Action) -> Outcome:
        gate = self.gate
        if gate is not None and not isinstance(action, Command):
            self.held = (*self.held, action.via)
            if len(self.held) == gate.parties:
                self.gate = None
            async with asyncio.timeout(WAIT):
                await gate.wait()
        return await super().act(action)


@dataclass
class Mixed:
    """One elicitbot process with both surfaces, and the people around it."""

    store: SqlStore
    sink: FakeSink
    fake: FakeSlack
    slack_chat: SlackChat
    matrix: MatrixChat
    dispatcher: Dispatcher
    service: AtOnce
    listener: MatrixListener
    slack: SlackInteractivity
    http: httpx.AsyncClient
    alice: Reader
    bot: MatrixUser
    room: str
    """The encrypted team room (alice's, the bot invited)."""
    app: FastAPI
    """Slack's events and the web inbox, on the one app."""

    @property
    def alice_user(self) -> MatrixUser:
        return self.alice.person.user

    async def intake_options(self, question: str) -> ElicitationKey:
        data = copy.deepcopy(VALID["options"])
        data["question"] = question
        e = parse_body(data, workspace="acme")
        [outcome] = await self.service.intake(
            [Inbound("ce:/superpipeline/test", f"ce-{e.key}", e, {})]
        )
        assert outcome.result == "accepted", outcome
        return outcome.key

    async def click(self, message: dict[str, Any], action: dict[str, Any], user: str) -> int:
        """A signed ``block_actions`` (a button on ``message`` in C1), as Slack sends it."""
        payload = message_click(
            message,
            action,
            user,
            channel=C1,
            trigger_id=self.fake.issue_trigger(),
            response_url=self.fake.issue_response_url(),
        )
        return await post_interaction(self.http, "/slack/events", payload)

    async def answered(self, key: ElicitationKey) -> Answer:
        async def check() -> Answer | None:
            view = await self.service.view(key)
            return view.answer if view is not None and view.status is Status.ANSWERED else None

        answer: Answer = await until(check, f"{key} answered")
        return answer


Policy = Callable[[MatrixUser, str], tuple[People, Route]]
"""Who the people are and the route, given alice and her encrypted room."""


def alice_dm_policy(alice: MatrixUser, room: str) -> tuple[People, Route]:
    """Slack C1, the room and alice in a DM; alice and the Slack admin are admins."""
    people = People(
        admins=frozenset({f"slack:{ADMIN}", alice.key}), principals={alice.key: "usr_alice"}
    )
    return people, Route(destinations=(f"slack:{C1}", f"matrix:{room}", alice.key))


async def start_mixed(
    stack: contextlib.AsyncExitStack,
    synapse: Synapse,
    homeserver: Homeserver,
    store_url: str,
    clock: FakeClock,
    tmp_path: Path,
    policy: Policy = alice_dm_policy,
    identity: IdentityPolicy | None = None,
) -> Mixed:
    """Fresh accounts; alice's encrypted room with the bot in it; the bot process started (its
    listener past its first sync), the web inbox (``identity``) beside Slack on its app; the
    people and the route from ``policy``."""
    alice = await _person(synapse, "mixed-alice", tmp_path / "alice")
    stack.push_async_callback(alice.client.close)
    bot = synapse.register("mixed-elicitbot")
    room = await encrypted_room(alice, [bot.user_id])
    await homeserver.call(bot, "POST", f"/join/{room}", {})
    await sync(alice.client)
    store = SqlStore.from_url(store_url)
    stack.push_async_callback(store.close)
    scratch = tmp_path / "bot"
    scratch.mkdir()
    matrix = matrix_chat(
        synapse.base_url,
        bot.user_id,
        bot.device_id,
        bot.access_token,
        pickle_key=PICKLE_KEY,
        states=store,
        clock=clock,
        scratch=scratch,
    )
    stack.push_async_callback(matrix.client.close)
    fake = stack.enter_context(FakeSlack())
    slack_chat = SlackChat(
        AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]),
        pacer=Pacer(FAST),
    )
    sink = FakeSink()
    dispatcher = Dispatcher(
        store,
        clock,
        {"slack": slack_chat, "matrix": matrix},
        {"superpipeline": sink},
        lambda key: f"http://127.0.0.1:8787/#{key}",
    )
    people, route = policy(alice.user, room)
    bots = frozenset({f"slack:{BOT_USER}", f"matrix:{bot.user_id}"})
    people = people.model_copy(update={"bot_identities": bots})
    service = AtOnce(store, clock, people, [route], on_change=dispatcher.wake)
    dispatcher.effects.policy = service.copy_policy  # the root passes it
    await slack_chat.verify()
    slack = build_app(slack_chat, service, signing_secret=SIGNING_SECRET, raw=store, clock=clock)
    stack.push_async_callback(slack.aclose)
    inbox = inbox_router(service, store, identity or IdentityPolicy(), clock=clock)
    app = create_app(
        Runtime(store=store, elicitations=service, routers=[slack_router(slack.app), inbox])
    )
    http = await stack.enter_async_context(
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://elicitbot.test")
    )
    listener = MatrixListener(matrix, service, store, device_id=bot.device_id, key_wait=KEY_WAIT)
    stack.push_async_callback(listener.stop)
    await listener.start()
    await until(flag(lambda: listener.ready), "the first sync")
    return Mixed(
        store,
        sink,
        fake,
        slack_chat,
        matrix,
        dispatcher,
        service,
        listener,
        slack,
        http,
        Reader(alice),
        bot,
        room,
        app,
    )


@pytest.fixture
async def mixed(
    synapse: Synapse, homeserver: Homeserver, sqlite_url: str, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Mixed]:
    """The route: Slack C1, alice's encrypted room, alice in a DM."""
    async with contextlib.AsyncExitStack() as stack:
        yield await start_mixed(stack, synapse, homeserver, sqlite_url, clock, tmp_path)


def event(event_id: str, events: dict[str, Any]) -> Any:
    return events.get(event_id)


def from_bot(mixed: Mixed, events: dict[str, Any], kind: type[Any]) -> list[Any]:
    return [e for e in events.values() if isinstance(e, kind) and e.sender == mixed.bot.user_id]


def relation(event: Any) -> dict[str, Any]:
    relates = event.source.get("content", {}).get("m.relates_to", {})
    return relates if isinstance(relates, dict) else {}


def edits_of(mixed: Mixed, events: dict[str, Any], prompt: str) -> list[Any]:
    """The bot's edits of ``prompt``, as alice decrypted them."""
    return [
        e
        for e in from_bot(mixed, events, RoomMessageText)
        if e.decrypted and relation(e) == {"rel_type": "m.replace", "event_id": prompt}
    ]


def thread_notices(mixed: Mixed, events: dict[str, Any], prompt: str) -> list[Any]:
    """The bot's notices in ``prompt``'s thread, as alice decrypted them."""
    return [
        e
        for e in from_bot(mixed, events, RoomMessageNotice)
        if e.decrypted and relation(e).get("event_id") == prompt
    ]


@dataclass(frozen=True)
class Copies:
    """One elicitation's three posted copies."""

    key: ElicitationKey
    slack: SlackRef
    room: MatrixRef
    dm: MatrixRef


async def post_everywhere(m: Mixed, question: str) -> Copies:
    """Intake, post the three copies; alice accepts the DM and reads both prompts, decrypted."""
    key = await m.intake_options(question)
    await m.dispatcher.drain()  # the three posts, then the seeded reactions
    copies = {d.destination: d for d in await m.store.deliveries(key)}
    assert sorted(copies) == sorted([f"slack:{C1}", f"matrix:{m.room}", m.alice_user.key])
    assert {d.state for d in copies.values()} == {"posted"}
    slack, room = copies[f"slack:{C1}"].ref, copies[f"matrix:{m.room}"].ref
    dm = copies[m.alice_user.key].ref
    assert isinstance(slack, SlackRef)
    assert isinstance(room, MatrixRef)
    assert isinstance(dm, MatrixRef)
    assert room.room_id == m.room
    assert dm.room_id.startswith("!")
    assert dm.room_id != m.room
    assert m.matrix.direct.created == 1

    assert await m.alice.join_invites() == [dm.room_id]
    for ref in (room, dm):
        seen = await m.alice.until(ref.room_id, functools.partial(event, ref.event_id), "a prompt")
        assert isinstance(seen, RoomMessageText)
        assert seen.decrypted
        assert question in seen.body
    await m.alice.until(
        dm.room_id, lambda ev: from_bot(m, ev, ReactionEvent), "the seeded reactions in the DM"
    )
    message = m.fake.message(C1, slack.ts)
    assert message is not None
    assert has_actions(message)
    return Copies(key, slack, room, dm)


async def answer_at_once(m: Mixed, copies: Copies) -> str:
    """Alice reacts 1️⃣ (Allow once) in the DM, encrypted, while Bob clicks Deny on Slack; one
    wins, the other is told. Returns the label of the winning option."""
    message = m.fake.message(C1, copies.slack.ts)
    assert message is not None
    dm = copies.dm
    m.service.hold(2)
    _, status = await asyncio.gather(
        send_encrypted(m.alice.client, dm.room_id, "m.reaction", reaction(dm.event_id, ONE)),
        m.click(message, button(message, "deny"), BOB),
    )
    assert status == 200
    answer = await m.answered(copies.key)
    assert sorted(m.service.held) == sorted([f"slack:{C1}", f"matrix:{dm.room_id}"])
    await m.slack.idle()
    [told_in_dm] = await m.alice.until(
        dm.room_id, lambda ev: thread_notices(m, ev, dm.event_id), "the bot's word in the DM"
    )
    await m.listener.drain()
    print(f"\nheld in order {m.service.held}; the answer: {answer.respondent} via {answer.via}")

    audit = await m.store.audit(copies.key)
    assert len([a for a in audit if a.action == "answer"]) == 1
    assert [a.code for a in audit if a.action == "refusal"] == ["already_answered"]
    bob_told = [e for e in m.fake.ephemerals() if e["user"] == BOB]
    if answer.respondent == m.alice_user.key:
        assert answer.option_ids == ("allow_once",)
        assert answer.via == f"matrix:{dm.room_id}"
        assert "Recorded: Allow once" in told_in_dm.body
        [ephemeral] = bob_told
        assert ephemeral["text"].startswith("Already answered by "), ephemeral
        assert "(Allow once)" in ephemeral["text"]
        return "Allow once"
    assert (answer.respondent, answer.option_ids) == (f"slack:{BOB}", ("deny",))
    assert answer.via == f"slack:{C1}"
    assert bob_told == []
    assert "Already answered by " in told_in_dm.body
    assert "(Deny)" in told_in_dm.body
    assert told_in_dm.source["content"]["m.mentions"] == {"user_ids": [m.alice_user.user_id]}
    return "Deny"


async def every_copy_edited(m: Mixed, copies: Copies, winner: str) -> None:
    """The write-back goes upstream once; then each copy shows the answer (printed)."""
    await m.dispatcher.drain()
    assert [d.idempotency_key for d in m.sink.delivered] == [writeback_key(copies.key)]
    assert m.sink.attempts == [writeback_key(copies.key)]
    [update] = m.fake.calls_to("chat.update")
    assert (update.params["channel"], update.params["ts"]) == (C1, copies.slack.ts)
    final = m.fake.message(C1, copies.slack.ts)
    assert final is not None
    assert not has_actions(final)
    shown = json.dumps(final["blocks"], ensure_ascii=False)
    assert "Answered by" in shown
    assert f"— {winner} —" in shown
    print(
        "Slack, the final Block Kit:\n" + json.dumps(final["blocks"], indent=2, ensure_ascii=False)
    )

    for ref in (copies.room, copies.dm):
        [edit] = await m.alice.until(
            ref.room_id, functools.partial(edits_of, m, prompt=ref.event_id), "the prompt edited"
        )
        new = edit.source["content"]["m.new_content"]
        assert "Answered by" in new["body"]
        assert f"— {winner} —" in new["body"]
        print(f"Matrix {ref.room_id}, the final HTML:\n{new['formatted_body']}")


async def test_a_mixed_route_converges_to_one_answer_with_every_copy_edited(
    mixed: Mixed, synapse: Synapse
) -> None:
    started = time.monotonic()
    question = f"May I run migration {uuid.uuid4().hex}?"
    copies = await post_everywhere(mixed, question)
    winner = await answer_at_once(mixed, copies)
    await every_copy_edited(mixed, copies, winner)

    # The homeserver holds only encrypted events from the bot in both rooms, no question text.
    await mixed.listener.drain()
    for room_id in (copies.room.room_id, copies.dm.room_id):
        stored = server_events(synapse, room_id).values()
        sent = {e.type for e in stored if e.sender == mixed.bot.user_id and e.state_key is None}
        assert sent == {"m.room.encrypted"}, (room_id, sent)
    assert question.encode() not in server_bytes(synapse)
    print(f"mixed route: {time.monotonic() - started:.2f} s")


async def test_a_refused_write_back_of_an_answer_in_the_dm_is_told_in_its_copys_thread(
    mixed: Mixed,
) -> None:
    """As for any copy (tests/integration/test_writeback_loop.py): the person whose answer the
    upstream refused is told in the thread of the copy they answered, here the DM's."""
    m = mixed
    copies = await post_everywhere(m, f"May I run migration {uuid.uuid4().hex}?")
    dm = copies.dm
    await send_encrypted(m.alice.client, dm.room_id, "m.reaction", reaction(dm.event_id, ONE))
    assert (await m.answered(copies.key)).respondent == m.alice_user.key
    m.sink.fail_next(1, PermanentDeliveryError(REFUSAL))

    await m.dispatcher.drain()
    [refused] = await m.alice.until(
        dm.room_id,
        lambda ev: [e for e in from_bot(m, ev, RoomMessageNotice) if REFUSAL in e.body],
        "the refusal, in the DM",
    )
    assert refused.decrypted
    assert relation(refused).get("event_id") == dm.event_id, relation(refused)

"""Matrix end to end against a real Synapse: SqlStore + Service + Dispatcher + MatrixChat/Listener.

Each test gets fresh rooms (made by alice, a workspace admin; bob, the agent's account and the
bot join) and a fresh SQLite database; the accounts are shared by the session. The service's
clock is a FakeClock (2026-11-10 09:30 UTC, before the approval subject expires); the homeserver
runs on real time. People act through the raw client-server API (``Homeserver``), the bot
through nio; everything is checked on what the homeserver holds, not only on our own records.

The outage test stops Synapse for ``OUTAGE_SECONDS`` (20 s, shortened from the 60 s of
reliability.md §8.7 to keep the suite short; the behaviour does not depend on the length: the
listener backs off at most 5 s between attempts and the outbox retries on its clock).
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.matrix import MatrixChat, MatrixListener, make_client
from adapters.matrix.chat import post_txn
from adapters.matrix.render import KEYCAPS, MARKER
from adapters.matrix.sync import ENCRYPTED_NOTICE, token_key
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.errors import (
    ConfigError,
    PermanentDeliveryError,
    StoreError,
    TransientDeliveryError,
)
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    Elicitation,
    Identity,
    People,
    Route,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import USE_PRIVATE_FORM
from bot.outbox import Dispatcher, writeback_key
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.synapse import Cast, Homeserver, MatrixUser, Synapse
from tests.unit.domain.builders import elicitation
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

    @property
    def bot(self) -> Bot:
        return self.bots[-1]

    @property
    def destination(self) -> str:
        return f"matrix:{self.room}"

    async def start_bot(self, **listener_options: Any) -> Bot:
        """A new bot process on the same store, token and device (as after a restart)."""
        user = self.cast.bot
        chat = MatrixChat(
            make_client(self.hs.base_url, user.user_id, user.device_id, user.access_token)
        )
        dispatcher = Dispatcher(
            self.store,
            self.clock,
            {"matrix": chat},
            {"superpipeline": self.sink},
            lambda key: f"http://127.0.0.1:8787/#{key}",
            claimer=f"bot-{len(self.bots)}",
        )
        service = Service(
            self.store,
            self.clock,
            people(self.cast),
            [Route(destinations=(self.destination,))],
            on_change=dispatcher.wake,
        )
        listener = MatrixListener(
            chat, service, self.store, device_id=user.device_id, **listener_options
        )
        await listener.start()
        bot = Bot(chat, dispatcher, service, listener)
        self.bots.append(bot)
        await until(flag(lambda: listener.ready), "the first sync")
        return bot

    async def intake(self, case: str = "options", **changes: Any) -> str:
        data = copy.deepcopy(VALID[case])
        data.update(changes)
        return await self.intake_elicitation(parse_body(data, workspace="acme"))

    async def intake_elicitation(self, e: Elicitation) -> str:
        [outcome] = await self.bot.service.intake(
            [Inbound("ce:/superpipeline/test", f"ce-{e.key}", e, {})]
        )
        assert outcome.result == "accepted", outcome
        return outcome.key

    async def post(self, case: str = "options", **changes: Any) -> tuple[str, str]:
        """Take a fixture in and post it; returns (elicitation key, event id)."""
        key = await self.intake(case, **changes)
        assert await self.bot.dispatcher.run_once() == 1
        [delivery] = await self.store.deliveries(key)
        assert delivery["state"] == "posted", delivery
        ref = delivery["ref"]
        assert ref == {"room_id": self.room, "event_id": ref["event_id"], "key": ref["event_id"]}
        assert delivery["ref_key"] == ref["event_id"]
        return key, str(ref["event_id"])

    async def settle(self, user: MatrixUser) -> None:
        """Send a plain message and wait until the listener has seen it: everything sent
        before it has been handled."""
        marker = await self.hs.say(user, self.room, "marker")
        await until(flag(lambda: self.bot.listener.last_event_id == marker), "the marker")
        await self.bot.listener.drain()
        await asyncio.sleep(0.3)  # a notice sent in reply would be in the timeline by now

    async def status(self, key: str) -> Status:
        view = await self.bot.service.view(key)
        assert view is not None
        return view.status

    async def answered(self, key: str) -> Answer:
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


def refusal_of(notice: dict[str, Any], user: MatrixUser) -> str:
    """The text of a notice that must name and mention ``user``."""
    content = notice["content"]
    assert content["m.mentions"] == {"user_ids": [user.user_id]}, content
    prefix = f"{user.user_id}: "
    assert content["body"].startswith(prefix), content["body"]
    return str(content["body"][len(prefix) :])


# --------------------------------------------------------------------------- posting


@pytest.mark.parametrize(
    ("case", "reactions"),
    [
        ("options", [ONE, TWO, THREE]),
        ("approval-request", [ONE, TWO, THREE]),
        ("free-text", []),
        ("no-options-no-question", []),
    ],
)
async def test_every_superpipeline_fixture_is_posted_once_with_its_reactions(
    rig: Rig, case: str, reactions: list[str]
) -> None:
    key, event_id = await rig.post(case)

    event = await rig.hs.event(rig.cast.alice, rig.room, event_id)
    content = event["content"]
    assert event["sender"] == rig.cast.bot.user_id
    assert content[MARKER] == {"key": key, "version": 1}
    assert content["m.mentions"] == {}
    assert content["format"] == "org.matrix.custom.html"
    question = VALID[case]["question"]
    assert question in content["body"]
    assert f"Web inbox: http://127.0.0.1:8787/#{key}" in content["body"]
    for number, option in enumerate(VALID[case]["options"]):
        assert f"{KEYCAPS[number]} {option['label']}" in content["body"]
    assert sorted(await rig.seeded(event_id)) == sorted(reactions)
    assert len(await rig.prompts(key)) == 1
    assert await rig.status(key) is Status.PENDING


# --------------------------------------------------------------------------- answering


async def test_a_reaction_answers_once_edits_the_prompt_and_tells_the_thread(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.alice, rig.room, event_id, ONE)
    answer = await rig.answered(key)

    assert (answer.option_ids, answer.respondent) == (("allow_once",), rig.cast.alice.key)
    assert answer.via == rig.destination
    [confirmation] = await rig.wait_notices(event_id, 1)
    assert confirmation["content"]["body"] == (
        f"{rig.cast.alice.user_id}: ✅ Recorded: Allow once. Thank you."
    )
    assert confirmation["content"]["m.mentions"] == {}

    assert await rig.bot.dispatcher.run_once() == 2  # the edit and the write-back
    [edit] = await rig.edits(event_id)
    new = edit["content"]["m.new_content"]
    assert (
        f"✅ Answered by {rig.cast.alice.user_id} — Allow once — 2026-11-10 09:30 UTC via Matrix"
        in new["body"]
    )
    assert new[MARKER] == {"key": key, "version": 2}
    assert "react with" not in new["body"]
    [delivered] = rig.sink.delivered
    assert delivered.idempotency_key == writeback_key(key)

    # Later reactions are told who answered; taking the reaction back changes nothing.
    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    [_, told] = await rig.wait_notices(event_id, 2)
    assert refusal_of(told, rig.cast.bob).startswith(
        f"Already answered by {rig.cast.alice.user_id} (Allow once)"
    )
    [alice_reaction] = [
        e["event_id"]
        for e in await rig.timeline()
        if e["type"] == "m.reaction" and e["sender"] == rig.cast.alice.user_id
    ]
    await rig.hs.redact(rig.cast.alice, rig.room, alice_reaction)
    await rig.hs.react(rig.cast.alice, rig.room, event_id, ONE)  # the same key again
    await rig.settle(rig.cast.bob)
    assert len(await rig.notices(event_id)) == 2, "a reaction made again is not a new attempt"
    assert await rig.answered(key) == answer
    assert len([a for a in await rig.store.audit(key) if a["action"] == "answer"]) == 1
    assert len(rig.sink.delivered) == 1


@pytest.mark.parametrize(
    ("case", "body", "fallback", "expected"),
    [
        (
            "free-text",
            "main, please",
            "Which branch should I base this on?",
            (None, "main, please"),
        ),
        ("options", "deny", "May I run the migration?", ("deny", None)),
        ("options", "3", None, ("deny", None)),
        ("no-options-no-question", "looks fine", None, (None, "looks fine")),
        ("approval-request", "Allow once", None, ("allow_once", None)),
    ],
)
async def test_a_thread_reply_answers_with_the_fallback_stripped(
    rig: Rig, case: str, body: str, fallback: str | None, expected: tuple[str | None, str | None]
) -> None:
    key, event_id = await rig.post(case)

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, body, fallback=fallback)
    answer = await rig.answered(key)

    option, text = expected
    assert answer.option_ids == ((option,) if option else ())
    assert answer.text == text
    assert answer.respondent == rig.cast.bob.key
    subject = VALID[case].get("approvalSubject")
    assert answer.subject_digest == (subject["digest"] if subject else None)
    [confirmation] = await rig.wait_notices(event_id, 1)
    assert "✅ Recorded" in confirmation["content"]["body"]
    reply_id = next(
        e["event_id"]
        for e in await rig.timeline()
        if e["sender"] == rig.cast.bob.user_id and e["type"] == "m.room.message"
    )
    assert confirmation["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": reply_id}
    assert await rig.bot.dispatcher.run_once() == 2
    [edit] = await rig.edits(event_id)
    assert f"✅ Answered by {rig.cast.bob.user_id}" in edit["content"]["m.new_content"]["body"]


async def test_a_reply_naming_nothing_gets_help_and_the_question_stays_open(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "what would this do?")
    [help_] = await rig.wait_notices(event_id, 1)

    text = refusal_of(help_, rig.cast.bob)
    assert text.startswith("To answer, reply with the number, id or label of one option:")
    assert "2. Always allow (allow_always) (workspace admins only)" in text
    assert await rig.status(key) is Status.PENDING
    assert [a["action"] for a in await rig.store.audit(key)].count("refusal") == 0


async def test_the_agents_account_is_refused_with_a_threaded_mention(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.agent, rig.room, event_id, THREE)
    await rig.hs.reply_in_thread(rig.cast.agent, rig.room, event_id, "deny")
    await rig.hs.reply_in_thread(rig.cast.agent, rig.room, event_id, "please tell me how")
    notices = await rig.wait_notices(event_id, 3)

    for notice in notices:
        assert refusal_of(notice, rig.cast.agent) == (
            "You asked this question, so you cannot answer it."
        )
    assert await rig.status(key) is Status.PENDING
    refusals = [a for a in await rig.store.audit(key) if a["action"] == "refusal"]
    assert [(r["actor"], r["code"]) for r in refusals] == [(rig.cast.agent.key, "asker")] * 3

    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    assert (await rig.answered(key)).respondent == rig.cast.bob.key


async def test_a_non_admin_is_refused_an_admin_only_option_and_an_admin_is_not(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.bob, rig.room, event_id, TWO)
    [refused] = await rig.wait_notices(event_id, 1)
    assert refusal_of(refused, rig.cast.bob) == "Only a workspace admin can choose “Always allow”."
    assert await rig.status(key) is Status.PENDING

    await rig.hs.reply_in_thread(rig.cast.alice, rig.room, event_id, "always allow")
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("allow_always",), rig.cast.alice.key)


async def test_two_people_at_once_one_wins_and_the_other_is_told_who(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await asyncio.gather(
        rig.hs.react(rig.cast.alice, rig.room, event_id, ONE),
        rig.hs.react(rig.cast.bob, rig.room, event_id, THREE),
    )
    answer = await rig.answered(key)
    notices = await rig.wait_notices(event_id, 2)

    winner, loser = (
        (rig.cast.alice, rig.cast.bob)
        if answer.respondent == rig.cast.alice.key
        else (rig.cast.bob, rig.cast.alice)
    )
    [told] = [n for n in notices if n["content"]["m.mentions"]]
    assert refusal_of(told, loser).startswith(f"Already answered by {winner.user_id} (")
    assert len([a for a in await rig.store.audit(key) if a["action"] == "answer"]) == 1
    assert await rig.bot.dispatcher.run_once() == 2
    assert len(await rig.edits(event_id)) == 1


async def test_an_edit_is_a_new_attempt_only_while_open_and_never_changes_the_answer(
    rig: Rig,
) -> None:
    key, event_id = await rig.post("options")

    reply = await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "hmm")
    await rig.wait_notices(event_id, 1)  # how to answer
    await rig.hs.edit(rig.cast.alice, rig.room, reply, "3")  # not hers to edit: ignored
    await rig.hs.edit(rig.cast.bob, rig.room, reply, "deny")
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("deny",), rig.cast.bob.key)

    await rig.hs.edit(rig.cast.bob, rig.room, reply, "allow once")
    await rig.settle(rig.cast.bob)
    assert await rig.answered(key) == answer
    assert len(await rig.notices(event_id)) == 2, "help, then the recorded edit; nothing after"


async def test_a_slack_answer_edits_the_matrix_copy(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    alice_on_slack = Identity(platform="slack", user="U0ALICE", display_name="Alice")

    outcome = await rig.bot.service.answer(
        key, Attempt(respondent=alice_on_slack, option_ids=("deny",), via="slack:C0APPROVALS")
    )
    assert outcome.won
    assert await rig.bot.dispatcher.run_once() == 2

    [edit] = await rig.edits(event_id)
    assert (
        "✅ Answered by Alice — Deny — 2026-11-10 09:30 UTC via Slack"
        in (edit["content"]["m.new_content"]["body"])
    )
    await rig.hs.react(rig.cast.bob, rig.room, event_id, ONE)
    [told] = await rig.wait_notices(event_id, 1)
    assert refusal_of(told, rig.cast.bob).startswith("Already answered by Alice (Deny)")
    assert "via Slack" in told["content"]["body"]


async def test_a_secret_typed_in_a_thread_is_not_taken_and_is_taken_out_of_the_room(
    rig: Rig, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    canary = "CANARY-s3cr3t-7f41d2"
    key = await rig.intake_elicitation(
        elicitation(
            source_id="sec_1",
            question="Paste the deploy token",
            answer_mode=AnswerMode.SECRET,
            options=(),
        )
    )
    assert await rig.bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    root = delivery["ref"]["event_id"]

    reply = await rig.hs.reply_in_thread(rig.cast.bob, rig.room, root, canary)
    [told] = await rig.wait_notices(root, 1)

    assert refusal_of(told, rig.cast.bob) == USE_PRIVATE_FORM

    async def redacted() -> bool:
        event = await rig.hs.event(rig.cast.alice, rig.room, reply)
        return not event["content"]

    await until(redacted, "the secret redacted")
    assert await rig.status(key) is Status.PENDING
    assert canary not in json.dumps(await rig.store.audit(key), default=str)
    database = Path(rig.url.removeprefix("sqlite:///"))
    for path in database.parent.glob(database.name + "*"):
        assert canary.encode() not in path.read_bytes(), path
    logged = capsys.readouterr()
    for text in (logged.out, logged.err, caplog.text):
        assert canary not in text
        assert rig.cast.bot.access_token not in text


# --------------------------------------------------------------------------- restarts, outages


async def test_a_restart_replays_nothing_and_a_post_cut_off_is_not_doubled(rig: Rig) -> None:
    _, event_id = await rig.post("options")
    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "what is this?")
    await rig.wait_notices(event_id, 1)
    saved = await rig.store.get_value(token_key(rig.cast.bot.user_id, rig.cast.bot.device_id))
    assert saved == rig.bot.listener.since

    # The process dies after the homeserver took a post but before its ref was stored.
    second = await rig.intake("free-text")
    [row] = await rig.store.claim_outbox(rig.clock.now(), "dead-process")
    stored = await rig.store.get(second)
    assert stored is not None
    view = PromptView(
        stored.elicitation, stored.status, None, stored.version, "http://x/", rig.clock.now()
    )
    orphan = await rig.bot.chat.post(
        rig.destination, view, idempotency_key=f"elicitbot-{row.id}", uncertain=False
    )
    await rig.bot.close()
    rig.bots.pop()

    bot = await rig.start_bot()
    rig.clock.advance(61)  # the dead process's lease runs out
    assert await bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(second)
    assert delivery["ref"] == orphan, "the same transaction id gave back the same event"
    assert len(await rig.prompts(second)) == 1

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, orphan["event_id"], "develop")
    assert (await rig.answered(second)).text == "develop"
    await rig.wait_notices(orphan["event_id"], 1)
    assert bot.listener.handled == 1, "nothing from before the restart was handled again"
    assert len(await rig.notices(event_id)) == 1
    assert post_txn(f"elicitbot-{row.id}", second).startswith(f"elicitbot-{row.id}.")


class FlakyService(Service):
    """The service with its database failing for the first ``fail`` answers."""

    def __init__(self, *args: Any, fail: int, log: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail = fail
        self.log = log

    async def answer(self, key: str, attempt: Attempt) -> Any:
        if self.fail:
            self.fail -= 1
            self.log.append("failed")
            raise StoreError("database is down")
        outcome = await super().answer(key, attempt)
        self.log.append("answered")
        return outcome


class RecordingValues:
    """The KeyValue port over the store, logging each sync token saved."""

    def __init__(self, store: SqlStore, log: list[str]) -> None:
        self.store = store
        self.log = log

    async def get_value(self, key: str) -> str | None:
        return await self.store.get_value(key)

    async def set_value(self, key: str, value: str) -> None:
        await self.store.set_value(key, value)
        self.log.append("saved")


async def test_a_failed_batch_is_handled_again_before_its_token_is_saved(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    await rig.bot.listener.stop()
    log: list[str] = []
    flaky = FlakyService(
        rig.store,
        rig.clock,
        people(rig.cast),
        [Route(destinations=(rig.destination,))],
        fail=2,
        log=log,
    )
    listener = MatrixListener(
        rig.bot.chat,
        flaky,
        RecordingValues(rig.store, log),
        device_id=rig.cast.bot.device_id,
        max_backoff=0.2,
    )
    await listener.start()
    try:
        await until(flag(lambda: listener.ready), "the first sync")
        log.clear()
        await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
        answer = await rig.answered(key)
        await until(flag(lambda: "saved" in log), "the token saved")
    finally:
        await listener.drain()
        await listener.stop()

    assert answer.respondent == rig.cast.bob.key
    assert log[: log.index("saved") + 1] == ["failed", "failed", "answered", "saved"]
    assert len([a for a in await rig.store.audit(key) if a["action"] == "answer"]) == 1
    assert len(await rig.notices(event_id)) == 1


async def test_a_limited_sync_is_backfilled_from_the_last_token(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    await rig.bot.close()
    rig.bots.pop()

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "deny")
    for n in range(8):
        await rig.hs.say(rig.cast.alice, rig.room, f"chatter {n}")

    bot = await rig.start_bot(timeline_limit=3)
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("deny",), rig.cast.bob.key)
    assert bot.listener.backfilled >= 6
    await rig.wait_notices(event_id, 1)


@pytest.mark.slow
async def test_a_homeserver_outage_then_the_same_transaction_ids_give_one_event_each(
    rig: Rig,
) -> None:
    key, event_id = await rig.post("options")
    # A post the homeserver took just before it went down, its answer lost on the way back.
    cut_off = await rig.intake("approval-request")
    [row] = await rig.store.claim_outbox(rig.clock.now(), "dead-process")
    stored = await rig.store.get(cut_off)
    assert stored is not None
    view = PromptView(
        stored.elicitation, stored.status, None, stored.version, "http://x/", rig.clock.now()
    )
    orphan = await rig.bot.chat.post(
        rig.destination, view, idempotency_key=f"elicitbot-{row.id}", uncertain=False
    )

    rig.synapse.stop()
    try:
        during = await rig.intake("free-text")
        assert await rig.bot.dispatcher.run_once() == 1
        [failed] = await rig.store.outbox(during)
        assert failed["state"] == "pending"
        assert "ClientConnectorError" in failed["last_error"]
        await until(flag(lambda: not rig.bot.listener.ready), "not ready")
        await asyncio.sleep(OUTAGE_SECONDS)
        assert not rig.bot.listener.ready
    finally:
        rig.synapse.start()

    await until(flag(lambda: rig.bot.listener.ready), "ready again", within=30)
    rig.clock.advance(120)
    assert await rig.bot.dispatcher.run_once() == 2  # the cut-off post and the failed one
    [adopted] = await rig.store.deliveries(cut_off)
    assert adopted["ref"] == orphan
    assert len(await rig.prompts(cut_off)) == 1
    assert len(await rig.prompts(during)) == 1
    assert len(await rig.prompts(key)) == 1
    [posted] = await rig.store.deliveries(during)
    await rig.hs.reply_in_thread(rig.cast.alice, rig.room, posted["ref"]["event_id"], "main")
    assert (await rig.answered(during)).text == "main"
    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    assert (await rig.answered(key)).option_ids == ("deny",)


async def test_a_refused_token_or_another_device_stops_the_start_by_name(
    homeserver: Homeserver, synapse: Synapse, cast: Cast, sqlite_url: str, clock: FakeClock
) -> None:
    store = SqlStore.from_url(sqlite_url)
    service = Service(store, clock, people(cast), [])
    bot = cast.bot
    other_device = synapse.login(bot, "ANOTHERDEVICE")
    cases = [
        (bot.device_id, "not-a-real-token", "matrix.access_token_env: the homeserver refused"),
        (bot.device_id, other_device.access_token, "matrix.device_id: the token belongs to"),
    ]
    try:
        for device_id, token, message in cases:
            chat = MatrixChat(make_client(homeserver.base_url, bot.user_id, device_id, token))
            listener = MatrixListener(chat, service, store, device_id=device_id)
            try:
                with pytest.raises(ConfigError, match=message) as refused:
                    await listener.start()
                assert token not in str(refused.value)
                assert not listener.ready
            finally:
                await chat.client.close()
    finally:
        await store.close()


async def test_stopping_the_listener_does_not_wait_for_the_long_poll(rig: Rig) -> None:
    await asyncio.sleep(0.3)  # the listener is now inside a 30 s long poll
    started = time.monotonic()
    await rig.bot.listener.stop()
    assert time.monotonic() - started < 1.0
    assert not rig.bot.listener.ready


# --------------------------------------------------------------------------- rooms and commands


async def command(rig: Rig, user: MatrixUser, room: str, text: str) -> str:
    """Send a command; return the bot's reply to it."""
    sent = await rig.hs.say(user, room, text)

    async def reply() -> str | None:
        await rig.bot.listener.drain()
        for e in await rig.hs.messages(rig.cast.alice, room):
            relates = e["content"].get("m.relates_to", {})
            if (
                e["sender"] == rig.cast.bot.user_id
                and relates.get("m.in_reply_to", {}).get("event_id") == sent
            ):
                return str(e["content"]["body"])
        return None

    text_: str = await until(reply, f"the reply to {text!r}")
    return text_


async def test_admins_and_moderators_route_rooms_but_moderators_are_not_admins(rig: Rig) -> None:
    room = await rig.hs.make_room(
        rig.cast.alice,
        [rig.cast.bot, rig.cast.bob, rig.cast.agent],
        power={rig.cast.bob.user_id: 50},
    )

    assert await command(rig, rig.cast.agent, room, "!elicitbot subscribe acme") == (
        "Only workspace admins or room moderators (power level 50 or more) can run elicitbot "
        "commands."
    )
    assert await command(rig, rig.cast.bob, room, "!elicitbot subscribe acme board brd_1") == (
        "Subscribed: questions from workspace acme board brd_1 now come to this room."
    )
    assert await command(rig, rig.cast.alice, room, "!elicitbot subscribe acme") == (
        "Subscribed: questions from workspace acme now come to this room."
    )
    routes = await command(rig, rig.cast.alice, room, "!elicitbot routes")
    assert f"• everything -> {rig.destination} (config)" in routes
    assert f"• workspace=acme board=brd_1 -> matrix:{room} (chat)" in routes
    assert f"• workspace=acme -> matrix:{room} (chat)" in routes
    assert await command(rig, rig.cast.bob, room, "!elicitbot unsubscribe acme board brd_1") == (
        "Unsubscribed: questions from workspace acme board brd_1 no longer come to this room."
    )
    assert (await command(rig, rig.cast.bob, room, "!elicitbot frob")).startswith(
        "Unknown command 'frob'.\nelicitbot commands:"
    )
    assert {r["created_by"] for r in await rig.store.chat_routes()} == {rig.cast.alice.key}

    # The moderator's power level does not make them a workspace admin.
    key, event_id = await rig.post("options")
    await rig.hs.react(rig.cast.bob, rig.room, event_id, TWO)
    [refused] = await rig.wait_notices(event_id, 1)
    assert "Only a workspace admin" in refusal_of(refused, rig.cast.bob)
    assert await rig.status(key) is Status.PENDING


async def test_invites_from_admins_are_accepted_and_others_declined(rig: Rig) -> None:
    from_admin = await rig.hs.make_room(rig.cast.alice, [], invite_only=[rig.cast.bot])
    from_bob = await rig.hs.make_room(rig.cast.bob, [], invite_only=[rig.cast.bot])

    async def membership(room: str, owner: MatrixUser) -> str | None:
        path = f"/rooms/{room}/state/m.room.member/{rig.cast.bot.user_id}"
        state = await rig.hs.call(owner, "GET", path)
        value = state.get("membership")
        return value if value in ("join", "leave") else None

    assert await until(lambda: membership(from_admin, rig.cast.alice), "the join") == "join"
    assert await until(lambda: membership(from_bob, rig.cast.bob), "the decline") == "leave"


async def test_an_encrypted_room_is_refused_clearly(rig: Rig) -> None:
    room = await rig.hs.make_room(rig.cast.alice, [], invite_only=[rig.cast.bot], encrypted=True)

    async def warned() -> str | None:
        for e in await rig.hs.messages(rig.cast.alice, room):
            if e["sender"] == rig.cast.bot.user_id and e["content"].get("msgtype") == "m.notice":
                return str(e["content"]["body"])
        return None

    assert await until(warned, "the encryption notice") == ENCRYPTED_NOTICE

    key = await rig.intake("options")
    stored = await rig.store.get(key)
    assert stored is not None
    view = PromptView(stored.elicitation, stored.status, None, 1, "http://x/", rig.clock.now())
    with pytest.raises(PermanentDeliveryError, match="end-to-end encrypted"):
        await rig.bot.chat.post(f"matrix:{room}", view, idempotency_key="x", uncertain=False)


# --------------------------------------------------------------------------- 429 handling


class Throttling:
    """A homeserver stand-in answering ``PUT …/send`` with scripted 429s, then an event id."""

    def __init__(self, script: list[tuple[dict[str, str], dict[str, Any]]]) -> None:
        self.script = script
        self.times: list[float] = []

    async def send(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        if self.script:
            headers, body = self.script.pop(0)
            return web.json_response(
                {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests", **body},
                status=429,
                headers=headers,
            )
        return web.json_response({"event_id": f"$ev{len(self.times)}"})


async def serve(handler: Throttling) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_put("/_matrix/client/r0/rooms/{room}/send/{type}/{txn}", handler.send)
    app.router.add_put("/_matrix/client/v3/rooms/{room}/send/{type}/{txn}", handler.send)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("headers", "body", "least", "most"),
    [
        ({"Retry-After": "1"}, {}, 1.0, 1.5),
        ({}, {"retry_after_ms": 300}, 0.3, 0.8),
        ({"Retry-After": "0.5"}, {"retry_after_ms": 4000}, 0.5, 1.0),
    ],
    ids=["retry-after-header", "retry-after-ms", "header-wins"],
)
async def test_a_429_waits_as_the_server_says_then_succeeds(
    headers: dict[str, str], body: dict[str, Any], least: float, most: float
) -> None:
    throttle = Throttling([(headers, body)])
    runner, url = await serve(throttle)
    chat = MatrixChat(make_client(url, "@b:localhost", "DEV", "secret-token"))
    try:
        event_id = await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t1", "post")
    finally:
        await chat.client.close()
        await runner.cleanup()

    assert event_id == "$ev2"
    assert least <= throttle.times[1] - throttle.times[0] < most


async def test_a_long_or_endless_429_goes_back_to_the_outbox_with_its_delay() -> None:
    throttle = Throttling([({"Retry-After": "30"}, {})] + [({}, {"retry_after_ms": 10})] * 10)
    runner, url = await serve(throttle)
    chat = MatrixChat(make_client(url, "@b:localhost", "DEV", "secret-token"))
    try:
        started = time.monotonic()
        with pytest.raises(TransientDeliveryError) as long_wait:
            await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t1", "post")
        assert time.monotonic() - started < 1.0, "a 30 s Retry-After is not slept in place"
        assert long_wait.value.retry_after == 30.0
        assert len(throttle.times) == 1

        with pytest.raises(TransientDeliveryError) as endless:
            await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t2", "post")
        assert len(throttle.times) == 1 + 4, "bounded: the first try and three retries"
        assert endless.value.retry_after == 0.01
        assert "secret-token" not in str(endless.value)
    finally:
        await chat.client.close()
        await runner.cleanup()


async def test_the_homeserver_down_is_a_transient_error_at_once() -> None:
    from tests.synapse import free_port

    chat = MatrixChat(make_client(f"http://127.0.0.1:{free_port()}", "@b:l", "DEV", "tok"))
    try:
        started = time.monotonic()
        with pytest.raises(TransientDeliveryError, match="ClientConnectorError"):
            await chat.send("!r:l", "m.room.message", {"body": "x"}, "t", "post")
        assert time.monotonic() - started < 2.0
    finally:
        await chat.client.close()


async def test_im_on_it_in_the_thread_claims_the_question(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "!elicitbot claim")
    [notice] = await rig.wait_notices(event_id, 1)

    assert "is on it until" in notice["content"]["body"]
    view = await rig.bot.service.view(key)
    assert view is not None
    assert view.claim is not None
    assert view.claim.by == rig.cast.bob.key
    assert await rig.status(key) is Status.PENDING


async def test_a_raised_hand_reaction_claims_the_question(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.bob, rig.room, event_id, "🙋")
    [notice] = await rig.wait_notices(event_id, 1)

    assert "is on it until" in notice["content"]["body"]
    view = await rig.bot.service.view(key)
    assert view is not None
    assert view.claim is not None
    assert view.answer is None

"""The ChatAdapter contract, one suite over every implementation, so the fake cannot drift.

Each test runs against the recording :class:`~tests.fakes.FakeChat` (as Slack and as Matrix),
the real :class:`~adapters.slack.chat.SlackChat` on the fake Slack Web API
(:mod:`tests.slack_fake`) and the real :class:`~adapters.matrix.chat.MatrixChat` on the session's
Synapse (:mod:`tests.synapse`, a fresh room per test). The test bodies are the same for all: what
a platform recorded is read through a small :class:`Probe` per implementation (the fake's lists,
the Slack fake's stored messages and ephemerals, the Synapse room's timeline), never only from
what the adapter returned.

The contract:

- ``post`` returns a ref of the adapter's platform whose ``key`` is non-empty and distinct per post
  (and survives the store's JSON round trip); posting the same idempotency key again as
  uncertain (``uncertain=`` the moment the first attempt began) finds the first message instead of
  making a second one, and that message then shows the later view; an uncertain post nobody made
  before is posted;
- ``update`` of a posted ref shows the new view, and the same update again is harmless; a ref of
  another platform is a PermanentDeliveryError, and so is a destination of another platform;
- ``notify`` with a thread ref reaches the person in that thread (a refusal), and a reminder pings
  the route's people of this platform only;
- a question far over every message limit still posts (clipped), and its update too.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Destination, Elicitation, IdentityKey, Status
from bot.domain.ports import ChatAdapter, Notice, PromptView
from bot.domain.records import NoticeKind
from bot.domain.refs import InboxRef, MatrixRef, MessageRef, SlackRef, ref_from_json
from tests.fakes import FakeChat
from tests.slack_fake import FakeSlack
from tests.synapse import Cast, Homeserver, Synapse
from tests.unit.domain.builders import NOW, answer, elicitation

LINK = "http://127.0.0.1:8787/#superpipeline:eli_contract"
LONG_QUESTION = 60_000
"""Characters: over Slack's 40,000 message text and 3,000 section limits and Matrix's 64 KiB."""

FOREIGN_REFS: tuple[MessageRef, ...] = (
    SlackRef(channel="C0ELSEWHERE", ts="1700000000.000001"),
    MatrixRef(room_id="!elsewhere:localhost", event_id="$elsewhere"),
    InboxRef(elicitation_key="superpipeline:eli_elsewhere"),
)
FOREIGN_DESTINATIONS = {"slack": "matrix:!elsewhere:localhost", "matrix": "slack:C0ELSEWHERE"}
PROMPT_MARKER = "org.elicitbot"
"""The content key MatrixChat puts on every prompt (and not on notices or edits)."""
OTHER_PERSON = {"slack": "matrix:@carol:localhost", "matrix": "slack:U0CAROL"}


@dataclass(frozen=True)
class Seen:
    """A notice as the platform holds it."""

    thread: str | None
    """The ``key`` of the message whose thread it is in (None: not in a thread)."""
    text: str
    to: frozenset[str]
    """Identity keys it is addressed to or pings."""


class Probe:
    """One implementation under test and how to read what its platform recorded."""

    platform: str
    chat: ChatAdapter
    destination: Destination
    person: str
    """An identity key of someone in the destination."""

    async def prompts(self) -> list[str]:
        """The ``key`` of every top-level message posted in the destination, oldest first."""
        raise NotImplementedError

    async def shows(self, ref: MessageRef) -> str:
        """Everything the message shows now (after its latest edit)."""
        raise NotImplementedError

    async def notices(self) -> list[Seen]:
        """Every notice in the destination, oldest first."""
        raise NotImplementedError


class FakeProbe(Probe):
    def __init__(self, platform: str) -> None:
        self.platform = platform
        self.fake = FakeChat(platform)
        self.chat = self.fake
        self.destination = Destination(
            "slack:C0CONTRACT" if platform == "slack" else "matrix:!room:localhost"
        )
        self.person = "slack:U0BOB" if platform == "slack" else "matrix:@bob:localhost"

    async def prompts(self) -> list[str]:
        return [str(p.ref.key) for p in self.fake.posted if p.destination == self.destination]

    async def shows(self, ref: MessageRef) -> str:
        view = self.fake.current(ref)
        assert view is not None, f"the fake never posted {ref!r}"
        shown = f"{view.elicitation.question}"
        if view.status is Status.ANSWERED and view.answer is not None:
            shown += f" ✅ Answered by {view.answer.respondent}"
        return shown

    async def notices(self) -> list[Seen]:
        own = f"{self.platform}:"
        seen: list[Seen] = []
        for n in self.fake.notified:
            if n.destination != self.destination:
                continue
            notice = n.notice
            to = {m for m in notice.mentions if m.startswith(own)}
            if notice.user and notice.mention:
                to.add(notice.user)
            thread = notice.thread.key if notice.thread is not None else None
            seen.append(Seen(thread, notice.text, frozenset(to)))
        return seen


class SlackProbe(Probe):
    platform = "slack"
    channel = "C0CONTRACT"
    destination = Destination(f"slack:{channel}")
    person = "slack:U0BOB"

    def __init__(self, fake: FakeSlack) -> None:
        from adapters.slack.chat import SlackChat  # here: a broken adapter fails only its tests

        self.fake = fake
        client = AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[])
        self.chat = SlackChat(client)

    async def prompts(self) -> list[str]:
        return [
            f"{self.channel}/{m['ts']}"
            for m in self.fake.messages(self.channel)
            if not m.get("thread_ts")
        ]

    async def shows(self, ref: MessageRef) -> str:
        assert isinstance(ref, SlackRef)
        message = self.fake.message(ref.channel, ref.ts)
        assert message is not None, f"Slack has no message {ref!r}"
        return f"{message['text']}\n{json.dumps(message['blocks'], ensure_ascii=False)}"

    async def notices(self) -> list[Seen]:
        """Ephemerals (only their user sees them) and public thread replies (reminders); the
        fake answers in call order, so ephemerals and replies interleave by their ts."""
        found: list[tuple[str, Seen]] = []
        for e in self.fake.ephemerals():
            if e.get("channel") == self.channel:
                thread = f"{self.channel}/{e['thread_ts']}" if e.get("thread_ts") else None
                seen = Seen(thread, str(e["text"]), frozenset({f"slack:{e['user']}"}))
                found.append((str(e["message_ts"]), seen))
        for m in self.fake.messages(self.channel):
            if m.get("thread_ts"):
                pinged = frozenset(f"slack:{u}" for u in re.findall(r"<@([UW]\w+)>", m["text"]))
                seen = Seen(f"{self.channel}/{m['thread_ts']}", str(m["text"]), pinged)
                found.append((str(m["ts"]), seen))
        return [seen for _, seen in sorted(found, key=lambda pair: float(pair[0]))]


class MatrixProbe(Probe):
    platform = "matrix"

    def __init__(self, hs: Homeserver, cast: Cast, room: str) -> None:
        from adapters.matrix.chat import MatrixChat, make_client  # as for Slack

        self.hs = hs
        self.cast = cast
        self.room = room
        self.destination = Destination(f"matrix:{room}")
        self.person = cast.bob.key
        bot = cast.bot
        self.matrix = MatrixChat(
            make_client(hs.base_url, bot.user_id, bot.device_id, bot.access_token)
        )
        self.chat = self.matrix

    async def _events(self) -> list[dict[str, Any]]:
        return [
            e
            for e in await self.hs.messages(self.cast.bot, self.room)
            if e["type"] == "m.room.message" and e["sender"] == self.cast.bot.user_id
        ]

    async def prompts(self) -> list[str]:
        return [
            str(e["event_id"])
            for e in await self._events()
            if PROMPT_MARKER in e["content"] and "m.relates_to" not in e["content"]
        ]

    async def shows(self, ref: MessageRef) -> str:
        assert isinstance(ref, MatrixRef)
        events = await self._events()
        [original] = [e for e in events if e["event_id"] == ref.event_id]
        content: dict[str, Any] = original["content"]
        for e in events:
            relates = e["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace" and relates.get("event_id") == ref.event_id:
                content = e["content"]["m.new_content"]
        return f"{content['body']}\n{content.get('formatted_body', '')}"

    async def notices(self) -> list[Seen]:
        seen: list[Seen] = []
        for e in await self._events():
            content = e["content"]
            if content.get("msgtype") != "m.notice":
                continue
            relates = content.get("m.relates_to") or {}
            thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
            users = (content.get("m.mentions") or {}).get("user_ids") or []
            seen.append(Seen(thread, str(content["body"]), frozenset(f"matrix:{u}" for u in users)))
        return seen

    async def close(self) -> None:
        await self.matrix.client.close()


IMPLEMENTATIONS = ["fake-slack", "fake-matrix", "slack", "matrix"]


@pytest.fixture(params=IMPLEMENTATIONS)
async def probe(request: pytest.FixtureRequest) -> AsyncIterator[Probe]:
    name = request.param
    if name.startswith("fake-"):
        yield FakeProbe(name.removeprefix("fake-"))
    elif name == "slack":
        with FakeSlack() as fake:
            yield SlackProbe(fake)
    else:
        server: Synapse = request.getfixturevalue("synapse")
        accounts: Cast = request.getfixturevalue("cast")
        server.start()  # a test that stopped it and failed before restarting must not break this
        async with httpx.AsyncClient() as client:
            hs = Homeserver(server, client)
            room = await hs.make_room(accounts.alice, [accounts.bot, accounts.bob])
            matrix = MatrixProbe(hs, accounts, room)
            try:
                yield matrix
            finally:
                await matrix.close()


def unique() -> str:
    return uuid.uuid4().hex[:12]


def question_of(tag: str, length: int | None = None) -> str:
    text = f"Q{tag}: may I run the migration?"
    return text if length is None else text + " lorem" * ((length - len(text)) // 6)


def pending(e: Elicitation, version: int = 1) -> PromptView:
    return PromptView(
        elicitation=e, status=Status.PENDING, answer=None, version=version, link=LINK, now=NOW
    )


def answered(e: Elicitation, version: int = 2) -> PromptView:
    result = answer(option_ids=("deny",))
    return PromptView(
        elicitation=e, status=Status.ANSWERED, answer=result, version=version, link=LINK, now=NOW
    )


def fresh(length: int | None = None) -> tuple[Elicitation, str]:
    """A new elicitation (its key and question carry a tag unique to the test) and the tag."""
    tag = unique()
    return elicitation(source_id=f"eli_{tag}", question=question_of(tag, length)), tag


REF_TYPES: dict[str, type[SlackRef] | type[MatrixRef]] = {"slack": SlackRef, "matrix": MatrixRef}


# --------------------------------------------------------------------------- post


async def test_post_returns_a_distinct_ref_of_the_platform(probe: Probe) -> None:
    assert probe.chat.platform == probe.platform
    e, tag = fresh()

    first = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}-1", uncertain=None
    )
    second = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}-2", uncertain=None
    )

    for ref in (first, second):
        assert isinstance(ref, REF_TYPES[probe.platform])
        assert ref.key
        assert ref_from_json(ref.to_json()) == ref, "the stored JSON reads back as the same ref"
    assert first.key != second.key
    assert await probe.prompts() == [first.key, second.key]
    assert f"Q{tag}" in await probe.shows(first)


async def test_an_uncertain_repost_adopts_the_first_message(probe: Probe) -> None:
    e, tag = fresh()
    key = f"post-{tag}"
    began = datetime.now(UTC)
    first = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=key, uncertain=None
    )

    again = await probe.chat.post(
        probe.destination, answered(e), idempotency_key=key, uncertain=began
    )

    assert again == first
    assert await probe.prompts() == [first.key], "one message, not two"
    assert "✅ Answered by" in await probe.shows(first), "the adopted message shows the later view"


async def test_an_uncertain_post_nobody_made_is_posted(probe: Probe) -> None:
    e, tag = fresh()
    began = datetime.now(UTC)
    await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"other-{tag}", uncertain=None
    )

    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=began
    )

    prompts = await probe.prompts()
    assert len(prompts) == 2
    assert prompts[-1] == ref.key


async def test_posting_to_another_platforms_destination_is_permanent(probe: Probe) -> None:
    e, tag = fresh()

    with pytest.raises(PermanentDeliveryError):
        await probe.chat.post(
            Destination(FOREIGN_DESTINATIONS[probe.platform]),
            pending(e),
            idempotency_key=f"post-{tag}",
            uncertain=None,
        )

    assert await probe.prompts() == []


# --------------------------------------------------------------------------- update


async def test_update_shows_the_view_and_repeating_it_is_harmless(probe: Probe) -> None:
    e, tag = fresh()
    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=None
    )
    assert "✅ Answered by" not in await probe.shows(ref)

    await probe.chat.update(probe.destination, ref, answered(e), idempotency_key=f"upd-{tag}")
    shown = await probe.shows(ref)
    await probe.chat.update(probe.destination, ref, answered(e), idempotency_key=f"upd-{tag}")

    assert "✅ Answered by" in shown
    assert await probe.shows(ref) == shown, "the same update again changes nothing"
    assert await probe.prompts() == [ref.key]


async def test_update_with_another_platforms_ref_is_permanent(probe: Probe) -> None:
    e, tag = fresh()
    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=None
    )
    foreign = [r for r in FOREIGN_REFS if not isinstance(r, REF_TYPES[probe.platform])]
    assert len(foreign) == 2

    for other in foreign:
        with pytest.raises(PermanentDeliveryError):
            await probe.chat.update(
                probe.destination, other, answered(e), idempotency_key=f"upd-{tag}"
            )

    assert "✅ Answered by" not in await probe.shows(ref)
    assert await probe.prompts() == [ref.key]


# --------------------------------------------------------------------------- notify


async def test_a_notice_in_a_thread_reaches_the_person_there(probe: Probe) -> None:
    e, tag = fresh()
    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=None
    )
    text = f"Only a workspace admin can choose Always ({tag})."

    await probe.chat.notify(
        probe.destination,
        Notice(user=IdentityKey(probe.person), text=text, thread=ref),
        idempotency_key=f"notice-{tag}",
    )

    [seen] = await probe.notices()
    assert seen.thread == ref.key
    assert text in seen.text
    assert seen.to == {probe.person}
    assert await probe.prompts() == [ref.key], "a notice is not a prompt"


async def test_a_reminder_pings_the_routes_people_of_this_platform(probe: Probe) -> None:
    e, tag = fresh()
    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=None
    )
    text = f"Reminder: still waiting for an answer ({tag})."
    notice = Notice(
        user=IdentityKey(""),
        text=text,
        thread=ref,
        kind=NoticeKind.REMINDER,
        mentions=(IdentityKey(probe.person), IdentityKey(OTHER_PERSON[probe.platform])),
    )

    await probe.chat.notify(probe.destination, notice, idempotency_key=f"remind-{tag}")

    [seen] = await probe.notices()
    assert seen.thread == ref.key
    assert text in seen.text
    assert seen.to == {probe.person}, "the other platform's people are left out"


# --------------------------------------------------------------------------- limits


async def test_a_question_over_every_limit_still_posts_and_updates(probe: Probe) -> None:
    e, tag = fresh(LONG_QUESTION)
    assert len(e.question) > LONG_QUESTION - 10

    ref = await probe.chat.post(
        probe.destination, pending(e), idempotency_key=f"post-{tag}", uncertain=None
    )
    assert f"Q{tag}" in await probe.shows(ref), "clipped, not dropped"
    await probe.chat.update(probe.destination, ref, answered(e), idempotency_key=f"upd-{tag}")

    assert "✅ Answered by" in await probe.shows(ref)
    assert await probe.prompts() == [ref.key]

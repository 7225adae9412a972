"""Slack interactivity end to end: clicks, thread replies, the reply modal, /elicitbot, pacing.

The real Bolt ``AsyncApp`` (:mod:`adapters.slack.app`) is mounted with
:func:`adapters.slack.routes.slack_router` on the one FastAPI app (:func:`bot.http.create_app`)
and reached over HTTP (httpx's ASGI transport) with requests signed like Slack signs them. Behind
it: the real Service, SqlStore (SQLite file) and outbox Dispatcher, and SlackChat on slack_sdk's
AsyncWebClient against the fake Web API (:mod:`tests.slack_fake`), which checks every message
and modal against Block Kit's limits. Assertions are on what the fake recorded and the store
holds, never on a status code alone (a 200 ack does not mean the work succeeded).

Covers reliability.md §8 tests 2 (retried events, double clicks), 6 (429 storm), 8 (oversize),
10 (asker), 11 (admin-only, crafted payload), 13 (previewComplete=false), 14 (over-long text),
15 (secret canary), plus the signature checks and every SuperPipeline fixture.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.app import COMMAND, SlackInteractivity, build_app, slack_text
from adapters.slack.chat import SlackChat
from adapters.slack.pacing import Pacer, Rate
from adapters.slack.render import REPLY_ACTION, SUBMIT_ACTION
from adapters.slack.routes import EVENTS_PATH, slack_router
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import (
    AnswerMode,
    Elicitation,
    Meaning,
    Option,
    People,
    Route,
    Status,
)
from bot.domain.ports import PromptView
from bot.http import Runtime, create_app
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import REPO, FakeClock
from tests.fakes import FakeSink
from tests.slack_fake import BOT_ID, BOT_USER, TEAM_ID, FakeSlack, SlackCall
from tests.unit.domain.builders import elicitation
from tests.unit.sources.superpipeline_fixtures import VALID

SIGNING_SECRET = "test-signing-secret-8f3a1c"
AGENT = "agt_9e8d7c6b5a493827"
C1, C2 = "C0APPROVALS", "C0ONCALL"
ALICE, BOB, ADMIN, ASKER, AGENT_USER = "U0ALICE", "U0BOB", "U0ADMIN", "U0ASKER", "U0AGENTUSER"
PEOPLE = People(
    admins=frozenset({f"slack:{ADMIN}"}),
    agents=frozenset({"slack:B0AGENTBOT", f"slack:{AGENT_USER}"}),
    principals={f"slack:{ALICE}": "usr_alice", f"slack:{ASKER}": AGENT},
    bot_identities=frozenset({f"slack:{BOT_USER}"}),
)
FAST = {"chat.postMessage": Rate(1000.0, 100), "chat.update": Rate(1000.0, 100)}


def sign(secret: str, timestamp: str, body: str) -> str:
    """``v0=`` HMAC-SHA256 over ``v0:<timestamp>:<body>``, as Slack signs its requests."""
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    assert signature is not None
    return signature


class SecretRecorder:
    """The upstream secret route (a SecretSink): records what it was given."""

    def __init__(self) -> None:
        self.secrets: list[tuple[str, str, str]] = []

    async def deliver_secret(self, view: PromptView, secret: str, *, idempotency_key: str) -> None:
        self.secrets.append((view.elicitation.key, secret, idempotency_key))


class Rig:
    def __init__(self, db: Path, store: SqlStore, clock: FakeClock, fake: FakeSlack) -> None:
        self.db = db
        self.store = store
        self.clock = clock
        self.fake = fake
        self.sink = FakeSink()
        self.secret_sink = SecretRecorder()
        self.pacer = Pacer(FAST)
        self.chat = SlackChat(
            AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]),
            pacer=self.pacer,
        )
        self.dispatcher = Dispatcher(
            store,
            clock,
            {"slack": self.chat},
            {"superpipeline": self.sink, "pinework": self.sink},
            lambda key: f"http://127.0.0.1:8787/#{key}",
        )
        self.service = Service(
            store,
            clock,
            PEOPLE,
            [Route(destinations=(f"slack:{C1}",))],
            on_change=self.dispatcher.wake,
            secret_sinks={"pinework": self.secret_sink},
        )
        self.slack: SlackInteractivity
        self.http: httpx.AsyncClient

    async def start(self) -> None:
        await self.chat.verify()
        self.slack = build_app(self.chat, self.service, signing_secret=SIGNING_SECRET)
        app = create_app(
            Runtime(store=self.store, service=self.service, routers=[slack_router(self.slack.app)])
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://elicitbot.test"
        )

    async def close(self) -> None:
        await self.slack.aclose()
        await self.http.aclose()

    # ------------------------------------------------------------------ elicitations

    async def intake(self, e: Elicitation, route: Route | None = None) -> str:
        [outcome] = await self.service.intake([Inbound("test", f"in-{e.key}", e, {}, route=route)])
        assert outcome.result == "accepted"
        return outcome.key

    async def intake_fixture(self, case: str, **changes: Any) -> str:
        data = copy.deepcopy(VALID[case])
        data.update(changes)
        return await self.intake(parse_body(data, workspace="acme"))

    async def drain(self) -> None:
        """Let every interaction finish, then carry out the outbox until it is empty."""
        await self.slack.idle()
        for _ in range(20):
            if await self.dispatcher.run_once() == 0:
                return
        raise AssertionError("the outbox did not drain")

    def message(self, key: str, channel: str = C1) -> dict[str, Any]:
        found = [
            m
            for m in self.fake.messages(channel)
            if m.get("metadata", {}).get("event_payload", {}).get("elicitation") == key
        ]
        assert len(found) == 1, f"{len(found)} messages for {key} in {channel}"
        return found[0]

    async def status(self, key: str) -> Status:
        view = await self.service.view(key)
        assert view is not None
        return view.status

    # ------------------------------------------------------------------ Slack's requests

    def headers(self, body: str, *, ts: int | None = None, **extra: str) -> dict[str, str]:
        stamp = str(int(time.time()) if ts is None else ts)
        signature = sign(SIGNING_SECRET, stamp, body)
        return {"x-slack-request-timestamp": stamp, "x-slack-signature": signature, **extra}

    async def send_form(self, form: dict[str, str], **headers: str) -> httpx.Response:
        body = urllib.parse.urlencode(form)
        return await self.http.post(
            "/slack/events",
            content=body.encode(),
            headers={
                **self.headers(body),
                "content-type": "application/x-www-form-urlencoded",
                **headers,
            },
        )

    async def send_interaction(self, payload: dict[str, Any]) -> httpx.Response:
        return await self.send_form({"payload": json.dumps(payload)})

    async def send_event(
        self, event: dict[str, Any], event_id: str, **headers: str
    ) -> httpx.Response:
        body = json.dumps(
            {
                "token": "legacy-verification-token",
                "team_id": TEAM_ID,
                "api_app_id": "A0ELICITBOT",
                "event": event,
                "type": "event_callback",
                "event_id": event_id,
                "event_time": int(time.time()),
                "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER, "is_bot": True}],
            }
        )
        return await self.http.post(
            "/slack/events",
            content=body.encode(),
            headers={**self.headers(body), "content-type": "application/json", **headers},
        )

    async def click(
        self,
        message: dict[str, Any],
        action: dict[str, Any],
        *,
        user: str = ALICE,
        channel: str = C1,
        state: dict[str, Any] | None = None,
        action_ts: str = "1700000100.000001",
    ) -> httpx.Response:
        shown = {k: v for k, v in message.items() if k != "edited"}
        payload = {
            "type": "block_actions",
            "team": {"id": TEAM_ID, "domain": "acme"},
            "user": {
                "id": user,
                "username": user.lower(),
                "name": user.lower(),
                "team_id": TEAM_ID,
            },
            "api_app_id": "A0ELICITBOT",
            "token": "legacy-verification-token",
            "container": {
                "type": "message",
                "message_ts": message["ts"],
                "channel_id": channel,
                "is_ephemeral": False,
            },
            "trigger_id": self.fake.issue_trigger(),
            "channel": {"id": channel, "name": "approvals"},
            "message": shown,
            "state": {"values": state or {}},
            "response_url": self.fake.issue_response_url(),
            "actions": [{**action, "action_ts": action_ts}],
        }
        return await self.send_interaction(payload)

    async def reply(
        self,
        message: dict[str, Any],
        text: str,
        *,
        user: str | None = ALICE,
        ts: str = "1700000200.000001",
        event_id: str = "Ev0REPLY1",
        channel: str = C1,
        **extra: Any,
    ) -> httpx.Response:
        event = {
            "type": "message",
            "channel": channel,
            "text": text,
            "ts": ts,
            "thread_ts": message["ts"],
            "parent_user_id": BOT_USER,
            "channel_type": "channel",
            "event_ts": ts,
            **({"user": user, "team": TEAM_ID} if user else {}),
            **extra,
        }
        return await self.send_event(event, event_id)

    async def submit(self, view: dict[str, Any], values: dict[str, Any], *, user: str = ALICE):
        payload = {
            "type": "view_submission",
            "team": {"id": TEAM_ID, "domain": "acme"},
            "user": {
                "id": user,
                "username": user.lower(),
                "name": user.lower(),
                "team_id": TEAM_ID,
            },
            "api_app_id": "A0ELICITBOT",
            "token": "legacy-verification-token",
            "trigger_id": self.fake.issue_trigger(),
            "view": {
                "id": view["id"],
                "type": "modal",
                "callback_id": view["callback_id"],
                "private_metadata": view["private_metadata"],
                "title": view["title"],
                "blocks": view["blocks"],
                "state": {"values": values},
                "hash": "1700000300.abc",
            },
            "response_urls": [],
        }
        return await self.send_interaction(payload)

    async def command(self, text: str, *, user: str = ADMIN, channel: str = C2) -> httpx.Response:
        return await self.send_form(
            {
                "token": "legacy-verification-token",
                "team_id": TEAM_ID,
                "team_domain": "acme",
                "channel_id": channel,
                "channel_name": "oncall",
                "user_id": user,
                "user_name": user.lower(),
                "command": "/elicitbot",
                "text": text,
                "api_app_id": "A0ELICITBOT",
                "response_url": self.fake.issue_response_url(),
                "trigger_id": self.fake.issue_trigger(),
            }
        )

    # ------------------------------------------------------------------ what Slack shows

    def ephemerals(self, user: str) -> list[dict[str, Any]]:
        return [e for e in self.fake.ephemerals() if e["user"] == user]

    def thread(self, message: dict[str, Any], channel: str = C1) -> list[dict[str, Any]]:
        return [m for m in self.fake.messages(channel) if m.get("thread_ts") == message["ts"]]


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a posted message, as a click names them (action_id, block_id, value)."""
    return [
        {**el, "block_id": b.get("block_id")}
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
        for el in b["elements"]
        if el["type"] == "button"
    ]


def button(message: dict[str, Any], option_id: str) -> dict[str, Any]:
    [found] = [b for b in buttons(message) if json.loads(b["value"]).get("o") == option_id]
    return found


def action_button(message: dict[str, Any], action_id: str) -> dict[str, Any]:
    [found] = [b for b in buttons(message) if b["action_id"] == action_id]
    return found


def text_value(text: str) -> dict[str, Any]:
    return {"type": "plain_text_input", "value": text}


def has_actions(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message["blocks"])


def last_text(message: dict[str, Any]) -> str:
    return str(message["blocks"][-1]["text"]["text"])


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as slack:
        yield slack


@pytest.fixture
async def rig(
    tmp_path: Path, sqlite_url: str, clock: FakeClock, fake: FakeSlack
) -> AsyncIterator[Rig]:
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(tmp_path / "elicitbot.db", store, clock, fake)
    await rig.start()
    try:
        yield rig
    finally:
        await rig.close()
        await store.close()


# --------------------------------------------------------------------------- every fixture


async def answer_fixture(rig: Rig, case: str, message: dict[str, Any]) -> None:
    """Each case the way a person would: a button, a thread reply, the Reply… modal."""
    if case in ("options", "approval-request"):
        response = await rig.click(message, button(message, "allow_once"))
    elif case == "free-text":
        response = await rig.reply(message, "<@U0ELICITBOT> main, please")
    else:
        assert (await rig.click(message, action_button(message, REPLY_ACTION))).status_code == 200
        await rig.slack.idle()
        [modal] = rig.fake.views()
        response = await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}})
    assert response.status_code == 200
    assert response.text == ""


@pytest.mark.parametrize("case", sorted(VALID))
async def test_every_superpipeline_fixture_is_posted_answered_and_rewritten(
    rig: Rig, case: str
) -> None:
    key = await rig.intake_fixture(case)
    await rig.drain()
    message = rig.message(key)
    assert has_actions(message), "buttons while pending"

    await answer_fixture(rig, case, message)
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{ALICE}"
    assert view.answer.via == f"slack:{C1}"
    expected = {"free-text": "main, please", "no-options-no-question": "noted"}.get(case)
    assert view.answer.text == expected
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert not has_actions(rewritten)
    assert last_text(rewritten).startswith(f"✅ Answered by <@{ALICE}>")
    [note] = [m for m in rig.thread(message) if m["user"] == BOT_USER]
    assert note["text"] == last_text(rewritten)
    assert [d.view.elicitation.key for d in rig.sink.delivered] == [key]
    assert all(c.ok for c in rig.fake.calls()), [c for c in rig.fake.calls() if not c.ok]


# --------------------------------------------------------------------------- ack first


async def test_every_interaction_is_acked_before_its_work(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    rig.fake.script("chat.postEphemeral", delay=2.0)

    started = time.monotonic()
    response = await rig.click(message, button(message, "allow_always"), user=BOB)
    acked = time.monotonic() - started

    assert response.status_code == 200
    assert response.text == ""
    assert acked < 1.0, f"acked after {acked:.2f} s"
    await rig.slack.idle()
    assert time.monotonic() - started >= 2.0, "the refusal was still being sent"
    [told] = rig.ephemerals(BOB)
    assert "Only a workspace admin can choose “Always allow”" in told["text"]


# --------------------------------------------------------------------------- §8.2 redelivery


async def test_a_double_click_records_one_answer_and_tells_the_second_click(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    deny = button(message, "deny")

    first = await rig.click(message, deny, action_ts="1700000100.000001")
    await rig.slack.idle()
    await asyncio.sleep(0.2)
    second = await rig.click(message, deny, action_ts="1700000100.200001")
    again = await rig.click(message, deny, action_ts="1700000100.200001")  # identical payload
    await rig.drain()

    assert [first.status_code, second.status_code, again.status_code] == [200, 200, 200]
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("deny",)
    assert len(rig.sink.delivered) == 1, "one write-back"
    told = rig.ephemerals(ALICE)
    assert len(told) == 2
    for notice in told:
        assert notice["text"].startswith("Already answered by you (Deny) at 2026-11-10 09:30 UTC")
        assert notice["channel"] == C1
        assert "thread_ts" not in notice, "a click on a top-level message: not in a thread"
    assert len([m for m in rig.thread(message) if m["user"] == BOT_USER]) == 1
    assert len(rig.fake.calls_to("chat.update")) == 1
    audit = await rig.store.audit(key)
    assert [a["code"] for a in audit if a["action"] == "refusal"] == ["already_answered"] * 2


async def test_retried_thread_reply_events_answer_once(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    statuses = [(await rig.reply(message, "release/2026.11", event_id="Ev0AAA")).status_code]
    for n in (1, 2, 3):
        retried = await rig.send_event(
            {
                "type": "message",
                "channel": C1,
                "user": ALICE,
                "team": TEAM_ID,
                "text": "release/2026.11",
                "ts": "1700000200.000001",
                "thread_ts": message["ts"],
            },
            "Ev0AAA",
            **{"x-slack-retry-num": str(n), "x-slack-retry-reason": "http_timeout"},
        )
        statuses.append(retried.status_code)
    # The same message under another event id (Slack sometimes sends one message twice).
    statuses.append((await rig.reply(message, "release/2026.11", event_id="Ev0BBB")).status_code)
    await rig.drain()

    assert statuses == [200] * 5
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.text == "release/2026.11"
    assert len(rig.sink.delivered) == 1
    assert rig.ephemerals(ALICE) == [], "a redelivery is not a second attempt"
    assert len([m for m in rig.thread(message) if m["user"] == BOT_USER]) == 1
    assert [a["action"] for a in await rig.store.audit(key)].count("refusal") == 0


async def test_a_retried_event_whose_first_delivery_was_lost_is_handled(rig: Rig) -> None:
    """Dedupe is by event_id in the store, not by the retry header: a retry that is the only
    copy that arrived is answered."""
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    response = await rig.send_event(
        {
            "type": "message",
            "channel": C1,
            "user": ALICE,
            "team": TEAM_ID,
            "text": "main",
            "ts": "1700000200.000009",
            "thread_ts": message["ts"],
        },
        "Ev0ONLYRETRY",
        **{"x-slack-retry-num": "2", "x-slack-retry-reason": "http_timeout"},
    )
    await rig.drain()

    assert response.status_code == 200
    assert await rig.status(key) is Status.ANSWERED


# --------------------------------------------------------------------------- thread replies


async def test_a_thread_reply_names_an_option_by_number_after_a_mention(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, f"<@{BOT_USER}> 3")
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("deny",)


async def test_a_thread_reply_naming_no_option_gets_how_to_answer_in_the_thread(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "hmm, not sure")
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["thread_ts"] == message["ts"]
    assert told["text"].startswith("To answer, reply with the number, id or label of one option:")
    assert "3. Deny (deny)" in told["text"]
    assert await rig.status(key) is Status.PENDING


async def test_elicitbots_own_messages_are_ignored_outright(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "3", user=BOT_USER, bot_id=BOT_ID, event_id="Ev0OWN")
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []
    assert [a["action"] for a in await rig.store.audit(key)].count("refusal") == 0


async def test_an_agent_bots_reply_is_refused_and_nobody_is_told(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(
        message,
        "main",
        user=None,
        subtype="bot_message",
        bot_id="B0AGENTBOT",
        event_id="Ev0AGENT",
    )
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []
    refused = [a for a in await rig.store.audit(key) if a["action"] == "refusal"]
    assert [(r["actor"], r["code"]) for r in refused] == [("slack:B0AGENTBOT", "agent")]


async def test_an_over_long_thread_reply_is_refused_with_the_limit(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "é" * 2001)
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["text"] == "Your answer is 2,001 characters; the limit is 2,000."
    assert told["thread_ts"] == message["ts"]
    assert await rig.status(key) is Status.PENDING


def test_slack_markup_becomes_what_was_typed() -> None:
    assert slack_text("<@U0ELICITBOT> 2") == "2"
    assert slack_text("<@U0ELICITBOT|elicitbot>  Deny ") == "Deny"
    assert slack_text("see <https://x.example/a?b=1&amp;c=2|x.example> &amp; <#C1|general>") == (
        "see x.example & #general"
    )
    assert slack_text("<https://x.example/p>") == "https://x.example/p"
    assert slack_text("&lt;b&gt; <!here>") == "<b> @here"


# --------------------------------------------------------------------------- who may answer


async def test_the_asker_is_refused_privately_and_someone_else_still_answers(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, button(message, "deny"), user=ASKER)
    await rig.click(message, button(message, "deny"), user=AGENT_USER)
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert [e["text"] for e in rig.ephemerals(ASKER)] == [
        "You asked this question, so you cannot answer it."
    ]
    assert [e["text"] for e in rig.ephemerals(AGENT_USER)] == [
        "Agents cannot answer questions; a person must answer."
    ]
    assert rig.fake.calls_to("chat.update") == [], "nothing changes for anyone else"
    assert rig.thread(message) == []

    await rig.click(message, button(message, "deny"), user=BOB)
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{BOB}"


async def test_a_non_admin_is_refused_an_admin_option_even_by_a_crafted_payload(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    always = button(message, "allow_always")
    assert always["text"]["text"] == "Always allow (admin)"
    crafted = {**button(message, "deny"), "value": json.dumps({"e": key, "o": "allow_always"})}

    for action in (always, crafted, {**crafted, "value": json.dumps({"e": key, "o": "rm_rf"})}):
        await rig.click(message, action, user=BOB)
        await rig.slack.idle()
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert [e["text"] for e in rig.ephemerals(BOB)] == [
        "Only a workspace admin can choose “Always allow”.",
        "Only a workspace admin can choose “Always allow”.",
        "That option is not offered on this question.",
    ]
    await rig.click(message, always, user=ADMIN)
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.respondent, view.answer.option_ids) == (
        f"slack:{ADMIN}",
        ("allow_always",),
    )


async def test_incomplete_preview_shows_no_approve_button_and_refuses_a_crafted_one(
    rig: Rig,
) -> None:
    subject = copy.deepcopy(VALID["approval-request"]["approvalSubject"])
    subject["previewComplete"] = False
    key = await rig.intake_fixture("approval-request", approvalSubject=subject)
    await rig.drain()
    message = rig.message(key)
    shown = {json.loads(b["value"]).get("o") for b in buttons(message)}
    assert shown == {"deny"}
    assert any("preview is incomplete" in t for t in _texts(message))
    crafted = {
        **button(message, "deny"),
        "action_id": "elicitbot.option.0",
        "value": json.dumps({"e": key, "o": "allow_once", "r": 1}),
    }

    await rig.click(message, crafted, user=ADMIN)
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    [told] = rig.ephemerals(ADMIN)
    assert told["text"] == (
        "You cannot choose “Allow once” now: the preview is incomplete, so approving is not "
        "offered."
    )
    await rig.click(message, button(message, "deny"), user=ADMIN)
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED


def _texts(message: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message["blocks"])
    return found


# --------------------------------------------------------------------------- which elicitation


async def test_a_click_on_an_older_copy_resolves_by_the_key_in_its_value(rig: Rig) -> None:
    e = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
    key = await rig.intake(e, route=Route(destinations=(f"slack:{C1}", f"slack:{C2}")))
    await rig.drain()
    first, second = rig.message(key, C1), rig.message(key, C2)

    await rig.click(second, button(second, "deny"), channel=C2)
    await rig.drain()

    assert await rig.status(key) is Status.ANSWERED
    for channel, message in ((C1, first), (C2, second)):
        rewritten = rig.fake.message(channel, message["ts"])
        assert rewritten is not None
        assert not has_actions(rewritten), f"{channel} still has buttons"
    assert len(rig.thread(second, C2)) == 1
    assert rig.thread(first, C1) == []


async def test_a_value_without_a_key_resolves_through_the_message(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    bare = {k: v for k, v in message.items() if k != "metadata"}
    action = {**button(message, "deny"), "value": json.dumps({"o": "deny", "r": None})}

    await rig.click(bare, action)
    await rig.drain()

    assert await rig.status(key) is Status.ANSWERED


async def test_a_click_on_a_message_elicitbot_does_not_know_is_told_so(rig: Rig) -> None:
    message = {"type": "message", "ts": "1700000999.000001", "blocks": []}
    action = {
        "action_id": "elicitbot.option.0",
        "block_id": "elicitbot.options.0",
        "type": "button",
        "value": json.dumps({"o": "deny"}),
    }

    await rig.click(message, action)
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["text"] == "This message is no longer connected to a request elicitbot knows."


# --------------------------------------------------------------------------- choices and modal


async def test_multiple_choice_is_answered_from_the_messages_selection(rig: Rig) -> None:
    options = tuple(Option(id=f"o{i}", label=f"Region {i}") for i in range(1, 5))
    key = await rig.intake(elicitation(answer_mode=AnswerMode.MULTI_CHOICE, options=options))
    await rig.drain()
    message = rig.message(key)
    [actions] = [
        b
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
    ]
    select, submit = actions["elements"]
    picked = [select["options"][1], select["options"][3]]
    state = {
        actions["block_id"]: {
            "elicitbot.choose_many": {"type": "multi_static_select", "selected_options": picked}
        }
    }

    await rig.click(message, {**select, "block_id": actions["block_id"]}, state=state)
    await rig.click(message, {**submit, "block_id": actions["block_id"]}, state=state)
    await rig.drain()

    assert submit["action_id"] == SUBMIT_ACTION
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("o2", "o4")


async def test_an_option_needing_a_comment_opens_the_modal_with_it_chosen(rig: Rig) -> None:
    options = (
        Option(id="approve", label="Approve", meaning=Meaning.APPROVE),
        Option(id="deny", label="Deny", meaning=Meaning.REJECT, requires_text=True),
    )
    key = await rig.intake(elicitation(options=options))
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, button(message, "deny"))
    await rig.slack.idle()

    assert await rig.status(key) is Status.PENDING
    [modal] = rig.fake.views()
    assert modal["callback_id"] == "elicitbot.reply"
    [comment] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert comment["optional"] is False
    response = await rig.submit(
        modal, {"elicitbot.text": {"value": text_value("It drops the audit table.")}}
    )
    await rig.drain()

    assert response.status_code == 200
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.option_ids, view.answer.text) == (("deny",), "It drops the audit table.")


async def test_over_long_modal_text_keeps_the_modal_open_with_the_limit(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)
    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.slack.idle()
    [modal] = rig.fake.views()
    [box] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert box["element"]["max_length"] == 2000

    response = await rig.submit(modal, {"elicitbot.text": {"value": text_value("🙂" * 2001)}})
    await rig.drain()

    assert response.status_code == 200
    assert response.json() == {
        "response_action": "errors",
        "errors": {"elicitbot.text": "Your answer is 2,001 characters; the limit is 2,000."},
    }
    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []

    accepted = await rig.submit(modal, {"elicitbot.text": {"value": text_value("🙂" * 2000)}})
    await rig.drain()
    assert accepted.text == ""
    assert await rig.status(key) is Status.ANSWERED


async def test_the_reply_button_on_an_answered_request_says_who_answered(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)
    reply_button = action_button(message, REPLY_ACTION)
    await rig.reply(message, "main", user=BOB)
    await rig.drain()

    await rig.click(message, reply_button)
    await rig.drain()

    assert rig.fake.views() == []
    [told] = rig.ephemerals(ALICE)
    assert told["text"].startswith("Already answered by slack:U0BOB (“main”)")


# --------------------------------------------------------------------------- §8.8 oversize


async def test_an_oversize_question_posts_and_is_answered_through_its_select(rig: Rig) -> None:
    from tests.unit.slack.test_render import QUESTION_50KB, oversize

    e = oversize(asker=AGENT)
    assert e.question == QUESTION_50KB
    assert len(e.question.encode()) >= 50_000, "50 KB of text"
    assert len(e.options) == 40
    assert min(len(o.label) for o in e.options) == 300
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    [post] = rig.fake.calls_to("chat.postMessage")
    assert post.ok, post.response
    [actions] = [
        b
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
    ]
    [select] = actions["elements"]
    assert len(select["options"]) == 40
    chosen = next(o for o in select["options"] if "(admin)" not in o["text"]["text"])
    action = {**select, "block_id": actions["block_id"], "selected_option": chosen}

    await rig.click(message, action)
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == (json.loads(chosen["value"])["o"],)
    assert all(c.ok for c in rig.fake.calls()), [c.response for c in rig.fake.calls() if not c.ok]


async def test_an_oversize_choice_or_text_question_opens_a_modal_within_limits(rig: Rig) -> None:
    from tests.unit.slack.test_render import oversize

    key = await rig.intake(oversize(asker=AGENT, answer_mode=AnswerMode.CHOICE_OR_TEXT))
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.slack.idle()

    [opened] = rig.fake.calls_to("views.open")
    assert opened.ok, opened.response
    [modal] = rig.fake.views()
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert set(inputs) == {"elicitbot.choice", "elicitbot.text"}
    assert len(inputs["elicitbot.choice"]["element"]["options"]) == 40


# --------------------------------------------------------------------------- §8.15 secrets


async def test_a_secret_goes_upstream_only(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    canary = "CANARY-7f3e9b1d-secret-value"
    typed = "CANARY-typed-in-the-thread-42"
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        e = elicitation(
            source="pinework",
            source_id="qst_0secret",
            answer_mode=AnswerMode.SECRET,
            options=(),
            question="Paste the deploy token for staging.",
        )
        key = await rig.intake(e)
        await rig.drain()
        message = rig.message(key)
        await rig.reply(message, typed, event_id="Ev0TYPED")
        await rig.click(message, action_button(message, REPLY_ACTION))
        await rig.slack.idle()
        [modal] = rig.fake.views()
        response = await rig.submit(modal, {"elicitbot.secret": {"value": text_value(canary)}})
        await rig.drain()

    assert response.text == ""
    [(upstream_key, upstream_secret, idempotency_key)] = rig.secret_sink.secrets
    assert (upstream_key, upstream_secret) == (key, canary)
    assert idempotency_key.startswith(f"elicitbot:{key}:secret")
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.secret, view.answer.text) == (True, None)
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert "(secret)" in last_text(rewritten)
    [told] = rig.ephemerals(ALICE)
    assert told["text"].startswith("This answer is a secret: use the private form")
    out, err = capfd.readouterr()
    files = [tmp_path / name for name in ("elicitbot.db", "elicitbot.db-wal", "elicitbot.db-shm")]
    files = [f for f in files if f.exists()]
    assert files, "the database file is there to search"
    for secret in (canary, typed):
        for path in files:
            assert secret.encode() not in path.read_bytes(), path.name
        assert secret not in json.dumps([_record(c) for c in rig.fake.calls()])
        assert secret not in json.dumps(rig.fake.views() + rig.fake.ephemerals())
        assert secret not in caplog.text
        assert secret not in repr(events)
        assert secret not in out + err
    assert typed not in repr(rig.secret_sink.secrets), "a secret typed in chat goes nowhere"


def _record(call: SlackCall) -> dict[str, Any]:
    return {"method": call.method, "params": call.params, "response": call.response}


# --------------------------------------------------------------------------- signatures


async def test_forged_stale_and_unsigned_requests_are_401_and_run_nothing(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    before = len(rig.fake.calls())
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM_ID},
        "user": {"id": ALICE, "team_id": TEAM_ID},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": C1},
        "channel": {"id": C1},
        "message": message,
        "trigger_id": rig.fake.issue_trigger(),
        "actions": [{**button(message, "deny"), "action_ts": "1.2"}],
    }
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    form = {"content-type": "application/x-www-form-urlencoded"}
    now = int(time.time())
    forged = {**rig.headers(body), "x-slack-signature": "v0=" + "0" * 64}
    wrong_secret = {
        "x-slack-request-timestamp": str(now),
        "x-slack-signature": sign("not-the-secret", str(now), body),
    }
    stale = rig.headers(body, ts=now - 301)

    statuses = [
        (await rig.http.post("/slack/events", content=body, headers={**form, **h})).status_code
        for h in (forged, wrong_secret, stale, {})
    ]
    await rig.drain()

    assert statuses == [401, 401, 401, 401]
    assert len(rig.fake.calls()) == before, "no handler ran"
    assert await rig.status(key) is Status.PENDING
    assert [a for a in await rig.store.audit(key) if a["action"] == "refusal"] == []
    fresh = await rig.http.post(
        "/slack/events", content=body, headers={**form, **rig.headers(body)}
    )
    await rig.drain()
    assert fresh.status_code == 200
    assert await rig.status(key) is Status.ANSWERED


async def test_the_url_verification_challenge_is_echoed(rig: Rig) -> None:
    body = json.dumps({"token": "t", "challenge": "c-123", "type": "url_verification"})
    response = await rig.http.post(
        "/slack/events",
        content=body,
        headers={**rig.headers(body), "content-type": "application/json"},
    )
    assert response.status_code == 200
    assert response.json() == {"challenge": "c-123"}


# --------------------------------------------------------------------------- /elicitbot


async def test_an_admin_subscribes_lists_and_unsubscribes_a_channel(rig: Rig) -> None:
    replies = []
    for text in (
        "subscribe acme board brd_134a0ddb6d434478",
        "routes",
        "unsubscribe acme board brd_134a0ddb6d434478",
        "subscribe acme",
    ):
        response = await rig.command(text)
        assert response.status_code == 200
        await rig.slack.idle()
        replies.append(rig.fake.responses()[-1]["body"])

    assert all(r["response_type"] == "ephemeral" for r in replies)
    texts = [r["text"] for r in replies]
    assert texts[0] == (
        "Subscribed: requests of workspace `acme`, board `brd_134a0ddb6d434478` now come to "
        f"<#{C2}>."
    )
    assert f"workspace=acme board=brd_134a0ddb6d434478 -> slack:{C2} (chat)" in texts[1]
    assert texts[2].startswith("Unsubscribed: workspace `acme`, board `brd_134a0ddb6d434478`")
    assert [
        (r["workspace"], r["board"], r["destination"]) for r in await rig.store.chat_routes()
    ] == [("acme", None, f"slack:{C2}")]


async def test_a_non_admin_cannot_use_elicitbot_commands(rig: Rig) -> None:
    await rig.command("subscribe acme", user=BOB)
    await rig.command("nonsense words here", user=ADMIN)
    await rig.slack.idle()

    first, second = (r["body"]["text"] for r in rig.fake.responses())
    assert first == "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."
    assert second.startswith("Usage, in the channel to route to:")
    assert await rig.store.chat_routes() == []


# --------------------------------------------------------------------------- §8.6 pacing, 429


def chat_with(fake: FakeSlack, pacer: Pacer) -> SlackChat:
    return SlackChat(
        AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]), pacer=pacer
    )


def pview(title: str = "Deploy?") -> PromptView:
    from tests.unit.domain.builders import NOW

    e = elicitation(title=title)
    return PromptView(
        elicitation=e, status=Status.PENDING, answer=None, version=1, link="", now=NOW
    )


def gaps(calls: list[SlackCall]) -> list[float]:
    times = [c.at for c in calls]
    return [b - a for a, b in itertools.pairwise(times)]


async def test_posts_are_paced_per_channel_not_across_channels(fake: FakeSlack) -> None:
    chat = chat_with(fake, Pacer({"chat.postMessage": Rate(5.0, 1)}))
    started = time.monotonic()

    await asyncio.gather(
        *(
            chat.post(
                f"slack:{channel}", pview(), idempotency_key=f"{channel}-{i}", uncertain=False
            )
            for i in range(4)
            for channel in (C1, C2)
        )
    )

    elapsed = time.monotonic() - started
    for channel in (C1, C2):
        posts = [c for c in fake.calls_to("chat.postMessage") if c.params["channel"] == channel]
        assert len(posts) == 4
        assert min(gaps(posts)) >= 0.18, gaps(posts)
    assert 0.55 <= elapsed < 1.2, "channels do not wait for each other"


async def test_a_429_storm_sends_one_request_per_window_per_key_and_loses_nothing(
    fake: FakeSlack,
) -> None:
    pacer = Pacer({"chat.postMessage": Rate(50.0, 5)}, jitter=lambda: 0.05)
    chat = chat_with(fake, pacer)
    fake.storm("chat.postMessage", 2.5, retry_after=1)

    async def post_until_taken(channel: str, i: int) -> None:
        """What the outbox does with a transient failure: try again after retry_after."""
        while True:
            try:
                await chat.post(
                    f"slack:{channel}", pview(), idempotency_key=f"{channel}-{i}", uncertain=False
                )
            except TransientDeliveryError as exc:
                await asyncio.sleep(exc.retry_after or 1.0)
            else:
                return

    await asyncio.gather(*(post_until_taken(ch, i) for i in range(5) for ch in (C1, C2)))

    for channel in (C1, C2):
        calls = [c for c in fake.calls_to("chat.postMessage") if c.params["channel"] == channel]
        limited = [c for c in calls if c.status == 429]
        assert len([m for m in fake.messages(channel) if "thread_ts" not in m]) == 5, "none lost"
        assert 2 <= len(limited) <= 4, [c.status for c in calls]
        for call in limited:
            after = [c for c in calls if c.at > call.at]
            if after:
                assert after[0].at - call.at >= 1.0, "a request inside the Retry-After window"
        assert len(calls) <= 5 + len(limited), "no busy loop"
    assert pacer.stats.rate_limited >= 4


async def test_a_long_retry_after_defers_without_sending(fake: FakeSlack) -> None:
    chat = chat_with(fake, Pacer())
    fake.script("chat.postMessage", status=429, retry_after=30)

    with pytest.raises(TransientDeliveryError) as first:
        await chat.post(f"slack:{C1}", pview(), idempotency_key="k1", uncertain=False)
    with pytest.raises(TransientDeliveryError) as second:
        await chat.post(f"slack:{C1}", pview(), idempotency_key="k2", uncertain=False)
    await chat.post(f"slack:{C2}", pview(), idempotency_key="k3", uncertain=False)

    assert 30 <= (first.value.retry_after or 0) < 31
    assert 29 <= (second.value.retry_after or 0) <= 31
    assert [(c.params["channel"], c.status) for c in fake.calls_to("chat.postMessage")] == [
        (C1, 429),
        (C2, 200),
    ], "the second post to C1 was never sent; C2 is not held up"


async def test_pending_updates_of_one_message_are_coalesced(fake: FakeSlack) -> None:
    chat = chat_with(fake, Pacer({"chat.update": Rate(2.0, 1)}))
    ref = await chat.post(f"slack:{C1}", pview(), idempotency_key="k", uncertain=False)

    await asyncio.gather(
        *(
            chat.update(f"slack:{C1}", ref, pview(f"Revision {i}"), idempotency_key=f"u{i}")
            for i in range(6)
        )
    )

    updates = fake.calls_to("chat.update")
    assert len(updates) == 2, "the first, then the newest of the five that waited"
    final = fake.message(C1, ref["ts"])
    assert final is not None
    assert final["blocks"][0]["text"]["text"] == "Revision 5"


async def test_clicks_are_acked_fast_during_a_429_storm_and_the_answer_goes_through(
    rig: Rig,
) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    for method in ("chat.update", "chat.postMessage", "chat.postEphemeral"):
        rig.fake.storm(method, 2.0, retry_after=1)

    started = time.monotonic()
    response = await rig.click(message, button(message, "deny"))
    acked = time.monotonic() - started
    await asyncio.sleep(0.1)  # Alice's answer is recorded (the storm holds up only Slack calls)
    await rig.click(message, button(message, "deny"), user=BOB)
    await rig.drain()

    assert response.status_code == 200
    assert acked < 0.5
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert not has_actions(rewritten)
    assert len(rig.thread(message)) == 1
    [told] = rig.ephemerals(BOB)
    assert told["text"].startswith("Already answered by u0alice (Deny)")


# --------------------------------------------------------------------------- the app itself


def test_the_manifest_declares_what_the_app_uses() -> None:
    import yaml  # type: ignore[import-untyped]

    manifest = yaml.safe_load((REPO / "slack-app-manifest.yaml").read_text(encoding="utf-8"))
    [command] = manifest["features"]["slash_commands"]
    assert command["command"] == COMMAND
    assert manifest["settings"]["interactivity"]["is_enabled"] is True
    assert set(manifest["settings"]["event_subscriptions"]["bot_events"]) == {
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
    }
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    # Web API methods SlackChat calls -> the scope each needs.
    assert {"chat:write", "commands", "channels:history", "groups:history", "im:write"} <= scopes
    assert all(
        url.endswith(EVENTS_PATH)
        for url in (
            command["url"],
            manifest["settings"]["event_subscriptions"]["request_url"],
            manifest["settings"]["interactivity"]["request_url"],
        )
    )


async def test_bolt_does_not_touch_the_level_of_our_loggers(rig: Rig) -> None:
    ours = logging.getLogger("elicitbot")
    before = ours.level
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, button(message, "deny"))
    await rig.drain()

    assert ours.level == before, "Bolt sets the level of the logger named after its app"
    assert [c.method for c in rig.fake.calls()].count("auth.test") == 1, "never per request"


async def test_before_auth_test_the_app_refuses_instead_of_calling_it(
    tmp_path: Path, sqlite_url: str, clock: FakeClock, fake: FakeSlack
) -> None:
    """reliability.md §1.2: a lazy auth.test per request turns a Slack outage into HTTP 500s."""
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(tmp_path / "elicitbot.db", store, clock, fake)
    rig.slack = build_app(rig.chat, rig.service, signing_secret=SIGNING_SECRET)
    app = create_app(
        Runtime(store=store, service=rig.service, routers=[slack_router(rig.slack.app)])
    )
    rig.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
    try:
        response = await rig.send_event(
            {"type": "message", "channel": C1, "user": ALICE, "text": "2", "ts": "1.1"}, "Ev0EARLY"
        )
        await rig.slack.idle()
        assert response.status_code == 200
        assert fake.calls() == [], "no auth.test (and no handler: nothing else was called)"

        await rig.chat.verify()
        assert rig.slack._authorization() is not None
    finally:
        await rig.close()
        await store.close()


async def test_im_on_it_claims_the_question_and_every_copy_shows_who(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    [claim] = [
        {**el, "block_id": b["block_id"]}
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] == "elicitbot.claim"
        for el in b["elements"]
    ]

    response = await rig.click(message, claim, action_ts="1700000100.000001")
    await rig.slack.idle()
    await rig.drain()

    assert response.status_code == 200
    view = await rig.service.view(key)
    assert view is not None
    assert view.claim is not None
    assert view.claim.by.endswith(ALICE)
    [told] = rig.ephemerals(ALICE)
    assert told["text"].startswith("You're on it until")
    updated = rig.fake.calls_to("chat.update")
    assert updated, "the copy is rewritten to show who is on it"
    assert "is on it" in json.dumps(updated[-1].params["blocks"])

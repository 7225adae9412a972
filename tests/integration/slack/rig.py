"""The rig for Slack interactivity end to end (clicks, thread replies, the reply modal, commands).

The real Bolt ``AsyncApp`` (:mod:`adapters.slack.listener`) is mounted with
:func:`adapters.slack.intake.routes.slack_router` on the one FastAPI app
(:func:`bot.app.http.create_app`) and reached over HTTP (httpx's ASGI transport) with requests
signed like Slack signs them. Behind it: the real Service, SqlStore (SQLite file) and outbox
Dispatcher, and SlackChat on slack_sdk's AsyncWebClient against the fake Web API
(:mod:`tests.slack_fake`), which checks every message and modal against Block Kit's limits.
Assertions are on what the fake recorded and the store holds, never on a status code alone (a 200
ack does not mean the work succeeded).
"""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.api.pacing import Pacer, Rate
from adapters.slack.chat import SlackChat
from adapters.slack.intake.routes import slack_router
from adapters.slack.listener import SlackInteractivity, build_app
from adapters.sources.superpipeline.parse import parse_body
from bot.app.http import Runtime, create_app
from bot.domain.model import (
    Elicitation,
    ElicitationKey,
    People,
    Route,
    Status,
)
from bot.domain.ports import AnswerSink, PromptView
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.slack_fake import BOT_USER, TEAM_ID, FakeSlack
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


def block_actions_of(user: str) -> dict[str, Any]:
    """What every ``block_actions`` payload carries: its type, team, user and app."""
    return {
        "type": "block_actions",
        "team": {"id": TEAM_ID, "domain": "acme"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM_ID},
        "api_app_id": "A0ELICITBOT",
        "token": "legacy-verification-token",
    }


def message_click(
    message: dict[str, Any],
    action: dict[str, Any],
    user: str,
    *,
    channel: str,
    trigger_id: str,
    response_url: str,
) -> dict[str, Any]:
    """The ``block_actions`` payload of ``user`` clicking ``action`` on ``message``."""
    return {
        **block_actions_of(user),
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": trigger_id,
        "channel": {"id": channel, "name": "approvals"},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }


async def post_interaction(
    http: httpx.AsyncClient, url: str, payload: dict[str, Any], secret: str = SIGNING_SECRET
) -> int:
    """``payload`` POSTed to ``url`` as Slack sends an interaction, signed with ``secret``."""
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()))
    response = await http.post(
        url,
        content=body.encode(),
        headers={
            "x-slack-request-timestamp": stamp,
            "x-slack-signature": sign(secret, stamp, body),
            "content-type": "application/x-www-form-urlencoded",
        },
    )
    return response.status_code


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
        self.sinks: dict[str, AnswerSink] = {
            "superpipeline": self.sink,
            "pinework": self.sink,
            "handup": self.sink,
        }
        """The write-backs by source; a test may put a real sink in (handup's, at a callback)."""
        self.dispatcher = Dispatcher(
            store,
            clock,
            {"slack": self.chat},
            self.sinks,
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
        self.dispatcher.effects.policy = self.service.copy_policy  # the root passes it
        self.slack: SlackInteractivity
        self.http: httpx.AsyncClient

    async def start(self) -> None:
        await self.chat.verify()
        self.slack = build_app(
            self.chat,
            self.service,
            signing_secret=SIGNING_SECRET,
            raw=self.store,
            clock=self.clock,
        )
        app = create_app(
            Runtime(
                store=self.store, elicitations=self.service, routers=[slack_router(self.slack.app)]
            )
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://elicitbot.test"
        )

    async def close(self) -> None:
        await self.slack.aclose()
        await self.http.aclose()

    # ------------------------------------------------------------------ elicitations

    async def intake(self, e: Elicitation, route: Route | None = None) -> ElicitationKey:
        [outcome] = await self.service.intake([Inbound("test", f"in-{e.key}", e, {}, route=route)])
        assert outcome.result == "accepted"
        return outcome.key

    async def intake_fixture(self, case: str, **changes: Any) -> ElicitationKey:
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

    async def status(self, key: ElicitationKey) -> Status:
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
            **block_actions_of(user),
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

    async def modal_click(
        self,
        view_id: str,
        action: dict[str, Any],
        *,
        user: str = ALICE,
        state: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """A click inside an open modal, as it stands in the fake (its metadata and hash)."""
        view = self.fake.view(view_id)
        assert view is not None, f"no view {view_id}"
        payload = {
            **block_actions_of(user),
            "container": {"type": "view", "view_id": view_id},
            "trigger_id": self.fake.issue_trigger(),
            "view": {
                "id": view_id,
                "type": "modal",
                "callback_id": view.get("callback_id"),
                "private_metadata": view.get("private_metadata", ""),
                "title": view["title"],
                "blocks": view["blocks"],
                "state": {"values": state or {}},
                "hash": view["hash"],
                "root_view_id": view_id,
                "app_id": "A0ELICITBOT",
            },
            "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
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


def view_buttons(view: dict[str, Any]) -> list[dict[str, Any]]:
    """The buttons of a modal, as a click names them (action_id, block_id, value)."""
    return [
        {**el, "block_id": b.get("block_id")}
        for b in view["blocks"]
        if b["type"] == "actions"
        for el in b["elements"]
        if el["type"] == "button"
    ]


def texts(value: Any) -> list[str]:
    """Every text in blocks, in order (section text and fields, context, rich text, buttons)."""
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    if isinstance(value, dict):
        found = [value["text"]] if isinstance(value.get("text"), str) else []
        return found + [
            t for k, v in value.items() if k != "text" or not isinstance(v, str) for t in texts(v)
        ]
    return []

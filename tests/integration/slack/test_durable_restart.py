"""Durable before ack through the composition root: an in-process :class:`bot.app.wiring.Elicitbot`
(SQLite, HTTP mode, the fake Slack Web API) acks a click, is killed before the click's answer is
recorded, and the next Elicitbot on the same file records it at start (its ``slack-replay``
task), with no click from anyone."""

from __future__ import annotations

import asyncio
import copy
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.slack.intake.trims import RAW_CHANNEL
from adapters.sources.superpipeline.parse import parse_body
from bot.app.config import AppConfig, parse_config
from bot.app.wiring import Elicitbot
from bot.domain.actions import Action, Outcome
from bot.domain.model import Status
from bot.service import Inbound
from tests.integration.slack.rig import ALICE, C1, SIGNING_SECRET, button, sign
from tests.slack_fake import TEAM_ID, FakeSlack
from tests.unit.sources.superpipeline_fixtures import VALID

WITHIN_S = 15.0


def config(db: Path, fake: FakeSlack) -> AppConfig:
    return parse_config(
        {
            "server": {"listen": "127.0.0.1:8799"},
            "store": {"url": f"sqlite:///{db}"},
            "slack": {
                "bot_token_env": "SLACK_BOT_TOKEN",
                "signing_secret_env": "SLACK_SIGNING_SECRET",
                "api_url": fake.api_url,
            },
            "routes": [{"destinations": [f"slack:{C1}"]}],
        }
    )


async def until(probe: Any, what: str) -> Any:
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {what} within {WITHIN_S:.0f} s")


def click_body(fake: FakeSlack, message: dict[str, Any]) -> str:
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM_ID},
        "user": {"id": ALICE, "team_id": TEAM_ID, "name": "alice"},
        "token": "legacy-verification-token",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": C1},
        "trigger_id": fake.issue_trigger(),
        "channel": {"id": C1},
        "message": message,
        "actions": [{**button(message, "deny"), "action_ts": f"{time.time():.6f}"}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


async def test_a_click_acked_by_a_killed_process_is_answered_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "elicitbot.db"
    with FakeSlack() as fake:
        environ = {"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": SIGNING_SECRET}
        first = Elicitbot(config(db, fake), environ=environ)
        await first.start()
        e = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
        [outcome] = await first.service.intake([Inbound("test", "in-1", e, {})])
        key = outcome.key

        async def the_message() -> dict[str, Any] | None:
            found = [
                m
                for m in fake.messages(C1)
                if m.get("metadata", {}).get("event_payload", {}).get("elicitation") == key
            ]
            return found[0] if found else None

        message = await until(the_message, "post")
        held: list[Action] = []
        never = asyncio.Event()

        async def act(action: Action) -> Outcome:
            held.append(action)
            await never.wait()  # killed before the answer is recorded
            raise AssertionError("unreachable")

        monkeypatch.setattr(first.service, "act", act)
        body = click_body(fake, message)
        stamp = str(int(time.time()))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=first.asgi()), base_url="http://elicitbot.test"
        ) as http:
            response = await http.post(
                "/slack/events",
                content=body.encode(),
                headers={
                    "content-type": "application/x-www-form-urlencoded",
                    "x-slack-request-timestamp": stamp,
                    "x-slack-signature": sign(SIGNING_SECRET, stamp, body),
                },
            )
        assert response.status_code == 200

        async def handling() -> bool:
            return bool(held)

        await until(handling, "handling")

        # kill -9, as far as one process can: nothing finishes, nothing is marked.
        assert first.slack_app is not None
        await first.slack_app.aclose()
        tasks = list(first._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await first.http_client.aclose()
        [kept] = await first.store.open_raw(RAW_CHANNEL)
        assert "token" not in kept.body
        await first.store.close()

        second = Elicitbot(config(db, fake), environ=environ)
        await second.start()
        try:

            async def answered() -> bool:
                view = await second.service.view(key)
                return view is not None and view.status is Status.ANSWERED

            await until(answered, "answer recorded by the replay")
            view = await second.service.view(key)
            assert view is not None
            assert view.answer is not None
            assert view.answer.option_ids == ("deny",)
            assert view.answer.respondent == f"slack:{ALICE}"
            assert await second.store.open_raw(RAW_CHANNEL) == []
        finally:
            await second.stop()

"""Slack interactivity end to end: signatures, ``/elicitbot`` commands, "I'm on it" and the Bolt
app itself (see :mod:`tests.integration.slack.rig`)."""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from pathlib import Path

import httpx

from adapters.slack.intake.routes import EVENTS_PATH, slack_router
from adapters.slack.listener import COMMAND, build_app
from bot.app.http import Runtime, create_app
from bot.domain.model import (
    Status,
)
from store.sql import SqlStore
from tests.conftest import REPO, FakeClock
from tests.integration.slack.rig import (
    ADMIN,
    ALICE,
    BOB,
    C1,
    C2,
    SIGNING_SECRET,
    Rig,
    button,
    sign,
)
from tests.slack_fake import TEAM_ID, FakeSlack

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
    assert [a for a in await rig.store.audit(key) if a.action == "refusal"] == []
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
    assert [(r.workspace, r.board, r.destination) for r in await rig.store.chat_routes()] == [
        ("acme", None, f"slack:{C2}")
    ]


async def test_a_non_admin_cannot_use_elicitbot_commands(rig: Rig) -> None:
    await rig.command("subscribe acme", user=BOB)
    await rig.command("nonsense words here", user=ADMIN)
    await rig.slack.idle()

    first, second = (r["body"]["text"] for r in rig.fake.responses())
    assert first == "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."
    # What was wrong comes first (since chat policies), then the usage.
    assert second.startswith("Unknown command 'nonsense'.\nUsage, in the channel to route to:")
    assert await rig.store.chat_routes() == []


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
    """A lazy auth.test per request would turn a Slack outage into HTTP 500s."""
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(tmp_path / "elicitbot.db", store, clock, fake)
    rig.slack = build_app(
        rig.chat, rig.service, signing_secret=SIGNING_SECRET, raw=rig.store, clock=rig.clock
    )
    app = create_app(
        Runtime(store=store, elicitations=rig.service, routers=[slack_router(rig.slack.app)])
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

"""``kill -9`` in the middle of the outbox, in a busy channel, on SQLite and on PostgreSQL.

``python -m bot serve`` posts to one Slack channel (the fake Web API) and writes answers back to
SuperPipeline (a recording webhook). Six questions are posted and answered by clicks; six more
are queued, and the process is killed with SIGKILL while Slack holds a post it carried out but
has not answered (so its ``ts`` never reached the database). Before the restart 250 other
messages arrive in the channel, so the stranded post has scrolled far past the newest page of
history. After the restart:

- every elicitation is in the channel exactly once: the stranded post is found by its metadata,
  looking back from its first attempt page by page, and adopted, not posted again;
- every answer was written back, and a write-back repeated after the kill carries the same
  ``Idempotency-Key`` (the guarantee the README states);
- the stranded row is taken again within 15 s (on PostgreSQL its claim runs out with nobody
  renewing it; on SQLite the one process owning the file gives it back at start).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.parse
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.domain.model import ElicitationKey
from bot.domain.records import EffectView
from bot.domain.refs import SlackRef
from store.sql import SqlStore
from tests.fakes import FakeWebhook
from tests.integration.slack.rig import buttons, sign
from tests.integration.test_crash import Server, free_port, poll, send
from tests.slack_fake import TEAM_ID, FakeSlack, SlackCall

pytestmark = [pytest.mark.slow, pytest.mark.faults]

CHANNEL = "C0BUSYKILL"
SECRET = "kill-lanes-secret"
ENV = {"SLACK_BOT_TOKEN": "xoxb-kill-lanes-token", "SLACK_SIGNING_SECRET": SECRET}
FIRST, SECOND = 6, 6
CHATTER = 250
RECOVERY_S = 15.0
KEYS = [ElicitationKey(f"superpipeline:eli_crash{i:08d}") for i in range(FIRST + SECOND)]
STRANDED = KEYS[FIRST]
"""The post Slack carried out while the process was killed."""


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Iterator[tuple[Server, str, FakeWebhook, FakeSlack]]:
    port = free_port()
    with FakeWebhook() as webhook, FakeSlack(ENV["SLACK_BOT_TOKEN"]) as slack:
        config = tmp_path / "cfg.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
            f'[store]\nurl = "{db_url}"\n\n'
            '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\n'
            'signing_secret_env = "SLACK_SIGNING_SECRET"\n'
            f'api_url = "{slack.api_url}"\n\n'
            f'[[routes]]\ndestinations = ["slack:{CHANNEL}"]\n\n'
            f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n',
            encoding="utf-8",
        )
        srv = Server(tmp_path, config, port, ENV)
        try:
            yield srv, db_url, webhook, slack
        finally:
            srv.kill()


def click_payload(message: dict[str, Any], user: str) -> str:
    action = buttons(message)[-1]  # the last option: "no" / "deny"-like, always allowed
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM_ID, "domain": "acme"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": TEAM_ID},
        "api_app_id": "A0ELICITBOT",
        "token": "legacy-verification-token",
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": CHANNEL,
            "is_ephemeral": False,
        },
        "trigger_id": f"{int(time.time())}.{secrets.token_hex(6)}",
        "channel": {"id": CHANNEL, "name": "busy"},
        "message": message,
        "state": {"values": {}},
        "response_url": "https://hooks.slack.invalid/actions/T0/1/x",
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


async def click(client: httpx.AsyncClient, base: str, message: dict[str, Any]) -> int:
    body = click_payload(message, "U0ALICE")
    stamp = str(int(time.time()))
    response = await client.post(
        f"{base}/slack/events",
        content=body.encode(),
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": stamp,
            "x-slack-signature": sign(SECRET, stamp, body),
        },
    )
    return response.status_code


def question_posts(calls: list[SlackCall]) -> Counter[str]:
    """chat.postMessage calls Slack carried out for questions (not thread notices), by key."""
    return Counter(
        c.params["metadata"]["event_payload"]["elicitation"]
        for c in calls
        if c.method == "chat.postMessage"
        and c.status == 200
        and not c.params.get("thread_ts")
        and "elicitation" in ((c.params.get("metadata") or {}).get("event_payload") or {})
    )


def posted_keys(calls: list[SlackCall]) -> set[str]:
    return set(question_posts(calls))


def ours(slack: FakeSlack) -> dict[str, dict[str, Any]]:
    """Our messages in the channel, by the elicitation their metadata names."""
    found: dict[str, dict[str, Any]] = {}
    for m in slack.messages(CHANNEL):
        if m.get("thread_ts"):
            continue
        meta = (m.get("metadata") or {}).get("event_payload") or {}
        if "elicitation" in meta:
            found[meta["elicitation"]] = m
    return found


async def outbox_rows(url: str) -> list[EffectView]:
    store = SqlStore.from_url(url)
    try:
        return await store.outbox()
    finally:
        await store.close()


async def post_and_answer(
    client: httpx.AsyncClient, srv: Server, url: str, webhook: FakeWebhook, slack: FakeSlack
) -> None:
    """Phase 1: the first questions are posted and answered by clicks; their updates and
    write-backs are all done."""
    keys = KEYS[:FIRST]
    for i in range(FIRST):
        await send(client, srv.base, i)

    async def posted() -> dict[str, dict[str, Any]] | None:
        found = ours(slack)
        return found if set(keys) <= set(found) else None

    messages = await poll(posted, within=FIRST + 10, what="the first posts")
    for key in keys:
        assert await click(client, srv.base, messages[key]) == 200

    async def settled() -> bool | None:
        busy = [r for r in await outbox_rows(url) if r.state in ("pending", "claimed")]
        return True if not busy and len(webhook.recorded()) >= FIRST else None

    await poll(settled, within=20, what="the answers' updates and write-backs")


async def kill_mid_post(
    client: httpx.AsyncClient, srv: Server, slack: FakeSlack, proc: subprocess.Popen[bytes]
) -> None:
    """Phase 2: more questions; Slack carries the first one out but answers only after 30 s,
    and the process is killed meanwhile. Then the channel gets busy."""
    slack.script("chat.postMessage", delay=30, times=1, where=lambda p: not p.get("thread_ts"))
    for i in range(FIRST, FIRST + SECOND):
        await send(client, srv.base, i)
    await asyncio.to_thread(
        slack.wait_for, lambda calls: STRANDED in posted_keys(calls), float(SECOND + 10)
    )
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    slack.clear_scripts()
    for n in range(CHATTER):
        slack.add_message(CHANNEL, f"chatter {n}")


async def test_kill_9_mid_outbox_in_a_busy_channel_posts_once_and_writes_back_once(
    rig: tuple[Server, str, FakeWebhook, FakeSlack],
) -> None:
    srv, url, webhook, slack = rig
    async with httpx.AsyncClient(timeout=10.0) as client:
        proc = srv.start()
        await srv.wait_healthy(client)
        await post_and_answer(client, srv, url, webhook, slack)
        await kill_mid_post(client, srv, slack, proc)
        sent_before = Counter(
            r.headers["idempotency-key"] for r in webhook.recorded() if r.status == 200
        )

        restarted = time.monotonic()
        srv.start()
        await srv.wait_healthy(client)

        async def adopted() -> float | None:
            store = SqlStore.from_url(url)
            try:
                [delivery] = await store.deliveries(STRANDED)
            finally:
                await store.close()
            return time.monotonic() - restarted if delivery.state == "posted" else None

        recovery = await poll(adopted, within=RECOVERY_S + 5, what="the stranded post adopted")

        async def settled() -> bool | None:
            open_rows = [r for r in await outbox_rows(url) if r.state in ("pending", "claimed")]
            written = {r.body["elicitationId"] for r in webhook.recorded() if r.status == 200}
            return True if not open_rows and len(written) == FIRST else None

        await poll(settled, within=SECOND + RECOVERY_S + 10, what="every post and write-back")

    print(f"\nrecovery: stranded post adopted {recovery:.2f} s after the restart ({url[:10]}…)")
    assert recovery < RECOVERY_S
    await assert_posted_once(url, slack)
    # Write-backs: each answer delivered; a repeat only ever with the same key and body.
    by_key: dict[str, set[bytes]] = defaultdict(set)
    for r in webhook.recorded():
        by_key[r.headers["idempotency-key"]].add(r.raw)
    assert len(by_key) == FIRST
    assert all(len(bodies) == 1 for bodies in by_key.values())
    repeats = {k: n for k, n in sent_before.items() if n > 1}
    assert not repeats, f"write-backs repeated before the kill: {repeats}"


async def assert_posted_once(url: str, slack: FakeSlack) -> None:
    """Slack has exactly one message per elicitation, among 250 newer ones; the store's refs
    point at them; the lookup read history from the first attempt on, page by page."""
    assert question_posts(slack.calls()) == dict.fromkeys(KEYS, 1)
    assert sorted(ours(slack)) == sorted(KEYS)
    history = slack.calls_to("conversations.history")
    assert [c for c in history if c.params.get("oldest")], "looked back from the first attempt"
    assert any(c.params.get("cursor") for c in history), "the original was past the first page"
    store = SqlStore.from_url(url)
    try:
        deliveries = {k: await store.deliveries(k) for k in KEYS}
    finally:
        await store.close()
    assert {d.state for ds in deliveries.values() for d in ds} == {"posted"}
    ref = deliveries[STRANDED][0].ref
    assert isinstance(ref, SlackRef)
    assert ref.ts == ours(slack)[STRANDED]["ts"]

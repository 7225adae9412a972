"""Chaos: three ``elicitbot serve`` replicas on PostgreSQL and NATS JetStream, killed at random.

The three start at the same moment on an empty database (each migrates under the advisory lock:
one does the work, the others find it done). 1,000 SuperPipeline events arrive, a tenth of them
twice — half over HTTP to a random replica, half on a JetStream subject the replicas share one
durable consumer of. Questions go to 45 Slack channels of the fake Web API (one post a second per
channel, 429 beyond it); five boards fall back to a second channel after 5 s unanswered, five
carry a reminder 8 s after they arrive. People click answers on random replicas. Every few
seconds one replica is killed with SIGKILL and started again.

At the end, the fake's record says: every elicitation posted exactly once per destination, every
follow-up and every due reminder sent once, nothing over the per-channel rate; SuperPipeline got
every answer, a repeat only ever with the same Idempotency-Key and body; the database holds every
event once and has nothing left to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import secrets
import time
import urllib.parse
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import psycopg
import pytest

from adapters.sources.superpipeline.parse import CE_TYPE
from bot.domain.records import EffectKind
from store.sql import SqlStore
from tests.conftest import PG_URL, _pg_schema_url
from tests.fakes import FakeWebhook
from tests.integration.slack.rig import buttons, sign
from tests.integration.test_crash import Server, free_port, poll
from tests.slack_fake import TEAM_ID, FakeSlack, SlackCall
from tests.unit.sources.superpipeline_fixtures import VALID

pytestmark = pytest.mark.faults

NATS_URL = "nats://127.0.0.1:4222"
SECRET = "chaos-secret"
ENV = {"SLACK_BOT_TOKEN": "xoxb-chaos-token", "SLACK_SIGNING_SECRET": SECRET}
REPLICAS = 3
EVENTS = 1000
DUPLICATES = EVENTS // 10
UNIQUE = EVENTS - DUPLICATES
BOARDS = 45
FOLLOWUP_BOARDS = range(5)
REMINDER_BOARDS = range(5, 10)
ANSWER_BOARDS = range(10, 13)
FOLLOWUP_S = 5
REMIND_AFTER_S = 8
KILL_EVERY_S = 4.0
CHAOS_S = 30.0
SETTLE_S = 180.0


def channel(board: int) -> str:
    return f"C0CH{board:02d}"


def fallback(board: int) -> str:
    return f"C0FB{board:02d}"


def routes() -> str:
    out = []
    for b in range(BOARDS):
        destinations = [f"slack:{channel(b)}"]
        extra = ""
        if b in FOLLOWUP_BOARDS:
            destinations.append(f"slack:{fallback(b)}")
            extra = f"followup_seconds = {FOLLOWUP_S}\n"
        out.append(
            f'[[routes]]\nmatch = {{ board = "brd_chaos{b:02d}" }}\n'
            f"destinations = {json.dumps(destinations)}\n{extra}"
        )
    return "\n".join(out)


@pytest.fixture
def schema() -> Iterator[str]:
    """An empty PostgreSQL schema: the replicas migrate it themselves, all at once."""
    name = f"chaos_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield _pg_schema_url(name)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def event(n: int, tag: str, created: datetime) -> tuple[int, dict[str, Any]]:
    board = n % BOARDS
    data = copy.deepcopy(VALID["options"])
    data["elicitationId"] = f"eli_chaos{n:05d}"
    data["boardId"] = f"brd_chaos{board:02d}"
    if board in REMINDER_BOARDS:
        remind_at = created + timedelta(seconds=REMIND_AFTER_S)
        data["deadline"] = {"remindAt": remind_at.isoformat(timespec="milliseconds")}
    return board, {
        "specversion": "1.0",
        "id": f"evt-{tag}-{n:05d}",
        "source": "/superpipeline/chaos",
        "type": CE_TYPE,
        "subject": "evt.acme.superpipeline.elicitation.pending",
        "datacontenttype": "application/json",
        "data": data,
    }


class Fleet:
    """Three replicas of one config (ports differ), killed and restarted at random."""

    def __init__(self, tmp: Path, url: str, slack: FakeSlack, webhook: FakeWebhook, tag: str):
        self.servers: list[Server] = []
        for i in range(REPLICAS):
            port = free_port()
            config = tmp / f"replica-{i}.toml"
            config.write_text(
                f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
                f'[store]\nurl = "{url}"\n\n'
                f'[nats]\nurl = "{NATS_URL}"\n'
                f'subjects = ["t{tag}.*.superpipeline.elicitation.pending"]\n'
                f'durable = "d{tag}"\n\n'
                '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\n'
                'signing_secret_env = "SLACK_SIGNING_SECRET"\n'
                f'api_url = "{slack.api_url}"\n\n'
                f"{routes()}\n"
                f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n',
                encoding="utf-8",
            )
            cwd = tmp / f"r{i}"
            cwd.mkdir()
            self.servers.append(Server(cwd, config, port, ENV))
        self.kills = 0

    def alive(self) -> list[Server]:
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def logs(self) -> str:
        return "\n".join(s.logs()[-2000:] for s in self.servers)

    async def chaos(self, stop: asyncio.Event, rng: random.Random) -> None:
        """Kill a random replica every few seconds, and start it again a second later."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), KILL_EVERY_S)
            if stop.is_set():
                return
            victim = rng.choice(self.servers)
            victim.kill()
            self.kills += 1
            await asyncio.sleep(1.0)
            victim.start()

    def stop(self) -> None:
        for s in self.servers:
            s.kill()


async def post_http(client: httpx.AsyncClient, fleet: Fleet, body: dict[str, Any]) -> None:
    """To a random live replica; a replica killed mid-request means send it again (a
    duplicate, as a real sender's retry)."""
    for _ in range(50):
        live = fleet.alive()
        if live:
            try:
                response = await client.post(
                    f"{random.choice(live).base}/v1/events",
                    json=body,
                    headers={"Content-Type": "application/cloudevents+json"},
                )
            except httpx.TransportError:
                pass
            else:
                if response.status_code in (200, 202):
                    return
        await asyncio.sleep(0.2)
    pytest.fail(f"no replica took {body['id']}")


def click_body(message: dict[str, Any], chan: str) -> str:
    action = buttons(message)[-1]  # "Deny": always allowed
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM_ID, "domain": "acme"},
        "user": {"id": "U0ALICE", "username": "alice", "name": "alice", "team_id": TEAM_ID},
        "api_app_id": "A0ELICITBOT",
        "token": "legacy-verification-token",
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": chan,
            "is_ephemeral": False,
        },
        "trigger_id": f"{int(time.time())}.{secrets.token_hex(6)}",
        "channel": {"id": chan, "name": chan.lower()},
        "message": message,
        "state": {"values": {}},
        "response_url": "https://hooks.slack.invalid/actions/T0/1/x",
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


async def click(client: httpx.AsyncClient, fleet: Fleet, message: dict[str, Any], chan: str) -> str:
    """A click on a random live replica until one acks it; returns the elicitation key."""
    body = click_body(message, chan)
    for _ in range(50):
        live = fleet.alive()
        stamp = str(int(time.time()))
        if live:
            with contextlib.suppress(httpx.TransportError):
                response = await client.post(
                    f"{random.choice(live).base}/slack/events",
                    content=body.encode(),
                    headers={
                        "content-type": "application/x-www-form-urlencoded",
                        "x-slack-request-timestamp": stamp,
                        "x-slack-signature": sign(SECRET, stamp, body),
                    },
                )
                if response.status_code == 200:
                    meta = (message.get("metadata") or {}).get("event_payload") or {}
                    return str(meta["elicitation"])
        await asyncio.sleep(0.2)
    pytest.fail("no replica acked a click")


def question_posts(calls: list[SlackCall]) -> Counter[tuple[str, str]]:
    """Question posts Slack carried out, by (elicitation, channel)."""
    out: Counter[tuple[str, str]] = Counter()
    for c in calls:
        meta = (c.params.get("metadata") or {}).get("event_payload") or {}
        if (
            c.method == "chat.postMessage"
            and c.status == 200
            and not c.params.get("thread_ts")
            and "elicitation" in meta
        ):
            out[(meta["elicitation"], str(c.params["channel"]))] += 1
    return out


def reminders(slack: FakeSlack, calls: list[SlackCall]) -> Counter[str]:
    """Reminder notices Slack carried out, by the elicitation of the thread they are in."""
    parents: dict[tuple[str, str], str] = {}
    for b in range(BOARDS):
        for m in slack.messages(channel(b)):
            meta = (m.get("metadata") or {}).get("event_payload") or {}
            if "elicitation" in meta:
                parents[(channel(b), m["ts"])] = meta["elicitation"]
    out: Counter[str] = Counter()
    for c in calls:
        if c.method != "chat.postMessage" or c.status != 200 or not c.params.get("thread_ts"):
            continue
        key = parents.get((str(c.params["channel"]), str(c.params["thread_ts"])))
        text = str(c.params.get("text", ""))
        if key is not None and "remind" in text.lower():
            out[key] += 1
    return out


async def test_three_replicas_under_sigkill_post_once_answer_once_remind_once(
    tmp_path: Path, schema: str
) -> None:
    tag = uuid.uuid4().hex[:10]
    rng = random.Random(tag)
    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    await js.add_stream(name=f"S{tag}", subjects=[f"t{tag}.*.superpipeline.elicitation.pending"])
    with FakeSlack(ENV["SLACK_BOT_TOKEN"]) as slack, FakeWebhook() as webhook:
        # One a second per channel, with one message of burst: three processes' requests reach
        # the fake a few milliseconds early or late (a loaded machine), as they reach Slack.
        slack.limit("chat.postMessage", per_second=1.0, burst=2)
        fleet = Fleet(tmp_path, schema, slack, webhook, tag)
        try:
            async with httpx.AsyncClient(timeout=10.0) as client:
                for s in fleet.servers:  # at the same moment, on an empty database
                    s.start()
                for s in fleet.servers:
                    await s.wait_healthy(client)
                stop = asyncio.Event()
                chaos = asyncio.create_task(fleet.chaos(stop, rng))
                answered = await drive(client, fleet, js, slack, tag, rng)
                await asyncio.sleep(max(0.0, CHAOS_S - 0.0))
                stop.set()
                await chaos
                for s in fleet.servers:
                    if s.proc is None or s.proc.poll() is not None:
                        s.start()
                await settle(schema, webhook, answered, fleet)
        finally:
            fleet.stop()
            with contextlib.suppress(Exception):
                await js.delete_stream(f"S{tag}")
            await nc.close()
    await check(schema, slack, webhook, answered, fleet)


async def drive(
    client: httpx.AsyncClient,
    fleet: Fleet,
    js: Any,
    slack: FakeSlack,
    tag: str,
    rng: random.Random,
) -> set[str]:
    """Send every event (a tenth twice), then click answers on the answer boards' posts."""
    created = datetime.now(UTC)
    numbers = list(range(UNIQUE)) + rng.sample(range(UNIQUE), DUPLICATES)
    rng.shuffle(numbers)
    for start in range(0, len(numbers), 50):
        sends = []
        for n in numbers[start : start + 50]:
            _, body = event(n, tag, created)
            if n % 2:
                sends.append(post_http(client, fleet, body))
            else:
                subject = f"t{tag}.acme.superpipeline.elicitation.pending"
                sends.append(js.publish(subject, json.dumps(body).encode()))
        await asyncio.gather(*sends)
    answered: set[str] = set()
    deadline = time.monotonic() + 60
    wanted = {n for n in range(UNIQUE) if n % BOARDS in ANSWER_BOARDS}
    while len(answered) < len(wanted) and time.monotonic() < deadline:
        for b in ANSWER_BOARDS:
            for m in slack.messages(channel(b)):
                meta = (m.get("metadata") or {}).get("event_payload") or {}
                key = meta.get("elicitation")
                if key and key not in answered and not m.get("thread_ts"):
                    answered.add(await click(client, fleet, m, channel(b)))
        await asyncio.sleep(0.5)
    return answered


async def settle(schema: str, webhook: FakeWebhook, answered: set[str], fleet: Fleet) -> None:
    """Until every event is stored and every post, notice and write-back is done. Rewrites of
    answered or reminded copies may still be queued: Slack's chat.update budget (50 a minute
    for the whole workspace, shared by the replicas) takes minutes over hundreds of them."""

    async def done() -> bool | None:
        store = SqlStore.from_url(schema)
        try:
            rows = await store.outbox()
            stored = await store.count("elicitation")
        finally:
            await store.close()
        # A follow-up fires followup_seconds after its copy was accepted, and a reminder waits for
        # its copy: one whose copy went out late (a killed replica's claim, a channel's posts held
        # behind a retry) is a post or a notice still to come, not one that was lost.
        with psycopg.connect(schema) as conn:
            followups = conn.execute(
                "SELECT count(*) FROM deadline"
                " WHERE kind IN ('followup', 'remind') AND state = 'pending'"
            ).fetchone()
        open_rows = [
            r for r in rows if r.state in ("pending", "claimed") and r.kind != EffectKind.UPDATE
        ]
        failed = [r for r in rows if r.state == "failed"]
        assert not failed, f"failed for good: {[(r.kind, r.last_error) for r in failed][:5]}"
        written = {
            r.body["elicitationId"]
            for r in webhook.recorded()
            if r.status == 200 and isinstance(r.body, dict)
        }
        left.update(
            followups_pending=followups[0] if followups else None,
            stored=stored,
            open=[
                (r.kind.value, r.state.value, r.attempts, r.next_attempt_at, r.last_error)
                for r in open_rows[:5]
            ],
            written=len(written),
        )
        if (
            stored == UNIQUE
            and not open_rows
            and len(written) >= len(answered)
            and followups is not None
            and followups[0] == 0
        ):
            return True
        return None

    left: dict[str, Any] = {}
    await poll(
        done,
        within=SETTLE_S,
        what="every post, notice and write-back done",
        interval=1.0,
        detail=lambda: f"left: {left}\n{fleet.logs()[-4000:]}",
    )


async def check(
    schema: str, slack: FakeSlack, webhook: FakeWebhook, answered: set[str], fleet: Fleet
) -> None:
    calls = slack.calls()
    posts = question_posts(calls)
    expected: dict[tuple[str, str], int] = {}
    for n in range(UNIQUE):
        key, board = f"superpipeline:eli_chaos{n:05d}", n % BOARDS
        expected[(key, channel(board))] = 1
        if board in FOLLOWUP_BOARDS:
            expected[(key, fallback(board))] = 1
    repeated = {k: v for k, v in posts.items() if v > 1}
    missing = set(expected) - set(posts)
    print(
        f"\nchaos: {fleet.kills} kills, {len(posts)} question posts, {len(answered)} answers,"
        f" {len(repeated)} repeated, {len(missing)} missing"
    )
    assert not repeated, f"posted twice: {sorted(repeated)[:10]}"
    assert not missing, f"never posted: {sorted(missing)[:10]}"
    assert set(posts) == set(expected)
    limited = [c for c in calls if c.method == "chat.postMessage" and c.status == 429]
    assert not limited, f"{len(limited)} posts over Slack's per-channel rate"
    by_channel: dict[str, list[float]] = defaultdict(list)
    for c in calls:
        if c.method == "chat.postMessage" and c.status == 200:
            by_channel[str(c.params["channel"])].append(c.at)
    # Sustained: never more than 11 messages in any 10 s of one channel (the rate plus the burst).
    for chan, times in by_channel.items():
        times.sort()
        busiest = max(
            sum(1 for t in times[i:] if t - start < 10.0) for i, start in enumerate(times)
        )
        assert busiest <= 11, f"{chan}: {busiest} messages within 10 s"
    # Reminders: each reminder board's elicitation reminded exactly once.
    reminded = reminders(slack, calls)
    reminder_keys = {
        f"superpipeline:eli_chaos{n:05d}" for n in range(UNIQUE) if n % BOARDS in REMINDER_BOARDS
    }
    assert {k: v for k, v in reminded.items() if v > 1} == {}
    assert set(reminded) == reminder_keys
    # Write-backs: every answer, one key each, a repeat only with the same body.
    bodies: dict[str, set[bytes]] = defaultdict(set)
    for r in webhook.recorded():
        bodies[r.headers["idempotency-key"]].add(r.raw)
    assert all(len(b) == 1 for b in bodies.values())
    written = {
        r.body["elicitationId"]
        for r in webhook.recorded()
        if r.status == 200 and isinstance(r.body, dict)
    }
    assert written == {k.split(":", 1)[1] for k in answered}
    store = SqlStore.from_url(schema)
    try:
        assert await store.count("elicitation") == UNIQUE
        assert await store.count("answer") == len(answered)
    finally:
        await store.close()

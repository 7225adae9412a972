"""Crashes: ``kill -9`` right after intake, and a stop between the answer and its write-back.

1. ``python -m bot serve`` as a subprocess on a SQLite file, routing to Slack (the fake Slack Web
   API, :mod:`tests.slack_fake`) and the web inbox, takes 12 events, is killed with SIGKILL right
   after the last 202 while Slack holds the answers to the posts it took, and is started again on
   the same file: every accepted event is there once, and Slack got exactly one
   ``chat.postMessage`` per elicitation (reliability.md §8 test 4: a post Slack took before the
   crash is found by its metadata and adopted, not posted again).
2. An in-process :class:`bot.app.wiring.Elicitbot` records an answer whose write-back keeps failing
   (503), is stopped without draining, and a fresh one on the same file delivers the write-back
   with the same ``Idempotency-Key``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from adapters.sources.superpipeline.parse import CE_TYPE, parse_body
from bot.app.config import AppConfig, parse_config
from bot.app.wiring import Elicitbot
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Attempt, ElicitationKey, Identity, Status
from bot.domain.records import DeliveryView, EffectView
from bot.domain.refs import SlackRef
from bot.outbox import writeback_key
from bot.service import Inbound
from store.sql import SqlStore
from tests.fakes import FakeWebhook
from tests.integration.slack.rig import button, message_click, post_interaction
from tests.slack_fake import FakeSlack, SlackCall
from tests.unit.sources.superpipeline_fixtures import VALID

pytestmark = [pytest.mark.slow, pytest.mark.faults]

EVENTS = 12
"""Slack takes one post a second per channel, so 12 posts settle in about 12 s after the restart."""
CHANNEL = "C0APPROVALS"
SLACK_ENV = {"SLACK_BOT_TOKEN": "xoxb-crash-test-token", "SLACK_SIGNING_SECRET": "crash-secret"}
START_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 30.0
T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def poll(
    probe: Callable[[], Awaitable[T | None]],
    *,
    within: float,
    what: str,
    interval: float = 0.05,
    detail: Callable[[], str] = str,
) -> T:
    """``probe()`` until it returns something other than None; fail after ``within`` seconds
    (the failure shows the last error and ``detail()``)."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = await probe()
        except (httpx.TransportError, OSError) as exc:
            last = exc
        else:
            if result is not None:
                return result
        await asyncio.sleep(interval)
    pytest.fail(f"timed out after {within} s waiting for {what} (last error: {last!r})\n{detail()}")


# --------------------------------------------------------------------------- scenario 1


class Server:
    """``python -m bot serve -c cfg.toml`` in ``cwd``, logging to a file there."""

    def __init__(
        self, cwd: Path, config: Path, port: int, env: Mapping[str, str] | None = None
    ) -> None:
        self.cwd = cwd
        self.config = config
        self.env = dict(env or {})
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.runs += 1
        log = (self.cwd / f"serve-{self.runs}.log").open("wb")
        env = {**os.environ, **self.env, "ELICITBOT_LOG_LEVEL": "INFO"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bot", "serve", "-c", str(self.config)],
            cwd=self.cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        return self.proc

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-3000:] for p in sorted(self.cwd.glob("serve-*.log"))
        )

    async def wait_healthy(self, client: httpx.AsyncClient) -> None:
        async def probe() -> bool | None:
            assert self.proc is not None
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.logs()}")
            response = await client.get(f"{self.base}/healthz")
            return True if response.status_code == 200 else None

        await poll(probe, within=START_TIMEOUT_S, what="/healthz")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def bot_serve(
    tmp_path: Path, store_url: str, route: str = ""
) -> Iterator[tuple[Server, FakeWebhook, FakeSlack]]:
    """The server (not started) on ``store_url``, routing every elicitation to Slack (the fake)
    and the web inbox; ``route``: more of that ``[[routes]]`` block's keys, as TOML lines."""
    port = free_port()
    with FakeWebhook() as webhook, FakeSlack(SLACK_ENV["SLACK_BOT_TOKEN"]) as slack:
        config = tmp_path / "cfg.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
            f'[store]\nurl = "{store_url}"\n\n'
            '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\n'
            'signing_secret_env = "SLACK_SIGNING_SECRET"\n'
            f'api_url = "{slack.api_url}"\n\n'
            f'[[routes]]\ndestinations = ["slack:{CHANNEL}", "web"]\n{route}\n'
            f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n',
            encoding="utf-8",
        )
        srv = Server(tmp_path, config, port, SLACK_ENV)
        try:
            yield srv, webhook, slack
        finally:
            srv.kill()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, Path, FakeWebhook, FakeSlack]]:
    """The server on a SQLite file."""
    db = tmp_path / "elicitbot.db"
    with bot_serve(tmp_path, f"sqlite:///{db}") as (srv, webhook, slack):
        yield srv, db, webhook, slack


def cloud_event(i: int) -> dict[str, Any]:
    data = copy.deepcopy(VALID["options"])
    data["elicitationId"] = f"eli_crash{i:08d}"
    return {
        "specversion": "1.0",
        "id": f"evt-crash-{i:04d}",
        "source": "/superpipeline/crash-test",
        "type": CE_TYPE,
        "subject": "evt.acme.superpipeline.elicitation.pending",
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "data": data,
    }


async def send(client: httpx.AsyncClient, base: str, i: int) -> None:
    """:func:`cloud_event` ``i`` to the server, taken (202)."""
    response = await client.post(
        f"{base}/v1/events",
        json=cloud_event(i),
        headers={"Content-Type": "application/cloudevents+json"},
    )
    assert response.status_code == 202, response.text


async def read_db(db: Path) -> tuple[int, list[EffectView], list[DeliveryView]]:
    """(elicitations, outbox rows, deliveries) read straight from the SQLite file."""
    store = SqlStore.from_url(f"sqlite:///{db}")
    try:
        count = await store.count("elicitation")
        rows = await store.outbox()
        deliveries = [
            d
            for s in await store.list_elicitations(limit=500)
            for d in await store.deliveries(s.elicitation.key)
        ]
        return count, rows, deliveries
    finally:
        await store.close()


def slack_posts(calls: list[SlackCall]) -> Counter[str]:
    """chat.postMessage calls Slack carried out, by the elicitation in their metadata."""
    return Counter(
        c.params["metadata"]["event_payload"]["elicitation"]
        for c in calls
        if c.method == "chat.postMessage" and c.status == 200
    )


async def test_kill_9_right_after_intake_loses_nothing_and_posts_each_once(
    server: tuple[Server, Path, FakeWebhook, FakeSlack],
) -> None:
    srv, db, webhook, slack = server
    keys = {f"superpipeline:eli_crash{i:08d}" for i in range(EVENTS)}
    # Slack takes each post at once but answers 30 s later: whatever the dispatcher posts before
    # the kill is in the channel while its ts never reaches the database (the §8.4 window).
    slack.script("chat.postMessage", delay=30, times=10_000)
    async with httpx.AsyncClient(timeout=10.0) as client:
        proc = srv.start()
        await srv.wait_healthy(client)

        async def send(i: int) -> int:
            response = await client.post(
                f"{srv.base}/v1/events",
                json=cloud_event(i),
                headers={"Content-Type": "application/cloudevents+json"},
            )
            return response.status_code

        statuses = await asyncio.gather(*(send(i) for i in range(EVENTS)))
        # The dispatcher started posting with the first 202; make sure one post is in flight.
        await asyncio.to_thread(slack.wait_for, lambda calls: bool(slack_posts(calls)), 10.0)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert statuses == [202] * EVENTS, srv.logs()
        slack.clear_scripts()
        before = slack_posts(slack.calls())

        # Commit before ack: every 202 is on disk, with its Slack post to do (or done).
        count, rows, _ = await read_db(db)
        assert count == EVENTS
        assert Counter(r.elicitation_key for r in rows if r.kind == "post") == dict.fromkeys(
            keys, 1
        )
        assert before, "no post reached Slack before the kill"
        assert set(before.values()) == {1}
        assert not [r for r in rows if r.kind == "post" and r.state == "done"], (
            "Slack answered none of them, so none can be done"
        )

        srv.start()
        await srv.wait_healthy(client)

        seen: dict[str, Any] = {}
        expected = [(f"slack:{CHANNEL}", "posted"), ("web", "posted")]

        async def settled() -> bool | None:
            listing = (await client.get(f"{srv.base}/v1/elicitations?limit=100")).json()
            seen["listed"] = len(listing["items"])
            if len(listing["items"]) != EVENTS:
                return None
            for item in listing["items"]:
                detail = (await client.get(f"{srv.base}/v1/elicitations/{item['id']}")).json()
                shown = [(d["destination"], d["state"]) for d in detail["deliveries"]]
                if shown != expected:
                    seen["unsettled"] = (item["id"], shown)
                    return None
            return True

        await poll(
            settled,
            within=SETTLE_TIMEOUT_S,
            what=f"{EVENTS} elicitations, each posted to Slack",
            detail=lambda: f"last seen: {seen}\n{srv.logs()}",
        )

    await assert_each_posted_once(db, slack, keys)
    assert len([c for c in slack.calls() if c.method == "auth.test"]) == 2, "once per start"
    assert webhook.recorded() == []  # nothing was answered, so nothing was written back


async def assert_each_posted_once(db: Path, slack: FakeSlack, keys: set[str]) -> None:
    """Store and Slack agree: one done post row, one posted delivery with a ref to a message in
    the channel, and exactly one chat.postMessage, per elicitation."""
    count, rows, deliveries = await read_db(db)
    assert count == EVENTS
    posts = [r for r in rows if r.kind == "post"]
    assert Counter(r.elicitation_key for r in posts) == dict.fromkeys(keys, 1)
    assert {r.state for r in posts} == {"done"}
    assert [r for r in rows if r.state in ("pending", "claimed")] == []
    assert len(deliveries) == 2 * EVENTS
    assert {d.state for d in deliveries} == {"posted"}

    # The real "after restart the post happens, once": one chat.postMessage per elicitation,
    # the ones Slack took before the kill adopted (found by metadata), the rest posted.
    calls = slack.calls()
    assert slack_posts(calls) == dict.fromkeys(keys, 1)
    messages = {m["ts"]: m for m in slack.messages(CHANNEL)}
    assert len(messages) == EVENTS
    refs = [
        d.ref
        for d in deliveries
        if d.destination == f"slack:{CHANNEL}" and isinstance(d.ref, SlackRef)
    ]
    assert {r.channel for r in refs} == {CHANNEL}
    assert {messages[r.ts]["metadata"]["event_payload"]["elicitation"] for r in refs} == keys
    assert [c for c in calls if c.method == "conversations.history"], "retries looked first"


async def test_sigterm_finishes_the_work_and_exits_0(
    server: tuple[Server, Path, FakeWebhook, FakeSlack],
) -> None:
    """DESIGN "Shutdown": SIGTERM stops intake, lets outbox work finish, and exits 0."""
    srv, db, _, _ = server
    async with httpx.AsyncClient(timeout=10.0) as client:
        proc = srv.start()
        await srv.wait_healthy(client)
        await send(client, srv.base, 0)

        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=20)

    count, rows, deliveries = await read_db(db)
    assert count == 1
    assert [(r.kind, r.state) for r in rows] == [("post", "done")]
    assert [(d.destination, d.state) for d in deliveries] == [
        (f"slack:{CHANNEL}", "posted"),
        ("web", "posted"),
    ]
    assert returncode == 0, f"exit status {returncode} after SIGTERM:\n{srv.logs()}"


# --------------------------------------------------------------------------- scenario 2


def bot_config(db: Path, webhook: FakeWebhook) -> AppConfig:
    return parse_config(
        {
            "server": {"listen": f"127.0.0.1:{free_port()}"},
            "store": {"url": f"sqlite:///{db}"},
            "sources": {"superpipeline": {"answer_webhook": webhook.url}},
        }
    )


async def crash(bot: Elicitbot) -> None:
    """Stop without draining: cancel the dispatcher mid-flight and drop the connections."""
    tasks = list(bot._tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await bot.http_client.aclose()
    await bot.store.close()


async def writeback_rows(bot: Elicitbot, key: ElicitationKey) -> list[EffectView]:
    return [r for r in await bot.store.outbox(key) if r.kind == "writeback"]


async def test_a_write_back_pending_at_a_crash_is_delivered_after_restart(tmp_path: Path) -> None:
    db = tmp_path / "elicitbot.db"
    with FakeWebhook(default=503) as webhook:
        first = Elicitbot(bot_config(db, webhook), environ={})
        await first.start()
        try:
            e = parse_body(copy.deepcopy(VALID["approval-request"]), workspace="acme")
            [outcome] = await first.service.intake(
                [Inbound("ce:/superpipeline/crash-test", "evt-answer-1", e, {})]
            )
            key = outcome.key

            async def web_posted() -> bool | None:
                states = [d.state for d in await first.store.deliveries(key)]
                return True if states == ["posted"] else None

            await poll(web_posted, within=10, what="the web delivery")
            answer = await first.service.answer(
                key,
                Attempt(
                    shown=SHOWN_WHOLE,
                    respondent=Identity(platform="slack", user="U0ALICE"),
                    option_ids=("deny",),
                    via="web",
                ),
            )
            assert answer.won

            await asyncio.to_thread(webhook.wait_for, lambda got: len(got) >= 2, 15.0)
        finally:
            await crash(first)

        failed = webhook.recorded()
        assert failed, "the write-back was never attempted before the crash"
        assert {r.status for r in failed} == {503}
        webhook.script([], default=200)

        second = Elicitbot(bot_config(db, webhook), environ={})
        await second.start()
        try:

            async def written_back() -> list[EffectView] | None:
                rows = await writeback_rows(second, key)
                return rows if [r.state for r in rows] == ["done"] else None

            [row] = await poll(written_back, within=20, what="the write-back to be done")
            stored = await second.store.get(key)
        finally:
            await second.stop()

    requests = webhook.recorded()
    assert [r.status for r in requests] == [503] * len(failed) + [200]
    assert row.attempts >= len(failed) + 1
    assert {r.headers["idempotency-key"] for r in requests} == {writeback_key(key)}
    assert {r.raw for r in requests} == {requests[0].raw}
    body = requests[-1].body
    assert body["elicitationId"] == "apr_4d5e6f7081920314"
    assert body["status"] == "answered"
    assert body["answer"]["optionIds"] == ["deny"]
    assert body["answeredBy"]["id"] == "slack:U0ALICE"
    assert body["answeredVia"] == "web"
    assert stored is not None
    assert stored.status is Status.ANSWERED


# --------------------------------------------------------------------------- scenario 3

QUORUM = 'approvers = ["slack:U0BOB", "slack:U0CAROL"]\nquorum = 2\n'


async def vote(
    client: httpx.AsyncClient, srv: Server, slack: FakeSlack, key: str, user: str
) -> int:
    """``user`` clicks Allow once on ``key``'s Slack copy, signed; returns how many ephemeral
    messages there were before (for :func:`told`)."""

    async def copy_of() -> dict[str, Any] | None:
        found = [
            m
            for m in slack.messages(CHANNEL)
            if (m.get("metadata") or {}).get("event_payload", {}).get("elicitation") == key
        ]
        return found[0] if found else None

    message = await poll(copy_of, within=SETTLE_TIMEOUT_S, what=f"{key}'s Slack copy")
    before = len(slack.ephemerals())
    payload = message_click(
        message,
        button(message, "allow_once"),
        user,
        channel=CHANNEL,
        trigger_id=slack.issue_trigger(),
        response_url=slack.issue_response_url(),
    )
    secret = SLACK_ENV["SLACK_SIGNING_SECRET"]
    assert await post_interaction(client, f"{srv.base}/slack/events", payload, secret) == 200
    return before


async def told(srv: Server, slack: FakeSlack, user: str, since: int) -> str:
    """The first thing ``user`` is told privately after the first ``since`` ephemerals."""

    async def ephemeral() -> str | None:
        said = [e["text"] for e in slack.ephemerals()[since:] if e["user"] == user]
        return said[0] if said else None

    return await poll(ephemeral, within=10, what=f"{user} told", detail=srv.logs)


async def test_kill_9_between_two_votes_loses_neither(tmp_path: Path, db_url: str) -> None:
    """Quorum 2: Bob's vote is recorded (he is told), the process is killed with SIGKILL and
    started again; Carol's vote then decides with both approvals, written back once."""
    key = ElicitationKey("superpipeline:eli_crash00000000")
    with bot_serve(tmp_path, db_url, QUORUM) as (srv, webhook, slack):
        async with httpx.AsyncClient(timeout=10.0) as client:
            proc = srv.start()
            await srv.wait_healthy(client)
            await send(client, srv.base, 0)
            since = await vote(client, srv, slack, key, "U0BOB")
            assert await told(srv, slack, "U0BOB", since) == (
                "Your approval is recorded (1 of 2); waiting for one more approver."
            )
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=10) == -signal.SIGKILL

            store = SqlStore.from_url(db_url)
            try:
                killed = await store.get(key)
            finally:
                await store.close()
            assert killed is not None
            assert killed.status is Status.PENDING
            assert [v.respondent for v in killed.votes] == ["slack:U0BOB"]

            srv.start()
            await srv.wait_healthy(client)
            await vote(client, srv, slack, key, "U0CAROL")
            [hook] = await asyncio.to_thread(webhook.wait_for, bool, 20.0)

            async def settled() -> bool | None:
                store = SqlStore.from_url(db_url)
                try:
                    rows = await store.outbox(key)
                finally:
                    await store.close()
                return True if all(r.state == "done" for r in rows) else None

            await poll(settled, within=SETTLE_TIMEOUT_S, what="the outbox settled")

    assert len(webhook.recorded()) == 1, "written back once"
    assert hook.status == 200
    assert hook.body["answeredBy"]["id"] == "slack:U0CAROL"
    assert [(a["by"], a["via"], a["option"]) for a in hook.body["approvals"]] == [
        ("slack:U0BOB", f"slack:{CHANNEL}", "allow_once"),
        ("slack:U0CAROL", f"slack:{CHANNEL}", "allow_once"),
    ]
    print(f"\nafter kill -9 between the votes ({db_url[:10]}…): {hook.body['approvals']}")

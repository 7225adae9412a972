"""Slack click benchmark: N signed button clicks at R per second on N elicitations.

A server process (this file with ``--serve``: the store, the Service, the outbox Dispatcher, the
Bolt app of :mod:`adapters.slack.app` on :func:`adapters.slack.routes.slack_router`, under
uvicorn) takes N SuperPipeline events over HTTP, routed to the web inbox; then the driver sends N
``block_actions`` requests, signed like Slack signs them, one per elicitation, at R per second
(open loop: a request goes at its time whether or not earlier ones were answered). Each click's
value names its elicitation, as a click on any copy does. Slack's Web API is the fake of
:mod:`tests.slack_fake` (in the driver's process); answers are written back to a local webhook.

Prints one JSON line: ack latency p50/p99/max (time to the HTTP response, which Bolt sends when
the listener calls ``ack()``), the answers recorded and the write-backs received, and the server
process's own CPU time (user + system, from ``/proc``) from the first click until everything
settled, per click: a figure that holds on a noisy machine, where latencies do not.

    .venv/bin/python bench/slack_clicks.py [--clicks 1000] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import pending_event, percentile  # noqa: E402 - after the path

SECRET = "bench-signing-secret-5e1f"  # noqa: S105 - the fake's, for this run only
CHANNELS = 10


# --------------------------------------------------------------------------- the server


async def serve(args: argparse.Namespace) -> None:
    import httpx
    import uvicorn
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.app import build_app
    from adapters.slack.chat import SlackChat
    from adapters.slack.pacing import Pacer
    from adapters.slack.routes import slack_router
    from adapters.sources.superpipeline.sink import SuperPipelineSink
    from adapters.web.chat import WebChat
    from bot.app import logs
    from bot.app.http import Runtime, create_app
    from bot.clock import SystemClock
    from bot.domain.model import People, Route
    from bot.outbox import Dispatcher
    from bot.service import Service
    from store.db import upgrade
    from store.sql import SqlStore

    logs.configure("WARNING")
    upgrade(args.db)
    store = SqlStore.from_url(args.db)
    clock = SystemClock()
    http_client = httpx.AsyncClient()
    chat = SlackChat(
        AsyncWebClient(token=args.token, base_url=args.slack_api, retry_handlers=[]),
        pacer=Pacer(),
    )
    await chat.verify()
    dispatcher = Dispatcher(
        store,
        clock,
        {"web": WebChat(), "slack": chat},
        {"superpipeline": SuperPipelineSink(args.webhook, http_client)},
        lambda key: f"http://127.0.0.1:{args.port}/#{key}",
    )
    service = Service(
        store,
        clock,
        People(bot_identities=frozenset({f"slack:{chat.bot_user_id}"})),
        [Route(destinations=("web",))],
        on_change=dispatcher.wake,
    )
    slack = build_app(chat, service, signing_secret=SECRET, raw=store, clock=clock)
    from adapters.sources.superpipeline import superpipeline_router

    runtime = Runtime(store=store, elicitations=service)
    runtime.routers += [
        superpipeline_router(service, lambda _request: None, registry=runtime.registry),
        slack_router(slack.app),
    ]
    app = create_app(runtime)
    stop = asyncio.Event()
    outbox = asyncio.create_task(dispatcher.run(stop))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=args.port, log_config=None, lifespan="off")
    )
    # As `elicitbot serve` does (bot/app/wiring.py): what start built is out of the collector's
    # sight.
    gc.collect()
    gc.freeze()
    try:
        await server.serve()
    finally:
        stop.set()
        dispatcher.wake()
        outbox.cancel()
        await slack.aclose()
        await http_client.aclose()
        await store.close()


# --------------------------------------------------------------------------- the driver


def click(key: str, i: int) -> str:
    channel = f"C0BENCH{i % CHANNELS}"
    ts = f"1700000000.{i:06d}"
    payload = {
        "type": "block_actions",
        "team": {"id": "T0ACME", "domain": "acme"},
        "user": {"id": f"U{i:07d}", "name": f"person{i}", "team_id": "T0ACME"},
        "api_app_id": "A0ELICITBOT",
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "trigger_id": f"{i}.bench",
        "channel": {"id": channel, "name": "bench"},
        "message": {"type": "message", "ts": ts, "text": "", "blocks": []},
        "state": {"values": {}},
        "actions": [
            {
                "type": "button",
                "action_id": "elicitbot.option.1",
                "block_id": "elicitbot.options.0",
                "value": json.dumps({"e": key, "o": "deny", "r": None}),
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def signed(body: str) -> dict[str, str]:
    from slack_sdk.signature import SignatureVerifier

    stamp = str(int(time.time()))
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body)
    return {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": signature or "",
    }


async def wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError("the server exited during start")
            try:
                async with session.get(f"{base}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("the server did not become healthy")


async def intake(session: aiohttp.ClientSession, base: str, n: int, run: str) -> list[str]:
    queue = list(range(n))
    keys: list[str] = []

    async def worker() -> None:
        while queue:
            i = queue.pop()
            async with session.post(
                f"{base}/v1/events",
                data=json.dumps(pending_event(i, run, "/bench/slack")),
                headers={"content-type": "application/cloudevents+json"},
            ) as response:
                body = await response.json()
                if response.status != 202:
                    raise RuntimeError(f"intake {i}: {response.status} {body}")
                keys.append(f"superpipeline:eli_{run}_{i}")

    await asyncio.gather(*(worker() for _ in range(16)))
    return sorted(keys)


async def clicks(
    session: aiohttp.ClientSession, base: str, keys: list[str], rate: float
) -> tuple[list[float], int]:
    latencies: list[float] = []
    failures = 0

    async def one(i: int, key: str, at: float) -> None:
        nonlocal failures
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        body = click(key, i)
        headers = signed(body)
        started = time.perf_counter()
        async with session.post(f"{base}/slack/events", data=body, headers=headers) as response:
            await response.read()
            latencies.append(time.perf_counter() - started)
            if response.status != 200:
                failures += 1

    start = time.perf_counter() + 0.2
    await asyncio.gather(*(one(i, key, start + i / rate) for i, key in enumerate(keys)))
    return latencies, failures


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system), from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_answered(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        row = conn.execute("SELECT count(*) FROM elicitation WHERE status = 'answered'").fetchone()
    return int(row[0])


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes import FakeWebhook
    from tests.slack_fake import FakeSlack

    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeSlack() as fake,
        FakeWebhook() as webhook,
    ):
        db = Path(tmp) / "bench.db"
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before the timed part
            [
                sys.executable,
                __file__,
                "--serve",
                "--port",
                str(port),
                "--db",
                f"sqlite:///{db}",
                "--slack-api",
                fake.api_url,
                "--token",
                fake.token,
                "--webhook",
                webhook.url,
            ],
            cwd=REPO,
        )
        try:
            await wait_healthy(base, proc)
            connector = aiohttp.TCPConnector(limit=256)
            async with aiohttp.ClientSession(connector=connector) as session:
                keys = await intake(session, base, args.clicks, uuid.uuid4().hex[:8])
                cpu_before = cpu_seconds(proc.pid)
                started = time.perf_counter()
                latencies, failures = await clicks(session, base, keys, args.rate)
                sent_in = time.perf_counter() - started
            deadline = time.monotonic() + 120
            answers = written = 0
            while time.monotonic() < deadline:
                answers = await asyncio.to_thread(count_answered, db)
                written = len(webhook.requests)
                if answers >= args.clicks and written >= args.clicks:
                    break
                await asyncio.sleep(0.25)
            settled_in = time.perf_counter() - started
            server_cpu = cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
        write_keys = {r.headers.get("idempotency-key") for r in webhook.requests}
        return {
            "bench": "slack_clicks",
            "clicks": args.clicks,
            "rate_per_s": args.rate,
            "sent_in_s": round(sent_in, 2),
            "ack_p50_ms": round(percentile(latencies, 0.50) * 1000, 1),
            "ack_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
            "ack_max_ms": round(max(latencies) * 1000, 1),
            "not_200": failures,
            "answers": answers,
            "writebacks": written,
            "distinct_writebacks": len(write_keys),
            "settled_in_s": round(settled_in, 2),
            "server_cpu_s": round(server_cpu, 2),
            "server_cpu_ms_per_click": round(server_cpu * 1000 / args.clicks, 2),
            "thread_notes_posted": len([c for c in fake.calls_to("chat.postMessage") if c.ok]),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clicks", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--db", default="", help=argparse.SUPPRESS)
    parser.add_argument("--slack-api", default="", help=argparse.SUPPRESS)
    parser.add_argument("--token", default="", help=argparse.SUPPRESS)
    parser.add_argument("--webhook", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(args))
        else:
            uvloop.run(serve(args))
        return
    print(json.dumps(asyncio.run(drive(args))), flush=True)


if __name__ == "__main__":
    main()

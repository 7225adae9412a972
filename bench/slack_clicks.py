"""Slack click benchmark: N signed button clicks at R per second on N elicitations.

``python -m bot serve -c <config>`` runs as a process (Slack in HTTP mode at ``POST
/slack/events``, its Web API the fake's, every elicitation routed to the web inbox) and takes N
SuperPipeline events over HTTP; then the driver sends N
``block_actions`` requests, signed like Slack signs them, one per elicitation, at R per second
(open loop: a request goes at its time whether or not earlier ones were answered). Each click's
value names its elicitation, as a click on any copy does. Slack's Web API is the fake of
:mod:`tests.slack_fake` (in the driver's process); answers are written back to a local webhook.

Prints one JSON line: ack latency p50/p99/max (time to the HTTP response, which Bolt sends when
the listener calls ``ack()``), the answers recorded and the write-backs received, and the server
process's own CPU time (user + system, from ``/proc``) from the first click until everything
settled, per click: a figure that holds on a noisy machine, where latencies do not.

    .venv/bin/python bench/slack_clicks.py [--clicks 1000] [--rate 100]

The figures are the ``serve`` process's: until 2026-12-02 the server was this file's own
assembly of the parts (``--serve``), as like ``serve`` as it could be made by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
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

from bench.figures import machine, pending_event, percentile  # noqa: E402 - after the path
from bench.serve import Serve, cpu_seconds, load, slack_config  # noqa: E402

SECRET = "bench-signing-secret-5e1f"  # noqa: S105 - the fake's, for this run only
CHANNELS = 10


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
        serve = Serve(
            Path(tmp),
            f'[store]\nurl = "sqlite:///{db}"\n\n'
            + slack_config(
                fake.api_url,
                '[[routes]]\ndestinations = ["web"]\n',
                f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n',
            ),
            env={"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": SECRET},
        ).start()
        base = serve.base
        load_before = load()
        try:
            await serve.wait("/readyz")
            connector = aiohttp.TCPConnector(limit=256)
            async with aiohttp.ClientSession(connector=connector) as session:
                keys = await intake(session, base, args.clicks, uuid.uuid4().hex[:8])
                cpu_before = cpu_seconds(serve.pid)
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
            server_cpu = cpu_seconds(serve.pid) - cpu_before
        finally:
            await asyncio.to_thread(serve.stop)
        write_keys = {r.headers.get("idempotency-key") for r in webhook.requests}
        return {
            "bench": "slack_clicks",
            "measured_on": "serve",
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
            "machine": machine(),
            "load_before": load_before,
            "load_after": load(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clicks", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(drive(args))), flush=True)


if __name__ == "__main__":
    main()

"""MCP benchmark: ``ask`` → posted in the fake Slack → a signed click → the tool result.

Runs ``elicitbot serve`` as a process (SQLite, Slack in HTTP mode against the fake Web API,
``[mcp]`` with one agent) and measures from outside, with the ``mcp`` SDK's own client over HTTP:

1. **Round trip**: ``--questions`` asks (``--concurrency`` at a time, spread over ``--channels``
   channels so Slack's one post per second per channel is not what is measured); for each, the
   time from the ``ask`` call to its post in Slack, and to the tool result at the client after a
   person's signed click on ``/slack/events``. p50 / p99.
2. **Waiting**: ``--waiting`` asks nobody answers, held open at once; the server process's peak
   RSS and its CPU over ``--hold`` seconds while they wait (utime + stime from ``/proc``).

Prints one JSON line.

    .venv/bin/python bench/mcp_ask.py [--questions 200] [--concurrency 10] [--channels 20]
        [--waiting 100] [--hold 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import httpx2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mcp import Client  # noqa: E402 - after the path
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from bench.figures import machine, percentile  # noqa: E402
from bench.intake import free_port, tree_cpu, wait_healthy  # noqa: E402
from tests.integration.slack.rig import block_actions_of, sign  # noqa: E402
from tests.slack_fake import FakeSlack  # noqa: E402

SECRET = "bench-mcp-signing-secret"  # noqa: S105 - the fake Slack's, a throw-away
TOKEN = "bench-mcp-agent-token-5c2e"  # noqa: S105 - a throw-away agent token
ENV = {"SLACK_BOT_TOKEN": "xoxb-bench-mcp", "SLACK_SIGNING_SECRET": SECRET, "MCP_TOKEN": TOKEN}
OPTIONS = [
    {"id": "ship", "label": "Ship it", "meaning": "approve"},
    {"id": "hold", "label": "Hold", "meaning": "reject"},
]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # the peak resident set size
            return int(line.split()[1]) / 1024
    return float("nan")


def config_text(port: int, db: Path, api_url: str, channels: list[str], wait: float) -> str:
    destinations = ", ".join(f'"slack:{c}"' for c in channels)
    return (
        f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
        f'[store]\nurl = "sqlite:///{db}"\n\n'
        '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\nsigning_secret_env = "SLACK_SIGNING_SECRET"\n'
        f'api_url = "{api_url}"\n\n'
        f"[mcp]\nwait_seconds = {wait}\n[mcp.agents.bench]\n"
        f'token_env = "MCP_TOKEN"\ndestinations = [{destinations}]\n'
    )


def client(base: str) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=120)
    )
    return Client(streamable_http_client(f"{base}/mcp", http_client=http))


async def find_post(slack: FakeSlack, channel: str, marker: str) -> dict[str, Any]:
    while True:
        for message in slack.messages(channel):
            if marker in json.dumps(message.get("blocks", [])):
                return message
        await asyncio.sleep(0.01)


async def click(http: httpx.AsyncClient, base: str, channel: str, message: dict[str, Any]) -> None:
    [button] = [
        e
        for block in message["blocks"]
        if block.get("type") == "actions"
        for e in block["elements"]
        if json.loads(e.get("value") or "{}").get("o") == "ship"
    ]
    payload = {
        **block_actions_of("U0ALICE"),
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
        "trigger_id": f"{time.time_ns()}.1.bench",
        "channel": {"id": channel, "name": channel.lower()},
        "message": message,
        "state": {"values": {}},
        "response_url": f"{base}/none",
        "actions": [{**button, "action_ts": f"{time.time():.6f}"}],
    }
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()))
    response = await http.post(
        f"{base}/slack/events",
        content=body.encode(),
        headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-slack-request-timestamp": stamp,
            "x-slack-signature": sign(SECRET, stamp, body),
        },
    )
    response.raise_for_status()


async def round_trips(
    base: str, slack: FakeSlack, channels: list[str], n: int, concurrency: int
) -> tuple[list[float], list[float]]:
    to_post: list[float] = []
    to_result: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, agent: Client, http: httpx.AsyncClient) -> None:
        channel = channels[i % len(channels)]
        marker = f"Release {i:04d}"
        async with gate:
            started = time.perf_counter()
            call = asyncio.create_task(
                agent.call_tool(
                    "ask",
                    {
                        "question": f"{marker}: ship it?",
                        "options": OPTIONS,
                        "destinations": [f"slack:{channel}"],
                    },
                )
            )
            message = await find_post(slack, channel, marker)
            to_post.append(time.perf_counter() - started)
            await click(http, base, channel, message)
            result = await call
            to_result.append(time.perf_counter() - started)
            data = result.structured_content or {}
            if data.get("status") != "answered":
                raise RuntimeError(f"question {i} came back {data}")

    async with client(base) as agent, httpx.AsyncClient(timeout=30) as http:
        await asyncio.gather(*(one(i, agent, http) for i in range(n)))
    return to_post, to_result


async def waiting(
    base: str, pid: int, channels: list[str], n: int, hold: float
) -> dict[str, float]:
    async with client(base) as agent:
        calls = [
            asyncio.create_task(
                agent.call_tool(
                    "ask",
                    {
                        "question": f"Waiting {i}",
                        "options": OPTIONS,
                        "destinations": [f"slack:{channels[i % len(channels)]}"],
                    },
                )
            )
            for i in range(n)
        ]
        await asyncio.sleep(2)  # every call taken in and waiting
        cpu0, t0 = tree_cpu([pid]), time.monotonic()
        await asyncio.sleep(hold)
        cpu = tree_cpu([pid]) - cpu0
        elapsed = time.monotonic() - t0
        peak = rss_mb(pid)
        done = sum(1 for c in calls if c.done())
        for c in calls:
            c.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
    return {
        "waiting": n,
        "still_waiting_after_hold": n - done,
        "server_cpu_s_per_s": round(cpu / elapsed, 3),
        "server_peak_rss_mb": round(peak, 1),
    }


async def main(args: argparse.Namespace) -> None:
    channels = [f"C0BENCH{i:02d}" for i in range(args.channels)]
    with tempfile.TemporaryDirectory() as tmp, FakeSlack(ENV["SLACK_BOT_TOKEN"]) as slack:
        for method in ("chat.postMessage", "chat.update"):
            slack.limit(method, per_second=1000, burst=1000)
        port = free_port()
        config = Path(tmp) / "cfg.toml"
        wait = max(args.hold + 10, 30)
        config.write_text(config_text(port, Path(tmp) / "e.db", slack.api_url, channels, wait))
        log = (Path(tmp) / "serve.log").open("wb")
        proc = subprocess.Popen(  # noqa: ASYNC220 - started once, before the clock runs
            [sys.executable, "-m", "bot", "serve", "-c", str(config)],
            cwd=tmp,
            env={**os.environ, **ENV, "ELICITBOT_LOG_LEVEL": "WARNING"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            await wait_healthy(base, proc)
            cpu0 = tree_cpu([proc.pid])
            to_post, to_result = await round_trips(
                base, slack, channels, args.questions, args.concurrency
            )
            trip_cpu = tree_cpu([proc.pid]) - cpu0
            held = await waiting(base, proc.pid, channels, args.waiting, args.hold)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    print(
        json.dumps(
            {
                "bench": "mcp_ask",
                "machine": machine(),
                "load": os.getloadavg()[0],
                "questions": args.questions,
                "concurrency": args.concurrency,
                "ask_to_post_ms": {
                    "p50": round(percentile(to_post, 0.5) * 1000, 1),
                    "p99": round(percentile(to_post, 0.99) * 1000, 1),
                },
                "ask_to_result_ms": {
                    "p50": round(percentile(to_result, 0.5) * 1000, 1),
                    "p99": round(percentile(to_result, 0.99) * 1000, 1),
                },
                "server_cpu_ms_per_question": round(trip_cpu / args.questions * 1000, 1),
                **held,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--channels", type=int, default=20)
    parser.add_argument("--waiting", type=int, default=100)
    parser.add_argument("--hold", type=float, default=20)
    asyncio.run(main(parser.parse_args()))

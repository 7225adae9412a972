"""Slack pacing benchmark: N elicitations over C channels against a rate-limited fake Web API.

The fake (:mod:`tests.slack_fake`, :meth:`FakeSlack.limit`) allows one ``chat.postMessage`` per
second per channel with a small burst and answers 429 with ``Retry-After`` beyond it, as Slack
does. elicitbot runs in this process as it does in ``serve``: N SuperPipeline elicitations are
taken in (round robin over C boards, one route per board to its channel), and the outbox
Dispatcher posts them through SlackChat with its Pacer (one post per second per channel).

Prints one JSON line: the posting rate reached against the rate the fake allows over the same
time (its burst included, so 100 % is the most any client could do), posts lost (elicitations
without exactly one message) and the share of calls that met a 429.

    .venv/bin/python bench/slack_pacing.py [--elicitations 1000] [--channels 10] [--burst 3]

``--elicitations`` shortens the run: about N / C seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from slack_sdk.web.async_client import AsyncWebClient

    from adapters.slack.chat import SlackChat
    from adapters.slack.pacing import Pacer
    from adapters.sources.superpipeline.parse import parse_body
    from bot.app import logs
    from bot.clock import SystemClock
    from bot.domain.model import People, Route, RouteMatch
    from bot.outbox import Dispatcher
    from bot.service import Inbound, Service
    from store.db import upgrade
    from store.sql import SqlStore
    from tests.slack_fake import FakeSlack
    from tests.unit.sources.superpipeline_fixtures import VALID

    logs.configure("WARNING")
    channels = [f"C0PACE{i:02d}" for i in range(args.channels)]
    with tempfile.TemporaryDirectory() as tmp, FakeSlack() as fake:
        fake.limit("chat.postMessage", per_second=args.per_second, burst=args.burst)
        url = f"sqlite:///{Path(tmp) / 'pacing.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        clock = SystemClock()
        pacer = Pacer()
        chat = SlackChat(
            AsyncWebClient(token=fake.token, base_url=fake.api_url, retry_handlers=[]),
            pacer=pacer,
        )
        await chat.verify()
        dispatcher = Dispatcher(store, clock, {"slack": chat}, {}, lambda key: f"/#{key}")
        routes = [
            Route(match=RouteMatch(board=f"brd_{i:02d}"), destinations=(f"slack:{channel}",))
            for i, channel in enumerate(channels)
        ]
        service = Service(store, clock, People(), routes, on_change=dispatcher.wake)
        keys = []
        batch = []
        for n in range(args.elicitations):
            data = copy.deepcopy(VALID["options"])
            data["elicitationId"] = f"eli_pace_{n:05d}"
            data["boardId"] = f"brd_{n % args.channels:02d}"
            e = parse_body(data, workspace="acme")
            batch.append(Inbound("bench", f"pace-{n}", e, {}))
            keys.append(e.key)
        for start in range(0, len(batch), 100):
            await service.intake(batch[start : start + 100])
        await until_posted(args, fake, dispatcher)
        await store.close()
    return summary(args, fake, keys, pacer)


async def until_posted(args: argparse.Namespace, fake: Any, dispatcher: Any) -> None:
    """Run the outbox until every elicitation is posted (or a generous deadline passes)."""
    stop = asyncio.Event()
    started = time.monotonic()
    worker = asyncio.create_task(dispatcher.run(stop))
    deadline = started + args.elicitations / (args.channels * args.per_second) * 3 + 60
    while time.monotonic() < deadline:
        if len([c for c in fake.calls_to("chat.postMessage") if c.ok]) >= args.elicitations:
            break
        await asyncio.sleep(0.2)
    stop.set()
    dispatcher.wake()
    await asyncio.wait_for(worker, 30)


def summary(args: argparse.Namespace, fake: Any, keys: Sequence[str], pacer: Any) -> dict[str, Any]:
    calls = fake.calls_to("chat.postMessage")
    ok = [c for c in calls if c.ok]
    limited = [c for c in calls if c.status == 429]
    first, last = min(c.at for c in ok), max(c.at for c in ok)
    window = last - first
    allowed = args.channels * (args.burst + window * args.per_second)
    per_elicitation = Counter(c.params["metadata"]["event_payload"]["elicitation"] for c in ok)
    lost = sum(1 for key in keys if per_elicitation.get(key, 0) != 1)
    per_channel = Counter(c.params["channel"] for c in ok)
    return {
        "bench": "slack_pacing",
        "elicitations": args.elicitations,
        "channels": args.channels,
        "fake_limit": f"{args.per_second}/s per channel, burst {args.burst}",
        "posted": len(ok),
        "seconds": round(window, 2),
        "posts_per_s": round(len(ok) / window, 3) if window else None,
        "allowed_posts_in_window": round(allowed, 1),
        "share_of_allowed": round(len(ok) / allowed, 4),
        "share_of_sustained_rate": round(len(ok) / (window * args.channels * args.per_second), 4)
        if window
        else None,
        "lost": lost,
        "calls": len(calls),
        "rate_limited_429": len(limited),
        "share_429": round(len(limited) / len(calls), 4) if calls else 0.0,
        "min_posts_per_channel": min(per_channel.values()),
        "max_posts_per_channel": max(per_channel.values()),
        "pacer": {
            "sent": pacer.stats.sent,
            "deferred_to_outbox": pacer.stats.deferred,
            "rate_limited": pacer.stats.rate_limited,
        },
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--elicitations", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--per-second", type=float, default=1.0)
    parser.add_argument("--burst", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

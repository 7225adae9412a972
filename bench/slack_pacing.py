"""Slack pacing benchmark: N elicitations over C channels against a rate-limited fake Web API,
posted by ``elicitbot serve``.

The fake (:mod:`tests.slack_fake`, :meth:`FakeSlack.limit`) allows one ``chat.postMessage`` per
second per channel with a small burst and answers 429 with ``Retry-After`` beyond it, as Slack
does. ``python -m bot serve -c <config>`` runs as a process (Slack in HTTP mode on the fake, one
route per board to its channel); N SuperPipeline elicitations go in over HTTP (``POST
/v1/events``, batches of 100, round robin over C boards), and everything is read from what the
fake recorded.

Prints one JSON line: the posting rate reached against the rate the fake allows over the same
time (its burst included, so 100 % is the most any client could do), posts lost (elicitations
without exactly one message), the share of calls that met a 429, and the load average.

    .venv/bin/python bench/slack_pacing.py [--elicitations 1000] [--channels 10] [--burst 3]
        [--db sqlite|postgresql]

``--elicitations`` shortens the run: about N / C seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import machine  # noqa: E402 - after the path
from bench.serve import (  # noqa: E402
    Serve,
    drop_schema,
    load,
    post_events,
    slack_config,
    store_url,
    superpipeline_event,
)

TOKEN = "xoxb-bench-pacing"  # noqa: S105 - the fake's token
SECRET = "bench-pacing-secret"  # noqa: S105 - the fake's


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.slack_fake import FakeSlack
    from tests.unit.sources.superpipeline_fixtures import VALID

    channels = [f"C0PACE{i:02d}" for i in range(args.channels)]
    load_before = load()
    with tempfile.TemporaryDirectory() as tmp, FakeSlack(TOKEN) as fake:
        fake.limit("chat.postMessage", per_second=args.per_second, burst=args.burst)
        url, schema = store_url(args.db, Path(tmp))
        routes = "".join(
            f'[[routes]]\nmatch = {{ board = "brd_{i:02d}" }}\ndestinations = ["slack:{c}"]\n\n'
            for i, c in enumerate(channels)
        )
        serve = Serve(
            Path(tmp),
            f'[store]\nurl = "{url}"\n\n' + slack_config(fake.api_url, routes),
            env={"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET},
        ).start()
        keys = []
        events = []
        for n in range(args.elicitations):
            data = copy.deepcopy(VALID["options"])
            data["elicitationId"] = f"eli_pace_{n:05d}"
            data["boardId"] = f"brd_{n % args.channels:02d}"
            events.append(superpipeline_event(data, f"pace-{n}"))
            keys.append(f"superpipeline:eli_pace_{n:05d}")
        try:
            await serve.wait("/readyz")
            async with aiohttp.ClientSession() as session:
                await post_events(session, serve.base, events)
            await until_posted(args, fake)
        finally:
            serve.stop()
            drop_schema(schema)
    return summary(args, fake, keys) | {"load_before": load_before, "load_after": load()}


async def until_posted(args: argparse.Namespace, fake: Any) -> None:
    """Until every elicitation is posted (or a generous deadline passes)."""
    deadline = time.monotonic() + args.elicitations / (args.channels * args.per_second) * 3 + 60
    while time.monotonic() < deadline:
        if len([c for c in fake.calls_to("chat.postMessage") if c.ok]) >= args.elicitations:
            return
        await asyncio.sleep(0.2)


def summary(args: argparse.Namespace, fake: Any, keys: Sequence[str]) -> dict[str, Any]:
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
        "measured_on": "serve",
        "db": args.db,
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
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--elicitations", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--per-second", type=float, default=1.0)
    parser.add_argument("--burst", type=int, default=3)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

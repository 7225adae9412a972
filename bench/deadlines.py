"""Deadline benchmark: pending elicitations whose reminders fall due after ``elicitbot serve``
restarts, measured by when Slack received each reminder.

1. Setup (not measured): ``python -m bot serve -c <config>`` runs as a process, Slack in HTTP
   mode on the fake Web API of :mod:`tests.slack_fake`, one route per board to its channel with a
   person to mention. ``--rows`` SuperPipeline elicitations go in over HTTP (``POST /v1/events``)
   spread over ``--channels`` channels, each with its ``remindAt``, and serve posts them (one post
   a second per channel, as Slack allows). Then serve is stopped (SIGTERM).
2. Restart (measured): serve is started again on the same store. ``--missed`` reminders fell due
   while it was down; the others fall due evenly over ``--spread`` seconds from ``--lead``
   seconds after the restart (past serve's start-up: any due before ``/readyz`` answers are
   counted apart, as ``due_while_starting``).
3. Figures, all from outside: lateness of each reminder (the fake Slack's time of the thread
   notice ``chat.postMessage`` minus the ``remindAt`` sent) p50/p99/max over the on-schedule
   reminders and for the missed ones; restart → first notice and restart → ``/readyz``; peak RSS
   (``VmHWM``) and CPU of the restarted process; every reminder noticed exactly once; the load
   average before and after.

A channel takes one post a second, and a reminder is one notice in its prompt's thread: keep
``rows / channels / spread`` well under 1, or the figure is Slack's pace, not the timekeeping.

Prints one JSON line.

    .venv/bin/python bench/deadlines.py [--rows 1000] [--channels 50] [--spread 60]
        [--db sqlite|postgresql]

Until 2026-12-02 this built a Timekeeper and the Scheduler in a process of its own and counted
lateness as the deadline rows' ``fired_at - due_at`` (100,000 rows, no chat): see bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import machine, percentile  # noqa: E402 - after the path
from bench.serve import (  # noqa: E402
    Serve,
    cpu_seconds,
    drop_schema,
    load,
    peak_rss_mb,
    post_events,
    slack_config,
    store_url,
    superpipeline_event,
)

TOKEN = "xoxb-bench-deadlines"  # noqa: S105 - the fake's token
SECRET = "bench-deadlines-secret"  # noqa: S105 - the fake's
DOWN_S = 3.0
"""Seconds serve stays down; the missed reminders fall due in the middle of it."""


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.slack_fake import FakeSlack
    from tests.unit.sources.superpipeline_fixtures import VALID

    load_before = load()
    channels = [f"C0DUE{i:03d}" for i in range(args.channels)]
    with tempfile.TemporaryDirectory() as tmp, FakeSlack(TOKEN) as fake:
        url, schema = store_url(args.db, Path(tmp))
        routes = "".join(
            f'[[routes]]\nmatch = {{ board = "brd_{i:03d}" }}\ndestinations = ["slack:{c}"]\n'
            'mention = ["slack:U0ALICE"]\n\n'
            for i, c in enumerate(channels)
        )
        serve = Serve(
            Path(tmp),
            f'[store]\nurl = "{url}"\n\n' + slack_config(fake.api_url, routes),
            env={"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET},
        )
        # The plan: posting takes about rows / channels seconds; a budget for it, then down.
        started = time.time()
        per_channel = -(-args.rows // args.channels)
        restart_at = started + args.budget_factor * per_channel + 15 + DOWN_S
        remind: dict[str, float] = {}
        events = []
        on_schedule = args.rows - args.missed
        for n in range(args.rows):
            if n < args.missed:
                at = restart_at - DOWN_S / 2 + n * 0.001
            else:
                i = n - args.missed
                at = restart_at + args.lead + args.spread * i / max(on_schedule, 1)
            data = copy.deepcopy(VALID["options"])
            data["elicitationId"] = f"eli_due_{n:06d}"
            data["boardId"] = f"brd_{n % args.channels:03d}"
            data["deadline"] = {"remindAt": stamp(at)}
            events.append(superpipeline_event(data, f"due-{n}"))
            remind[f"superpipeline:eli_due_{n:06d}"] = at
        try:
            serve.start()
            await serve.wait("/readyz")
            async with aiohttp.ClientSession() as session:
                await post_events(session, serve.base, events, batch=args.batch)
            while len([c for c in fake.calls_to("chat.postMessage") if c.ok]) < args.rows:
                if time.time() > restart_at - DOWN_S - 1:
                    raise RuntimeError("posting outran its budget: raise --budget-factor")
                await asyncio.sleep(0.2)
            posted_s = time.time() - started
            await asyncio.to_thread(serve.stop)
            stopped = time.time()
            await asyncio.sleep(max(0.0, restart_at - time.time()))
            serve.start()
            ready_at = await serve.wait("/readyz")
            give_up = restart_at + args.lead + args.spread + 60
            while len(notices(fake)) < args.rows and time.time() < give_up:  # noqa: ASYNC110
                await asyncio.sleep(0.2)
            peak = peak_rss_mb(serve.pid)
            cpu = cpu_seconds(serve.pid)
        finally:
            await asyncio.to_thread(serve.stop)
            drop_schema(schema)
    return figures(args, fake, remind, serve.spawned, ready_at) | {
        "setup_posted_s": round(posted_s, 1),
        "down_before_missed_due": stopped < restart_at - DOWN_S / 2,
        "restart_to_ready_s": round(ready_at - serve.spawned, 3),
        "peak_rss_mb": peak,
        "cpu_s": round(cpu, 1),
        "load_before": load_before,
        "load_after": load(),
    }


def notices(fake: Any) -> list[Any]:
    return [c for c in fake.calls_to("chat.postMessage") if c.ok and c.params.get("thread_ts")]


def figures(
    args: argparse.Namespace, fake: Any, remind: dict[str, float], spawned: float, ready: float
) -> dict[str, Any]:
    """Lateness of the first notice of each reminder: on schedule (due once serve was ready
    again), caught up at start (due while it started) and missed while it was down."""
    posts = [c for c in fake.calls_to("chat.postMessage") if c.ok and not c.params.get("thread_ts")]
    by_ts = {
        (c.params["channel"], c.response["ts"]): c.params["metadata"]["event_payload"][
            "elicitation"
        ]
        for c in posts
    }
    noticed = [
        (by_ts.get((c.params["channel"], c.params["thread_ts"])), c.at) for c in notices(fake)
    ]
    per_key = Counter(key for key, _ in noticed)
    first: dict[str, float] = {}
    for key, at in noticed:
        if key is not None:
            first.setdefault(key, at)
    on_time = [(at - remind[k]) * 1000 for k, at in first.items() if remind[k] >= ready]
    starting = [(at - remind[k]) * 1000 for k, at in first.items() if spawned <= remind[k] < ready]
    missed = [(at - remind[k]) * 1000 for k, at in first.items() if remind[k] < spawned]
    return {
        "bench": "deadlines",
        "measured_on": "serve",
        "db": args.db,
        "rows": args.rows,
        "channels": args.channels,
        "spread_s": args.spread,
        "noticed": len(first),
        "noticed_more_than_once": sum(1 for n in per_key.values() if n > 1),
        "notices_unmatched": per_key.get(None, 0),
        "fired_early": sum(1 for value in on_time if value < 0),
        "lateness_ms_p50": round(percentile(on_time, 0.50), 1),
        "lateness_ms_p99": round(percentile(on_time, 0.99), 1),
        "lateness_ms_max": round(max(on_time, default=float("nan")), 1),
        "lateness_ms_mean": round(statistics.fmean(on_time), 1) if on_time else None,
        "on_schedule": len(on_time),
        "due_while_starting": len(starting),
        "starting_late_ms_max": round(max(starting, default=float("nan")), 1),
        "missed_while_down": len(missed),
        "missed_late_ms_max": round(max(missed, default=float("nan")), 1),
        "restart_to_first_notice_s": round(min(at for _, at in noticed) - spawned, 3)
        if noticed
        else None,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument(
        "--lead", type=float, default=15.0, help="seconds after the restart (past its start-up)"
    )
    parser.add_argument("--missed", type=int, default=20, help="due while serve is down")
    parser.add_argument("--batch", type=int, default=100, help="events per intake request")
    parser.add_argument(
        "--budget-factor", type=float, default=2.0, help="posting budget: x rows/channels seconds"
    )
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

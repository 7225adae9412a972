"""Effects benchmark: a Slack backlog in one busy channel, a calm channel beside it, and answers
written back meanwhile, all through ``elicitbot serve``.

``python -m bot serve -c <config>`` runs as a process (SQLite or PostgreSQL store, Slack in HTTP
mode on the fake Web API of :mod:`tests.slack_fake`, limited to one ``chat.postMessage`` per
second per channel with 429 beyond it, as Slack; SuperPipeline write-backs to a recording
webhook). Everything goes in over HTTP and is read from outside:

1. ``--backlog`` (1,000) elicitations for the busy channel (``POST /v1/events``, batches of 100);
2. ``--calm`` (20) for a calm channel, one batch: seconds from its 202 until the fake holds all
   of their posts (a quiet channel must not wait behind a busy one);
3. ``--answers`` (100) elicitations for the web inbox, answered by signed Slack clicks
   (``POST /slack/events``) one every ``--answer-every`` seconds while the busy channel works
   through its backlog: write-back latency from the click sent until SuperPipeline's webhook
   received the answer (goal p99 ≤ 1 s).

4. ``--calm-clicks`` (5) of the calm channel's questions answered by a click the moment each
   is posted, and ``--busy-clicks`` (5) of the busy channel's spread over the run: each answer's
   thread note goes into that channel's thread, on the channel's one post a second.

The busy channel's questions per second over the run against the one a second Slack allows
(goal ≥ 0.97, loaded too; thread notes are counted apart), with the 429s met, and when each
thread note appeared. ``--load`` runs a CPU hog beside it all (a second process spinning
on one core), as a busy host would.

Prints one JSON line, with the load average before and after.

    .venv/bin/python bench/effects.py [--backlog 1000] [--calm 20] [--answers 100]
        [--seconds 60] [--db sqlite|postgresql] [--load]

``--replicas N`` (PostgreSQL only) runs N ``serve`` processes on one database: intake batches
and clicks spread over them round-robin, every replica's dispatcher claiming from the one outbox
and pacing through the shared slots; CPU is the sum over the replicas.

The backlog is not drained (that takes 1,000 s at Slack's rate): the run lasts ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import machine, percentile  # noqa: E402
from bench.serve import (  # noqa: E402
    Serve,
    cpu_seconds,
    drop_schema,
    load,
    post_events,
    signed_click,
    slack_config,
    store_url,
    superpipeline_event,
)

TOKEN = "xoxb-bench-effects"  # noqa: S105 - the fake's token
SECRET = "bench-effects-secret"  # noqa: S105 - the fake's
BUSY = "C0BUSYBENCH"
CALM = "C0CALMBENCH"
CLICKS = "C0CLICKSBENCH"
"""Where the clicks come from (their thread notes go there, apart from the two counted)."""
HOG = "while True: pass"


def events(workspace: str, count: int) -> list[dict[str, Any]]:
    from tests.unit.sources.superpipeline_fixtures import VALID

    found = []
    for n in range(count):
        data = copy.deepcopy(VALID["options"])
        data["elicitationId"] = f"eli_{workspace}{n:06d}"
        found.append(superpipeline_event(data, f"{workspace}-{n}", workspace=workspace))
    return found


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes import FakeWebhook
    from tests.slack_fake import FakeSlack

    load_before = load()
    hog = subprocess.Popen([sys.executable, "-c", HOG]) if args.load else None  # noqa: ASYNC220
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            FakeSlack(TOKEN) as slack,
            FakeWebhook() as webhook,
        ):
            slack.limit("chat.postMessage", per_second=1.0, burst=1)
            url, schema = store_url(args.db, Path(tmp))
            routes = (
                f'[[routes]]\nmatch = {{ workspace = "busy" }}\ndestinations = ["slack:{BUSY}"]\n\n'
                f'[[routes]]\nmatch = {{ workspace = "calm" }}\ndestinations = ["slack:{CALM}"]\n\n'
                '[[routes]]\nmatch = { workspace = "web" }\ndestinations = ["web"]\n\n'
            )
            config = f'[store]\nurl = "{url}"\n\n' + slack_config(
                slack.api_url,
                routes,
                f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n',
            )
            env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET}
            serves = [
                Serve(Path(tmp), config, env=env, name=f"serve{n}") for n in range(args.replicas)
            ]
            try:
                for serve in serves:  # one after the other: the first runs the migrations
                    await serve.start().wait("/readyz")
                result = await drive(args, Replicas(serves), slack, webhook)
            finally:
                for serve in serves:
                    await asyncio.to_thread(serve.stop)
                drop_schema(schema)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    return result | {"load_before": load_before, "load_after": load()}


class Replicas:
    """The ``serve`` processes of a run: ``base`` names each in turn (round-robin)."""

    def __init__(self, serves: list[Serve]) -> None:
        self.serves = serves
        self._turn = 0

    @property
    def base(self) -> str:
        serve = self.serves[self._turn % len(self.serves)]
        self._turn += 1
        return serve.base

    def cpu(self) -> float:
        return sum(cpu_seconds(s.pid) for s in self.serves)


async def drive(
    args: argparse.Namespace, serve: Replicas, slack: Any, webhook: Any
) -> dict[str, Any]:
    clicked_at: dict[str, float] = {}
    not_200 = 0
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        cpu_before = serve.cpu()
        backlog = events("busy", args.backlog)
        for start in range(0, len(backlog), 100):  # each batch to the next replica
            await post_events(session, serve.base, backlog[start : start + 100])
        calm_in = time.time()
        await post_events(session, serve.base, events("calm", args.calm))
        await post_events(session, serve.base, events("web", args.answers))
        noted: dict[str, tuple[str, float]] = {}
        clickers = [
            asyncio.create_task(
                click_posted(session, serve, slack, CALM, args.calm_clicks, 0.0, noted)
            ),
            asyncio.create_task(
                click_posted(
                    session,
                    serve,
                    slack,
                    BUSY,
                    args.busy_clicks,
                    args.seconds / max(args.busy_clicks + 1, 1),
                    noted,
                )
            ),
        ]
        for n in range(args.answers):
            await asyncio.sleep(args.answer_every)
            eid = f"eli_web{n:06d}"
            body, headers = signed_click(
                SECRET, f"superpipeline:{eid}", "deny", user="U0ALICE", channel=CLICKS, ts="1.01"
            )
            clicked_at[eid] = time.monotonic()
            async with session.post(
                f"{serve.base}/slack/events", data=body, headers=headers
            ) as response:
                await response.read()
                not_200 += response.status != 200
        remaining = args.seconds - (time.monotonic() - started)
        await asyncio.sleep(max(remaining, 2.0))
        ended = time.monotonic()
        for clicker in clickers:
            clicker.cancel()
        await asyncio.gather(*clickers, return_exceptions=True)
        server_cpu = serve.cpu() - cpu_before

    received: dict[str, float] = {}
    for request in webhook.recorded():
        if request.status == 200 and isinstance(request.body, dict):
            received.setdefault(request.body["elicitationId"], request.at)
    latencies = [received[k] - t for k, t in clicked_at.items() if k in received]
    posts = slack.calls_to("chat.postMessage")
    questions = [c for c in posts if not c.params.get("thread_ts")]
    busy = [c for c in questions if c.params.get("channel") == BUSY and c.status == 200]
    calm = [c for c in questions if c.params.get("channel") == CALM and c.status == 200]
    notes = {
        ch: [
            c.at - noted[c.params["thread_ts"]][1]
            for c in posts
            if c.status == 200
            and c.params.get("channel") == ch
            and c.params.get("thread_ts") in noted
        ]
        for ch in (BUSY, CALM)
    }
    limited = [c for c in posts if c.status == 429]
    if args.timeline:
        zero = min(c.at for c in posts)
        for c in posts:
            print(f"{c.at - zero:8.3f} {c.params.get('channel')} {c.status}", file=sys.stderr)
    window = (max(c.at for c in busy) - min(c.at for c in busy)) if len(busy) > 1 else 0.0
    calm_visible = max(c.at for c in calm) - calm_in if len(calm) >= args.calm else None
    return {
        "bench": "effects",
        "measured_on": "serve",
        "db": args.db,
        "cpu_hog": args.load,
        "replicas": args.replicas,
        "backlog": args.backlog,
        "answers": args.answers,
        "written_back": len(latencies),
        "click_not_200": not_200,
        "writeback_p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "writeback_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "writeback_max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
        "busy_posts": len(busy),
        "busy_posts_per_s": round((len(busy) - 1) / window, 3) if window else None,
        "share_of_allowed": round((len(busy) - 1) / window / 1.0, 4) if window else None,
        "calm": args.calm,
        "calm_posted": len(calm),
        "calm_all_visible_s": round(calm_visible, 2) if calm_visible is not None else None,
        "calm_clicked": len([1 for ch, _ in noted.values() if ch == CALM]),
        "calm_notes_posted": len(notes[CALM]),
        "calm_note_after_click_s": [round(x, 2) for x in sorted(notes[CALM])],
        "busy_clicked": len([1 for ch, _ in noted.values() if ch == BUSY]),
        "busy_notes_posted": len(notes[BUSY]),
        "busy_note_after_click_s": [round(x, 2) for x in sorted(notes[BUSY])],
        "rate_limited_429": len(limited),
        "server_cpu_s": round(server_cpu, 2),
        "seconds": round(ended - started, 1),
        "machine": machine(),
    }


async def click_posted(
    session: aiohttp.ClientSession,
    serve: Replicas,
    slack: Any,
    channel: str,
    count: int,
    every: float,
    noted: dict[str, tuple[str, float]],
) -> None:
    """Click ``count`` of ``channel``'s posted questions (``every`` seconds apart, the newest
    then; 0: each the moment it is posted); ``noted`` gets ts → (channel, time clicked), and
    the thread notes are read from the fake's calls afterwards (by their ``thread_ts``)."""
    clicked: set[str] = set()
    while len(clicked) < count:
        await asyncio.sleep(every or 0.05)
        posted = [
            c
            for c in slack.calls_to("chat.postMessage")
            if c.params.get("channel") == channel and c.ok and not c.params.get("thread_ts")
        ]
        fresh = [c for c in posted if c.response["ts"] not in clicked]
        for call in fresh[-1:] if every else fresh[: count - len(clicked)]:
            ts = call.response["ts"]
            key = call.params["metadata"]["event_payload"]["elicitation"]
            body, headers = signed_click(
                SECRET, key, "deny", user="U0ALICE", channel=channel, ts=ts
            )
            clicked.add(ts)
            noted[ts] = (channel, time.time())
            async with session.post(
                f"{serve.base}/slack/events", data=body, headers=headers
            ) as response:
                await response.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--calm", type=int, default=20, help="questions to the calm channel")
    parser.add_argument("--answers", type=int, default=100)
    parser.add_argument("--answer-every", type=float, default=0.5)
    parser.add_argument("--calm-clicks", type=int, default=5, help="calm questions answered")
    parser.add_argument("--busy-clicks", type=int, default=5, help="busy questions answered")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--timeline", action="store_true", help="every post, to stderr")
    parser.add_argument("--load", action="store_true", help="a CPU hog on one core beside it")
    parser.add_argument("--replicas", type=int, default=1, help="serve processes (PostgreSQL)")
    args = parser.parse_args()
    if args.replicas > 1 and args.db != "postgresql":
        parser.error("--replicas above 1 needs --db postgresql (one database for all of them)")
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

"""Effects benchmark: a 1,000-post backlog in one Slack channel and 100 answers elsewhere.

elicitbot runs in this process as ``serve`` wires it (SQLite or PostgreSQL store, SlackChat with
its pacer, the outbox Dispatcher, the SuperPipeline write-back), against the fake Slack Web API
limited to one ``chat.postMessage`` per second per channel (429 beyond it, as Slack) and a
recording webhook standing in for SuperPipeline. 1,000 elicitations wait for one busy channel;
100 more go to the web inbox and are answered one every ``--answer-every`` seconds while the busy
channel works through its backlog.

Prints one JSON line: write-back latency (answer recorded → SuperPipeline received it) p50/p99
(goal p99 ≤ 1 s) and the busy channel's posts per second over the run against the one a second
Slack allows (goal ≥ 95 %), with the 429s met.

    .venv/bin/python bench/effects.py [--backlog 1000] [--answers 100] [--seconds 60] [--db sqlite]

The backlog is not drained (that takes 1,000 s at Slack's rate): the run lasts ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bot.domain.disclosure import SHOWN_WHOLE

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import machine, percentile  # noqa: E402

TOKEN = "xoxb-bench-effects"  # noqa: S105 - the fake's token
BUSY = "C0BUSYBENCH"
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def store_url(db: str, tmp: Path) -> tuple[str, Any]:
    """The store URL, and what to drop afterwards (a fresh PostgreSQL schema)."""
    if db == "sqlite":
        return f"sqlite:///{tmp / 'effects.db'}", None
    import uuid

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{PG_URL}?options=-csearch_path%3D{schema}", schema


def drop(schema: str | None) -> None:
    if schema is None:
        return
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from adapters.sources.superpipeline.parse import parse_body
    from bot.app import logs
    from bot.app.config import parse_config
    from bot.app.wiring import Elicitbot
    from bot.domain.model import Attempt, Identity
    from bot.service import Inbound
    from tests.fakes import FakeWebhook
    from tests.integration.test_crash import free_port
    from tests.slack_fake import FakeSlack
    from tests.unit.sources.superpipeline_fixtures import VALID

    logs.configure("WARNING")

    def inbound(workspace: str, n: int) -> Inbound:
        data = copy.deepcopy(VALID["approval-request"])
        data["elicitationId"] = data["approvalRequestId"] = f"apr_{workspace}{n:06d}"
        return Inbound("bench", f"{workspace}-{n}", parse_body(data, workspace=workspace), {})

    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeSlack(TOKEN) as slack,
        FakeWebhook() as webhook,
    ):
        slack.limit("chat.postMessage", per_second=1.0, burst=1)
        url, schema = store_url(args.db, Path(tmp))
        config = parse_config(
            {
                "server": {"listen": f"127.0.0.1:{free_port()}"},
                "store": {"url": url},
                "slack": {
                    "bot_token_env": "SLACK_BOT_TOKEN",
                    "signing_secret_env": "SLACK_SIGNING_SECRET",
                    "api_url": slack.api_url,
                },
                "routes": [
                    {"match": {"workspace": "busy"}, "destinations": [f"slack:{BUSY}"]},
                    {"match": {"workspace": "calm"}, "destinations": ["web"]},
                ],
                "sources": {"superpipeline": {"answer_webhook": webhook.url}},
            }
        )
        bot = Elicitbot(config, environ={"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "x"})
        await bot.start()
        answered_at: dict[str, float] = {}
        try:
            started = time.monotonic()
            for start in range(0, args.backlog, 100):
                await bot.service.intake(
                    [inbound("busy", n) for n in range(start, min(start + 100, args.backlog))]
                )
            calm = await bot.service.intake([inbound("calm", n) for n in range(args.answers)])
            for outcome in calm:
                await asyncio.sleep(args.answer_every)
                result = await bot.service.answer(
                    outcome.key,
                    Attempt(
                        shown=SHOWN_WHOLE,
                        respondent=Identity(platform="slack", user="U0ALICE"),
                        option_ids=("deny",),
                        via="web",
                    ),
                )
                answered_at[outcome.key.split(":", 1)[1]] = time.monotonic()
                assert result.won
            remaining = args.seconds - (time.monotonic() - started)
            await asyncio.sleep(max(remaining, 2.0))
            ended = time.monotonic()
        finally:
            await bot.stop()
            drop(schema)

    received: dict[str, float] = {}
    for request in webhook.recorded():
        if request.status == 200 and isinstance(request.body, dict):
            received.setdefault(request.body["elicitationId"], request.at)
    latencies = [received[k] - t for k, t in answered_at.items() if k in received]
    posts = [
        c
        for c in slack.calls_to("chat.postMessage")
        if c.params.get("channel") == BUSY and c.status == 200
    ]
    limited = [c for c in slack.calls_to("chat.postMessage") if c.status == 429]
    window = (max(c.at for c in posts) - min(c.at for c in posts)) if len(posts) > 1 else 0.0
    return {
        "bench": "effects",
        "db": args.db,
        "backlog": args.backlog,
        "answers": args.answers,
        "written_back": len(latencies),
        "writeback_p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "writeback_p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "writeback_max_ms": round(max(latencies, default=float("nan")) * 1000, 1),
        "busy_posts": len(posts),
        "busy_posts_per_s": round((len(posts) - 1) / window, 3) if window else None,
        "share_of_allowed": round((len(posts) - 1) / window / 1.0, 4) if window else None,
        "rate_limited_429": len(limited),
        "seconds": round(ended - started, 1),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backlog", type=int, default=1000)
    parser.add_argument("--answers", type=int, default=100)
    parser.add_argument("--answer-every", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()

"""Deadline benchmark: 100,000 pending elicitations whose reminders fall due over 60 s.

1. Setup (not measured): N elicitations are taken in through ``SqlStore.intake`` in batches, each
   with one Slack copy marked posted, so each reminder writes a thread notice and a copy update.
   Their reminders are then spread evenly over ``--spread`` seconds starting ``--lead`` seconds
   after the restart; ``--missed`` of them are made due *before* the restart (missed while down).
2. Restart (measured): a fresh process opens the store, runs the migrations (a no-op at head, as
   ``serve`` does at start), starts a Timekeeper and the Scheduler, and fires everything.
3. Figures: time from process start (and from ``Scheduler.start``) to the first fire; firing
   lateness (``fired_at - due_at``) p50/p99/max over the on-schedule reminders, and for the missed
   ones; peak RSS and CPU of the firing process; every reminder fired exactly once (one notice
   each); the machine's load average before and after.

Prints one JSON line.

    .venv/bin/python bench/deadlines.py [--rows 100000] [--spread 60] [--db sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import percentile  # noqa: E402 - after the path

PG_URL = os.environ.get("ELICITBOT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
FAR = datetime(2100, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- setup


async def populate(url: str, rows: int, batch: int) -> float:
    """Take ``rows`` elicitations in (reminders far away), posted to one Slack channel."""
    from sqlalchemy import update

    from bot.domain.model import AnswerMode, Deadlines, Elicitation, Option, Route
    from bot.domain.planning import display_hash
    from bot.domain.records import IntakeItem
    from store.sql import DELIVERY, OUTBOX, SqlStore

    route = Route(destinations=("slack:C0BENCH",), mention=("slack:U0ALICE",))
    store = SqlStore.from_url(url)
    started = time.perf_counter()
    now = datetime.now(UTC)
    try:
        for first in range(0, rows, batch):
            items = []
            for i in range(first, min(rows, first + batch)):
                e = Elicitation(
                    source="bench",
                    source_id=f"eli_{i:07d}",
                    asker="agt_bench",
                    title=f"Bench question {i}",
                    question="May I run the migration?",
                    answer_mode=AnswerMode.SINGLE_CHOICE,
                    options=(Option(id="yes", label="Yes"), Option(id="no", label="No")),
                    deadlines=Deadlines(remind_at=FAR),
                    created_at=now,
                )
                items.append(IntakeItem("bench", e.source_id, e, route, display_hash(e)))
            outcomes = await store.intake(items, now)
            assert all(o.result == "accepted" for o in outcomes)

        def posted(conn: Any) -> None:
            conn.execute(
                update(DELIVERY)
                .where(DELIVERY.c.state == "planned")
                .values(state="posted", ref={"channel": "C0BENCH", "ts": "1.000001"}, posted_at=now)
            )
            conn.execute(update(OUTBOX).where(OUTBOX.c.state == "pending").values(state="done"))

        await store._run(posted, write=True)  # a setup shortcut, not measured
    finally:
        await store.close()
    return time.perf_counter() - started


async def spread_due(
    url: str, restart_at: datetime, lead: float, spread: float, missed: int
) -> None:
    """Reminder i falls due at restart + lead + spread * i / n; the first ``missed`` before it."""
    from sqlalchemy import bindparam, select, update

    from store.sql import DEADLINE, SqlStore

    store = SqlStore.from_url(url)
    try:

        def work(conn: Any) -> None:
            ids = [r[0] for r in conn.execute(select(DEADLINE.c.id).order_by(DEADLINE.c.id))]
            n = len(ids)
            due = []
            for i, deadline_id in enumerate(ids):
                if i < missed:
                    at = restart_at - timedelta(seconds=5) + timedelta(milliseconds=i)
                else:
                    at = restart_at + timedelta(seconds=lead + spread * i / n)
                due.append({"row_id": deadline_id, "when": at})
            conn.execute(
                update(DEADLINE)
                .where(DEADLINE.c.id == bindparam("row_id"))
                .values(due_at=bindparam("when")),
                due,
            )

        await store._run(work, write=True)  # a setup shortcut, not measured
        if store.dialect == "postgresql":
            # A database in service has planner statistics; one bulk-loaded a moment ago has none
            # until autovacuum gets to it, and plans as if its tables were empty.
            await store._run(lambda conn: conn.exec_driver_sql("ANALYZE"), write=True)
    finally:
        await store.close()


# --------------------------------------------------------------------------- the firing process


async def serve(url: str, spawned: float, rows: int, give_up_s: float) -> dict[str, Any]:
    """What ``serve`` does for deadlines: migrate, start the Timekeeper and Scheduler, fire."""
    from bot.app import logs
    from bot.clock import SystemClock
    from bot.domain.model import People
    from bot.scheduler import Scheduler
    from bot.timekeeper import Timekeeper
    from store.db import upgrade
    from store.sql import SqlStore

    imported = time.time()
    logs.configure("INFO")  # as ``serve`` does: JSON lines on stderr
    await asyncio.to_thread(upgrade, url)
    store = SqlStore.from_url(url)
    keeper = Timekeeper(store, SystemClock(), People())
    first_fire: float | None = None
    fired = 0
    all_fired = asyncio.Event()
    ticks = 0
    tick = keeper.tick

    async def counted() -> Any:
        nonlocal first_fire, fired, ticks
        results = await tick()
        ticks += 1
        done = sum(1 for r in results if r.outcome == "fired")
        if done and first_fire is None:
            first_fire = time.time()
        fired += done
        if fired >= rows:
            all_fired.set()
        return results

    keeper.tick = counted  # type: ignore[method-assign]
    scheduler = Scheduler(keeper)
    started = time.time()
    await scheduler.start()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_fired.wait(), timeout=give_up_s)
    await scheduler.stop()
    await store.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "fired": fired,
        "ticks": ticks,
        "import_s": round(imported - spawned, 3),
        "start_to_first_fire_s": round((first_fire or float("nan")) - started, 3),
        "restart_to_first_fire_s": round((first_fire or float("nan")) - spawned, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
    }


# --------------------------------------------------------------------------- results


async def results(url: str) -> dict[str, Any]:
    from sqlalchemy import func, select

    from store.sql import DEADLINE, OUTBOX, SqlStore

    store = SqlStore.from_url(url)
    try:

        def work(conn: Any) -> dict[str, Any]:
            rows = conn.execute(
                select(DEADLINE.c.due_at, DEADLINE.c.fired_at, DEADLINE.c.state)
            ).all()
            notices = conn.execute(
                select(func.count(), func.count(func.distinct(OUTBOX.c.elicitation_key))).where(
                    OUTBOX.c.kind == "notify"
                )
            ).one()
            return {"rows": rows, "notices": notices[0], "distinct": notices[1]}

        found: dict[str, Any] = await store._run(work, write=False)
        return found
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--lead", type=float, default=3.0, help="seconds after the restart")
    parser.add_argument("--missed", type=int, default=100, help="due before the restart")
    parser.add_argument("--batch", type=int, default=1000, help="intake batch size")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--serve", nargs=4, metavar=("URL", "SPAWNED", "ROWS", "TIMEOUT"))
    args = parser.parse_args()

    if args.serve:  # the child: the restarted process
        url, spawned, rows, timeout = args.serve
        report = asyncio.run(serve(url, float(spawned), int(rows), float(timeout)))
        print(json.dumps(report))
        return

    from store.db import upgrade

    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="elicitbot-bench-"))
    schema = None
    if args.db == "postgresql":
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    else:
        url = f"sqlite:///{workdir / 'bench.db'}"
    try:
        upgrade(url)
        setup_s = asyncio.run(populate(url, args.rows, args.batch))
        # The restart begins right after the due times are set.
        restart_at = datetime.now(UTC) + timedelta(seconds=1)
        asyncio.run(spread_due(url, restart_at, args.lead, args.spread, args.missed))
        time.sleep(max(0.0, (restart_at - datetime.now(UTC)).total_seconds()))
        spawned = time.time()
        child = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--serve",
                url,
                str(spawned),
                str(args.rows),
                str(args.lead + args.spread + 120),
            ],
            capture_output=True,
            check=True,
            cwd=REPO,
        )
        served = json.loads(child.stdout.decode().strip().splitlines()[-1])
        found = asyncio.run(results(url))
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    load_after = os.getloadavg()

    rows = found["rows"]
    restart = datetime.fromtimestamp(spawned, UTC)
    on_schedule = [
        (r.fired_at - r.due_at).total_seconds() * 1000
        for r in rows
        if r.fired_at is not None and r.due_at >= restart
    ]
    missed = [
        (r.fired_at - r.due_at).total_seconds() * 1000
        for r in rows
        if r.fired_at is not None and r.due_at < restart
    ]
    early = sum(1 for value in on_schedule if value < 0)
    print(
        json.dumps(
            {
                "bench": "deadlines",
                "db": args.db,
                "rows": args.rows,
                "spread_s": args.spread,
                "setup_s": round(setup_s, 1),
                "fired": served["fired"],
                "fired_rows": sum(1 for r in rows if r.state == "fired"),
                "notices": found["notices"],
                "notices_distinct": found["distinct"],
                "fired_early": early,
                "lateness_ms_p50": round(percentile(on_schedule, 0.50), 1),
                "lateness_ms_p99": round(percentile(on_schedule, 0.99), 1),
                "lateness_ms_max": round(max(on_schedule, default=float("nan")), 1),
                "lateness_ms_mean": round(statistics.fmean(on_schedule), 1)
                if on_schedule
                else None,
                "missed_while_down": len(missed),
                "missed_late_ms_max": round(max(missed, default=float("nan")), 1),
                **{k: v for k, v in served.items() if k != "fired"},
                "load_before": [round(x, 2) for x in load_before],
                "load_after": [round(x, 2) for x in load_after],
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
            }
        )
    )


if __name__ == "__main__":
    main()

"""Intake benchmark: N SuperPipeline events over HTTP from C concurrent clients.

Each event is a distinct elicitation, committed (elicitation, delivery, outbox row) before its 202.
Prints one JSON line per configuration: events/s, p50/p99 accept latency, the count stored, and
the server's CPU time per accepted event — read from ``/proc/<pid>/stat`` (utime + stime of every
server process and its descendants, before and after the load), so the figure is the process's
own cost and holds on a noisy, shared machine where events/s does not.

``--replicas 1,2,3`` (PostgreSQL only) starts N ``elicitbot serve`` processes on one database,
each on its own port; the client spreads requests round-robin across them (as a load balancer
would), and the CPU figure is the sum over the replicas.

    .venv/bin/python bench/intake.py [--events 10000] [--clients 16] [--db sqlite,postgresql]
        [--replicas 1] [--runs 1] [--warmup 300]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.figures import machine, pending_event, percentile  # noqa: E402 - after the path

PG_URL = os.environ.get("ELICITBOT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(command name, parent pid, utime + stime in seconds) of a live process, None once it
    is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _processes() -> dict[int, tuple[str, int, float]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            found[int(entry)] = stat
    return found


def postgres_cpu() -> float:
    """CPU seconds of every ``postgres`` process on the machine (ours and anyone else's)."""
    return sum(cpu for name, _, cpu in _processes().values() if name == "postgres")


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds (user + system, every thread) of ``roots`` and every live descendant: a
    ``--workers`` server forks its workers, and they count too."""
    processes = _processes()
    parents = {pid: parent for pid, (_, parent, _) in processes.items()}
    cpu = {pid: seconds for pid, (_, _, seconds) in processes.items()}
    wanted = set(roots)
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in wanted} - wanted
        wanted |= more
        grew = bool(more)
    return sum(cpu.get(pid, 0.0) for pid in wanted)


async def wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError("elicitbot serve exited during start")
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("elicitbot serve did not become healthy")


async def drive(
    bases: list[str], bodies: list[bytes], clients: int
) -> tuple[float, list[float], int]:
    """C clients (aiohttp: lighter than httpx, so the client steals less of the 2 cores), each
    request to the next server in turn."""
    queue = list(reversed(bodies))
    targets = itertools.cycle([f"{base}/v1/events" for base in bases])
    latencies: list[float] = []
    failures = 0
    headers = {"content-type": "application/cloudevents+json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while queue:
            body = queue.pop()
            started = time.perf_counter()
            async with session.post(next(targets), data=body, headers=headers) as response:
                await response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 202:
                    failures += 1

    connector = aiohttp.TCPConnector(limit=clients * len(bases))
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, failures


def _bodies(count: int) -> list[bytes]:
    run = uuid.uuid4().hex[:8]
    return [json.dumps(pending_event(i, run, "/bench")).encode() for i in range(count)]


def bench_one(
    db: str, events: int, clients: int, replicas: int, warmup: int, workdir: Path
) -> dict[str, object]:
    schema = None
    if db == "sqlite":
        url = f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    env = {**os.environ, "ELICITBOT_LOG_LEVEL": "WARNING"}
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    try:
        for n in range(replicas):  # started together: migrations run under a lock
            port = free_port()
            config = workdir / f"{db}-{n}.toml"
            config.write_text(f'[server]\nlisten = "127.0.0.1:{port}"\n[store]\nurl = "{url}"\n')
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bot", "serve", "-c", str(config)], cwd=workdir, env=env
                )
            )
            bases.append(f"http://127.0.0.1:{port}")
        for base, proc in zip(bases, procs, strict=True):
            asyncio.run(wait_healthy(base, proc))
        if warmup:  # caches, prepared statements and pools filled before anything is counted
            asyncio.run(drive(bases, _bodies(warmup), clients))
        bodies = _bodies(events)
        pids = [p.pid for p in procs]
        cpu_before, client_before, pg_before = tree_cpu(pids), time.process_time(), postgres_cpu()
        elapsed, latencies, failures = asyncio.run(drive(bases, bodies, clients))
        cpu_after, client_after, pg_after = tree_cpu(pids), time.process_time(), postgres_cpu()
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    count = _count(url)
    if schema is not None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    accepted = events - failures
    return {
        "bench": "intake",
        "db": db,
        "replicas": replicas,
        "events": events,
        "clients": clients,
        "seconds": round(elapsed, 3),
        "events_per_s": round(events / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2),
        "server_cpu_ms_per_event": round((cpu_after - cpu_before) * 1000 / max(accepted, 1), 3),
        "server_cores_busy": round((cpu_after - cpu_before) / elapsed, 2),
        "client_cpu_ms_per_event": round((client_after - client_before) * 1000 / events, 3),
        # Machine-wide (another agent's queries count too), and 0 on SQLite: a rough guide.
        "postgres_cpu_ms_per_event": round((pg_after - pg_before) * 1000 / events, 3),
        "non_202": failures,
        "stored": count,
        "expected": warmup + events,
        "load_before": round(os.getloadavg()[0], 2),
        "machine": machine(),
    }


def _count(url: str) -> int:
    from store.sql import SqlStore

    async def count() -> int:
        store = SqlStore.from_url(url)
        try:
            return await store.count("elicitation")
        finally:
            await store.close()

    return asyncio.run(count())


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument(
        "--replicas", type=_ints, default=[1], help="e.g. 1,2,3 (PostgreSQL; SQLite runs 1)"
    )
    parser.add_argument("--runs", type=int, default=1, help="runs of each configuration")
    parser.add_argument("--warmup", type=int, default=300, help="events sent before counting")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for db in args.db.split(","):
            for replicas in args.replicas if db == "postgresql" else [1]:
                rows = []
                for _ in range(args.runs):
                    row = bench_one(db, args.events, args.clients, replicas, args.warmup, Path(tmp))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if len(rows) > 1:
                    print(json.dumps(_median(rows)), flush=True)


def _median(rows: list[dict[str, object]]) -> dict[str, object]:
    """The median of each figure over the runs of one configuration."""
    figures = (
        "events_per_s",
        "p50_ms",
        "p99_ms",
        "mean_ms",
        "server_cpu_ms_per_event",
        "server_cores_busy",
        "client_cpu_ms_per_event",
        "postgres_cpu_ms_per_event",
    )
    first = rows[0]
    return {
        "bench": "intake",
        "median_of": len(rows),
        "db": first["db"],
        "replicas": first["replicas"],
        "events": first["events"],
        "clients": first["clients"],
        **{name: statistics.median(float(str(r[name])) for r in rows) for name in figures},
        "non_202": sum(int(str(r["non_202"])) for r in rows),
    }


if __name__ == "__main__":
    main()

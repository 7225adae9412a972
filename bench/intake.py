"""Intake benchmark: N SuperPipeline events over HTTP from C concurrent clients.

Each event is a distinct elicitation, committed (elicitation, delivery, outbox row) before its 202.
Prints one JSON line per database: events/s, p50/p99 accept latency, and the count stored.

    .venv/bin/python bench/intake.py [--events 10000] [--clients 16] [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_healthy(base: str, proc: subprocess.Popen[bytes]) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError("elicitbot serve exited during start")
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError("elicitbot serve did not become healthy")


async def drive(base: str, events: int, clients: int) -> tuple[float, list[float], int]:
    """C clients (aiohttp: lighter than httpx, so the client steals less of the 2 cores)."""
    run = uuid.uuid4().hex[:8]
    queue = [json.dumps(pending_event(i, run, "/bench")).encode() for i in range(events)]
    queue.reverse()
    latencies: list[float] = []
    failures = 0
    headers = {"content-type": "application/cloudevents+json"}

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        while queue:
            body = queue.pop()
            started = time.perf_counter()
            async with session.post(f"{base}/v1/events", data=body, headers=headers) as response:
                await response.read()
                latencies.append(time.perf_counter() - started)
                if response.status != 202:
                    failures += 1

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies, failures


def bench_one(db: str, events: int, clients: int, workdir: Path) -> dict[str, object]:
    schema = None
    if db == "sqlite":
        url = f"sqlite:///{workdir / 'bench.db'}"
    else:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    port = free_port()
    config = workdir / f"{db}.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:{port}"\n[store]\nurl = "{url}"\n')
    env = {**os.environ, "ELICITBOT_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve", "-c", str(config)], cwd=workdir, env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_healthy(base, proc))
        elapsed, latencies, failures = asyncio.run(drive(base, events, clients))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    count = _count(url)
    if schema is not None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return {
        "bench": "intake",
        "db": db,
        "events": events,
        "clients": clients,
        "seconds": round(elapsed, 3),
        "events_per_s": round(events / elapsed, 1),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "mean_ms": round(statistics.fmean(latencies) * 1000, 2),
        "non_202": failures,
        "stored": count,
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--db", default="sqlite,postgresql")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for db in args.db.split(","):
            print(json.dumps(bench_one(db, args.events, args.clients, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()

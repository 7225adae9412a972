"""What the benchmarks share to run the product: ``python -m bot serve -c <config>`` as a process,
driven and measured from outside.

:class:`Serve` writes the config file, starts the process (its JSON log lines in a file beside it),
waits for ``/healthz`` or ``/readyz``, reads its CPU and memory from ``/proc`` and its log lines
back, and stops it with SIGTERM. :func:`post_events` is intake over HTTP (CloudEvents, one
batch per request); :func:`signed_click` is a Slack ``block_actions`` request signed as Slack
signs one, for ``POST /slack/events`` in HTTP mode.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BATCH = "application/cloudevents-batch+json"
PG_URL = os.environ.get("ELICITBOT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load() -> list[float]:
    """The machine's load average (1, 5, 15 minutes), for beside every figure."""
    return [round(x, 2) for x in os.getloadavg()]


def store_url(db: str, workdir: Path, name: str = "elicitbot") -> tuple[str, str | None]:
    """A fresh store: a SQLite file in ``workdir``, or a new PostgreSQL schema (returned too,
    for :func:`drop_schema`)."""
    if db == "sqlite":
        return f"sqlite:///{workdir / f'{name}.db'}", None
    import uuid

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    return f"{PG_URL}?options=-csearch_path%3D{schema}", schema


def drop_schema(schema: str | None) -> None:
    if schema is None:
        return
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime so far of a process (or one of its threads); 0 once it is gone."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        raw = Path(path).read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set (``VmHWM``), while it is alive."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Serve:
    """``python -m bot serve -c <dir>/<name>.toml``, started in ``workdir``; its log in
    ``<name>-<run>.log`` there (JSON lines, ``log_level``)."""

    def __init__(
        self,
        workdir: Path,
        config: str,
        *,
        env: dict[str, str] | None = None,
        name: str = "serve",
        log_level: str = "INFO",
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config = workdir / f"{name}.toml"
        head = f'[server]\nlisten = "127.0.0.1:{self.port}"\nlog_format = "json"\n\n'
        self.config.write_text(head + config, encoding="utf-8")
        self.env = {**os.environ, **(env or {}), "ELICITBOT_LOG_LEVEL": log_level}
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.spawned = 0.0
        """``time.time()`` just before the latest start."""

    @property
    def log(self) -> Path:
        return self.workdir / f"{self.name}-{self.runs}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Serve:
        self.runs += 1
        with self.log.open("wb") as out:
            self.spawned = time.time()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve", "-c", str(self.config)],
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    async def wait(self, path: str = "/healthz", within: float = 60.0) -> float:
        """Until ``path`` answers 200; ``time.time()`` then."""
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession() as session:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"serve exited during start:\n{self.tail()}")
                try:
                    async with session.get(f"{self.base}{path}") as response:
                        if response.status == 200:
                            return time.time()
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"serve: {path} not 200 after {within} s:\n{self.tail()}")
                await asyncio.sleep(0.05)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (serve finishes its work and exits 0); SIGKILL after ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def events(self, name: str | None = None, run: int | None = None) -> list[dict[str, Any]]:
        """The JSON log lines (of run ``run``, default the latest) whose event is ``name``, each
        with ``t``: its timestamp as ``time.time()`` seconds."""
        path = self.workdir / f"{self.name}-{run or self.runs}.log"
        found = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or (name is not None and record.get("event") != name):
                continue
            stamp = record.get("timestamp")
            if isinstance(stamp, str):
                record["t"] = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            found.append(record)
        return found


async def post_events(
    session: aiohttp.ClientSession, base: str, events: list[dict[str, Any]], *, batch: int = 100
) -> float:
    """Intake over HTTP, ``batch`` CloudEvents a request (one intake commit each); every one
    must be 202. ``time.time()`` when the last 202 came."""
    for start in range(0, len(events), batch):
        body = json.dumps(events[start : start + batch])
        async with session.post(
            f"{base}/v1/events", data=body, headers={"content-type": BATCH}
        ) as response:
            text = await response.text()
            if response.status != 202:
                raise RuntimeError(f"intake: {response.status} {text[:500]}")
    return time.time()


def superpipeline_event(
    data: dict[str, Any], event_id: str, workspace: str = "acme"
) -> dict[str, Any]:
    """A SuperPipeline ``elicitation.pending`` CloudEvent carrying ``data`` (its subject names
    ``workspace``, which routes may match)."""
    from bench.figures import CE_TYPE

    return {
        "specversion": "1.0",
        "id": event_id,
        "source": "/bench",
        "type": CE_TYPE,
        "subject": f"evt.{workspace}.superpipeline.elicitation.pending",
        "datacontenttype": "application/json",
        "data": data,
    }


def signed_click(
    secret: str, key: str, option: str, *, user: str, channel: str, ts: str
) -> tuple[str, dict[str, str]]:
    """A ``block_actions`` click on option ``option`` of elicitation ``key`` (the button's value
    names it, as on any copy), signed with ``secret``: (body, headers)."""
    from slack_sdk.signature import SignatureVerifier

    payload = {
        "type": "block_actions",
        "team": {"id": "T0ACME", "domain": "acme"},
        "user": {"id": user, "name": user.lower(), "team_id": "T0ACME"},
        "api_app_id": "A0ELICITBOT",
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "trigger_id": f"{time.time():.6f}.bench",
        "channel": {"id": channel, "name": "bench"},
        "message": {"type": "message", "ts": ts, "text": "", "blocks": []},
        "state": {"values": {}},
        "actions": [
            {
                "type": "button",
                "action_id": "elicitbot.option.1",
                "block_id": "elicitbot.options.0",
                "value": json.dumps({"e": key, "o": option, "r": None}),
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    return body, {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": stamp,
        "x-slack-signature": signature or "",
    }


def slack_config(api_url: str, routes: str, extra: str = "") -> str:
    """The config after ``[server]``: a store placeholder is the caller's; Slack in HTTP mode on
    the fake Web API (tokens from ``SLACK_BOT_TOKEN`` / ``SLACK_SIGNING_SECRET``)."""
    return (
        '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\n'
        'signing_secret_env = "SLACK_SIGNING_SECRET"\n'
        f'api_url = "{api_url}"\n\n{routes}\n{extra}'
    )

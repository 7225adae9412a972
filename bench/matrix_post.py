"""Matrix benchmark: ``elicitbot serve`` posting to a plaintext and an encrypted room on a real
Synapse, read and answered by a person's E2EE client, against a bare matrix-nio send loop.

Each room gets its own bot account and its own ``python -m bot serve -c <config>`` process (its
own SQLite store; Matrix on, with a pickle key for the encrypted one; its room the only route;
SuperPipeline write-backs to a recording webhook; logs as JSON lines at DEBUG). Everything goes
in over HTTP (``POST /v1/events``) and is read from outside: one person reads both rooms through
an E2EE nio client syncing in a process of its own, as on another machine, and reports when each
event became readable to it (received and, in the encrypted room, decrypted), by wall clock.

Per room, after a warm-up (the first room-key share, not counted):

- ``post_to_visible_ms``: one options elicitation at a time, from its 202 until the person read
  its prompt;
- ``reaction_to_edit_ms``: the person reacts with an option's keycap (encrypted in the encrypted
  room) until it reads the prompt's first edit, one at a time; ``trace_ms`` splits each answer:
  the reaction sent → the homeserver took it (its ``origin_server_ts``) → serve's sync had it
  (its ``matrix.synced`` log line) → serve recorded the answer (``answer.recorded``) → the
  webhook received the write-back, and → the homeserver took the edit → serve had the
  homeserver's answer to it (``outbox.sent`` of the update) / the person read it (p50 of each);
- ``burst_visible_s``: one intake batch of ``--burst`` (50) options elicitations, from its 202
  until the person read all of the prompts, over ``--bursts`` bursts (goal p50 ≤ 0.8 s);
  ``burst_seeded_s``: until every seeded keycap of the burst was in too; ``burst_cpu_s``: CPU
  seconds per burst (median, from ``/proc``) of serve (``serve_loop``: its main thread, the
  event loop), Synapse and the person; ``burst_chains``: the ``outbox.chain`` lines serve logged
  for the room's lane (how many, the largest); ``burst_trace_s``: each burst's posts, seconds
  from the 202 (median over the bursts): serve claimed the chain, the homeserver took the first
  and the last prompt, serve had the homeserver's answer to the last (``outbox.sent``), the
  person read the last; and per post the homeserver's time → answered / → read (ms);
- ``encrypted_over_plaintext``: each figure's p50, encrypted ÷ plaintext.

Throughput (plaintext room, unless ``--skip-throughput``): ``--n`` options elicitations in one
batch until the person read every prompt and keycap, and ``--n`` free-text ones until it read
every prompt, against ``--n`` messages through a bare nio ``room_send`` loop (before and after,
averaged; ``--skip-bare`` leaves it out). ``ratio`` = elicitbot elicitations/s ÷ bare
messages/s (goal ≥ 0.8); ``event_ratio`` counts events (4 per options elicitation).

Prints one JSON line (logs go to stderr), with the load average. Synapse is started here (PyPI
``matrix-synapse``; ``SYNAPSE_PYTHON``). ``--person SPEC`` is the person's process, started by
the bench itself.

    .venv/bin/python bench/matrix_post.py [--n 200] [--latency-n 50] [--burst 50] [--bursts 5]
        [--rooms plaintext,encrypted] [--skip-bare] [--skip-throughput]
    .venv/bin/python bench/matrix_post.py --skip-throughput --latency-n 10 --bursts 2  # quick

Until 2026-12-02 the bot side was a Dispatcher, Service and MatrixListener built in this process
(see bench/README.md); ``--profile`` went with it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import functools
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
import nio  # noqa: E402
from nio.exceptions import EncryptionError  # noqa: E402
from nio.store import SqliteStore  # noqa: E402

from adapters.matrix.e2ee.client import EncryptingClient, housekeeping, send_event, upload_keys  # noqa: E402
from adapters.matrix.render import MARKER, message_content  # noqa: E402
from adapters.sources.superpipeline.parse import parse_body  # noqa: E402
from bench.figures import machine, percentile  # noqa: E402 - after the path
from bench.serve import Serve, cpu_seconds, load, post_events, superpipeline_event  # noqa: E402
from bot.app import logs  # noqa: E402
from bot.domain.model import Status  # noqa: E402
from bot.domain.ports import PromptView  # noqa: E402
from tests.fakes import FakeWebhook  # noqa: E402
from tests.synapse import MatrixUser, Synapse, http_json  # noqa: E402
from tests.unit.sources.superpipeline_fixtures import VALID  # noqa: E402

PICKLE_KEY = "bench-pickle-key-0123456789abcdef"  # a throw-away bench key, never a real one
MEGOLM = "m.megolm.v1.aes-sha2"
SEEDS = len(VALID["options"]["options"])
"""Seeded reactions per options prompt (one per option)."""
WAIT = 60.0
"""Seconds to wait for anything the person should see before the run fails."""
WARMUP = 3
PERSON_POLL_MS = 30_000
PERSON_FILTER = {"room": {"timeline": {"limit": 1000}}}
"""The person's sync filter: a burst's events fit one batch (a limited batch would drop some)."""


async def make_room(base: str, owner: Any, members: list[Any], *, encrypted: bool = False) -> str:
    """A private room made by ``owner`` (with ``m.room.encryption`` when ``encrypted``, as
    Element makes one), ``members`` invited and joined."""
    body: dict[str, Any] = {"preset": "private_chat", "invite": [m.user_id for m in members]}
    if encrypted:
        body["initial_state"] = [
            {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}
        ]
    reply = http_json(f"{base}/_matrix/client/v3/createRoom", body, token=owner.access_token)
    for member in members:
        http_json(
            f"{base}/_matrix/client/v3/join/{reply['room_id']}", {}, token=member.access_token
        )
    return str(reply["room_id"])


async def bare_loop(
    base: str, user: Any, room: str, content: dict[str, Any], n: int, run: str
) -> float:
    """What a minimal bot does: N messages in a sequential ``room_send`` loop."""
    client = nio.AsyncClient(base, user.user_id, device_id=user.device_id)
    client.access_token = user.access_token
    try:
        for i in range(5):  # warm the connection pool and Synapse's caches
            await client.room_send(room, "m.room.message", content, tx_id=f"warm-{run}-{i}")
        started = time.perf_counter()
        for i in range(n):
            response = await client.room_send(
                room, "m.room.message", content, tx_id=f"bare-{run}-{i}"
            )
            assert isinstance(response, nio.RoomSendResponse), response
        return time.perf_counter() - started
    finally:
        await client.close()


def thread_reply(root: str, body: str) -> dict[str, Any]:
    return {
        "msgtype": "m.text",
        "body": body,
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        },
    }


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(latencies), 1),
        "p99": round(percentile(latencies, 0.99), 1),
        "max": round(max(latencies), 1),
        "n": len(latencies),
    }


def over(encrypted: float, plaintext: float) -> float | None:
    return round(encrypted / plaintext, 2) if plaintext > 0 else None


# ---------------------------------------------------------------------------- the person


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def readable(event: Any, room_id: str, own: str, seen_at: float) -> dict[str, Any] | None:
    """What the parent wants to know of a readable event: a prompt (by the elicitation key in
    its content), an edit of one, a reaction someone else made, or one of the person's own
    events (when the homeserver took it: ``ots``, its ``origin_server_ts`` in seconds)."""
    ots = getattr(event, "server_timestamp", 0) / 1000
    if getattr(event, "sender", own) == own:
        return {"op": "mine", "id": event.event_id, "ots": ots, "t": seen_at}
    if isinstance(event, nio.ReactionEvent):
        return {
            "op": "seed",
            "room": room_id,
            "to": event.reacts_to,
            "id": event.event_id,
            "key": event.key,
            "t": seen_at,
        }
    content = event.source.get("content", {}) if isinstance(event.source, dict) else {}
    relates = content.get("m.relates_to") or {}
    if relates.get("rel_type") == "m.replace":
        return {"op": "edit", "to": relates.get("event_id"), "t": seen_at, "ots": ots}
    marker = content.get(MARKER)
    if not isinstance(marker, dict):
        return None
    return {
        "op": "prompt",
        "room": room_id,
        "key": marker.get("key"),
        "id": event.event_id,
        "decrypted": bool(getattr(event, "decrypted", False)),
        "t": seen_at,
        "ots": ots,
    }


async def follow(client: EncryptingClient, own: str) -> None:
    """Sync for ever, reporting each readable prompt and reaction when its batch came in; an
    event that came before its room key is decrypted (and reported) once the key is in."""
    pending: list[tuple[str, Any]] = []
    while True:
        response = await client.sync(timeout=PERSON_POLL_MS, sync_filter=PERSON_FILTER)
        seen_at = time.time()  # received, and decrypted where nio could
        if not isinstance(response, nio.SyncResponse):
            emit({"op": "error", "error": str(response)})
            await asyncio.sleep(0.1)
            continue
        for room_id, joined in response.rooms.join.items():
            if joined.timeline.limited:
                emit({"op": "limited", "room": room_id})
            for event in joined.timeline.events:
                if isinstance(event, nio.MegolmEvent):
                    pending.append((room_id, event))
                elif (record := readable(event, room_id, own, seen_at)) is not None:
                    emit(record)
        still: list[tuple[str, Any]] = []
        for room_id, event in pending:
            try:
                decrypted = client.olm.decrypt_megolm_event(event, room_id)
            except EncryptionError:
                still.append((room_id, event))
                continue
            if (record := readable(decrypted, room_id, own, seen_at)) is not None:
                emit(record)
        if len(still) != len(pending):
            emit({"op": "undecrypted", "n": len(still)})
        pending = still
        await housekeeping(client)


async def person_main(spec: dict[str, Any]) -> None:
    """The person's process: an E2EE client on ``spec``'s account, its store in
    ``spec["store"]``. Commands come as JSON lines on stdin (``reply``, ``stop``); what it saw
    goes out as JSON lines on stdout."""
    config = nio.AsyncClientConfig(
        store=SqliteStore,
        encryption_enabled=True,
        pickle_key=PICKLE_KEY,
        store_sync_tokens=True,
        max_limit_exceeded=0,
        max_timeouts=0,
    )
    client = EncryptingClient(
        spec["base"],
        spec["user_id"],
        device_id=spec["device_id"],
        store_path=spec["store"],
        config=config,
    )
    client.restore_login(spec["user_id"], spec["device_id"], spec["token"])
    assert client.olm is not None, "the e2e extra (vodozemac) is not installed"
    uploaded = await upload_keys(client)
    assert isinstance(uploaded, nio.KeysUploadResponse), uploaded
    first = await client.sync(timeout=0, sync_filter=PERSON_FILTER)
    assert isinstance(first, nio.SyncResponse), first
    await housekeeping(client)
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    syncing = asyncio.create_task(follow(client, spec["user_id"]))
    emit({"op": "ready"})
    try:
        while line := await commands.readline():
            command = json.loads(line)
            if command["op"] == "stop":
                break
            sent = time.time()
            if command["op"] == "react":
                event_type = "m.reaction"
                content: dict[str, Any] = {
                    "m.relates_to": {
                        "rel_type": "m.annotation",
                        "event_id": command["root"],
                        "key": command["body"],
                    }
                }
            else:
                event_type, content = (
                    "m.room.message",
                    thread_reply(command["root"], command["body"]),
                )
            response = await send_event(
                client, command["room"], event_type, content, uuid.uuid4().hex
            )
            ok = isinstance(response, nio.RoomSendResponse)
            emit(
                {
                    "op": "sent",
                    "n": command["n"],
                    "t": sent,
                    "id": response.event_id if ok else None,
                    "error": None if ok else str(response),
                }
            )
    finally:
        syncing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await syncing
        await client.close()


class Person:
    """The parent's side of the person's process: what it read, and when."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.prompts: dict[str, tuple[str, float, bool]] = {}
        """Elicitation key → (prompt event id, read at, decrypted), the first copy read."""
        self.prompt_ots: dict[str, float] = {}
        """Elicitation key → the homeserver's time of its prompt (``origin_server_ts``)."""
        self.seeds: dict[str, dict[str, tuple[float, str]]] = {}
        """Prompt event id → {reaction event id: (read at, its key)}."""
        self.edits: dict[str, list[tuple[float, float]]] = {}
        """Prompt event id → each edit's (read at, the homeserver's time of it)."""
        self.mine: dict[str, float] = {}
        """The person's own event ids → the homeserver's time of each."""
        self.sent: dict[int, tuple[float, str | None, str | None]] = {}
        """Command number → (when it was sent, its event id, the error it met)."""
        self.undecrypted = 0
        self.limited = 0
        self.errors: list[str] = []
        self.changed = asyncio.Event()
        self.ready = asyncio.Event()
        self._n = 0
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, base: str, user: MatrixUser, store: Path) -> Person:
        spec = {
            "base": base,
            "user_id": user.user_id,
            "device_id": user.device_id,
            "token": user.access_token,
            "store": str(store),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--person",
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        person = cls(process)
        await person.until(person.ready.is_set, "the person's first sync")
        return person

    async def _read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            record = json.loads(line)
            op = record["op"]
            if op == "prompt":
                self.prompts.setdefault(
                    record["key"], (record["id"], record["t"], record["decrypted"])
                )
                self.prompt_ots.setdefault(record["key"], record["ots"])
            elif op == "seed":
                seeds = self.seeds.setdefault(record["to"], {})
                seeds.setdefault(record["id"], (record["t"], record["key"]))
            elif op == "edit":
                self.edits.setdefault(record["to"], []).append((record["t"], record["ots"]))
            elif op == "mine":
                self.mine.setdefault(record["id"], record["ots"])
            elif op == "sent":
                self.sent[record["n"]] = (record["t"], record["id"], record["error"])
            elif op == "undecrypted":
                self.undecrypted = record["n"]
            elif op == "limited":
                self.limited += 1
            elif op == "error":
                self.errors.append(record["error"])
            elif op == "ready":
                self.ready.set()
            self.changed.set()
        self.changed.set()

    async def until(self, check: Callable[[], Any], what: str) -> Any:
        """Wait (woken by each report) until ``check()`` is truthy; returns its value."""
        deadline = time.monotonic() + WAIT
        while not (value := check()):
            if self._reader.done():
                raise RuntimeError(f"the person's process ended before {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"timed out waiting for {what} (errors: {self.errors[-3:]})")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)
        return value

    def read_at(self, keys: list[str]) -> float | None:
        """When the last of these prompts was read (None while one is not)."""
        times = [self.prompts[k][1] for k in keys if k in self.prompts]
        return max(times) if len(times) == len(keys) else None

    def seeded_at(self, keys: list[str], sender_seeds: int) -> float | None:
        """When the last seeded reaction of these prompts was read (None while one is not)."""
        times: list[float] = []
        for key in keys:
            if key not in self.prompts:
                return None
            seeds = self.seeds.get(self.prompts[key][0], {})
            if len(seeds) < sender_seeds:
                return None
            times.extend(t for t, _ in seeds.values())
        return max(times)

    def edited_after(self, root: str, after: float) -> tuple[float, float] | None:
        """The first edit of ``root`` the person read after ``after`` (None while none)."""
        return next((e for e in self.edits.get(root, []) if e[0] > after), None)

    async def send(self, op: str, room: str, root: str, body: str) -> tuple[float, str]:
        """A thread reply (``op`` "reply") or a reaction with key ``body`` ("react") on
        ``root``; (when it was sent, as ``time.time()``; its event id)."""
        assert self.process.stdin is not None
        self._n += 1
        n = self._n
        command = {"op": op, "n": n, "room": room, "root": root, "body": body}
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        sent, event_id, error = await self.until(lambda: self.sent.get(n), f"the {op} sent")
        if error:
            raise RuntimeError(f"the person's {op} failed: {error}")
        return float(sent), str(event_id)

    async def stop(self) -> None:
        if self.process.stdin is not None and self.process.returncode is None:
            with contextlib.suppress(ConnectionError):
                self.process.stdin.write(b'{"op": "stop"}\n')
                await self.process.stdin.drain()
        try:
            await asyncio.wait_for(self.process.wait(), timeout=10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        await self._reader


# ---------------------------------------------------------------------------- the bots


def event(case: str, eid: str) -> dict[str, Any]:
    data = copy.deepcopy(VALID[case])
    data["elicitationId"] = eid
    return superpipeline_event(data, f"ce-{eid}")


def wall(monotonic: float) -> float:
    """A ``time.monotonic()`` reading (the webhook's) as ``time.time()``."""
    return monotonic + (time.time() - time.monotonic())


@dataclass
class Bot:
    """One room's ``elicitbot serve`` process, and how to feed it."""

    kind: str
    room: str
    serve: Serve
    webhook: FakeWebhook
    session: aiohttp.ClientSession

    @classmethod
    async def start(
        cls,
        base: str,
        kind: str,
        bot: MatrixUser,
        person: MatrixUser,
        room: str,
        workdir: Path,
        session: aiohttp.ClientSession,
    ) -> Bot:
        home = workdir / kind
        home.mkdir()
        webhook = FakeWebhook().start()
        config = (
            f'[store]\nurl = "sqlite:///{home / "elicitbot.db"}"\n\n'
            f'[matrix]\nhomeserver = "{base}"\nuser_id = "{bot.user_id}"\n'
            f'access_token_env = "BENCH_MATRIX_TOKEN"\ndevice_id = "{bot.device_id}"\n'
            + ('pickle_key_env = "BENCH_MATRIX_PICKLE_KEY"\n' if kind == "encrypted" else "")
            + f'\n[people]\nadmins = ["matrix:{person.user_id}"]\n\n'
            f'[[routes]]\ndestinations = ["matrix:{room}"]\n\n'
            f'[sources.superpipeline]\nanswer_webhook = "{webhook.url}"\n'
        )
        env = {"BENCH_MATRIX_TOKEN": bot.access_token, "BENCH_MATRIX_PICKLE_KEY": PICKLE_KEY}
        serve = Serve(home, config, env=env, log_level="DEBUG").start()
        try:
            await serve.wait("/readyz")
        except BaseException:
            serve.stop()
            webhook.stop()
            raise
        return cls(kind, room, serve, webhook, session)

    def close(self) -> None:
        self.serve.stop()
        self.webhook.stop()

    async def intake(self, case: str, ids: list[str]) -> tuple[list[str], float]:
        """Elicitations of fixture ``case`` in one batch; their keys and when the 202 came."""
        events = [event(case, eid) for eid in ids]
        committed = await post_events(self.session, self.serve.base, events, batch=len(ids))
        return [f"superpipeline:{eid}" for eid in ids], committed

    def written_back(self, eid: str) -> float | None:
        """When the webhook received the write-back of ``eid`` (``time.time()``)."""
        for request in self.webhook.recorded():
            if isinstance(request.body, dict) and request.body.get("elicitationId") == eid:
                return wall(request.at)
        return None


async def post_and_read(bot: Bot, person: Person, eid: str) -> tuple[str, str, float]:
    """One prompt posted and read, its keycaps in too; (its key, its event id, ms from the 202
    until the person read it)."""
    [key], committed = await bot.intake("options", [eid])
    read: float = await person.until(lambda: person.read_at([key]), f"prompt {eid} read")
    await person.until(lambda: person.seeded_at([key], SEEDS), f"prompt {eid} seeded")
    return key, person.prompts[key][0], (read - committed) * 1000


async def react_and_edit(bot: Bot, person: Person, key: str, root: str) -> dict[str, Any]:
    """The person reacts with the prompt's first keycap; until it reads the prompt's edit and
    the write-back is in. What it saw, for the trace."""
    seeds = sorted(person.seeds[root].values())
    sent, reaction = await person.send("react", bot.room, root, seeds[0][1])
    edit_read, edit_ots = await person.until(
        lambda: person.edited_after(root, sent), f"the edit of {key}"
    )
    eid = key.split(":", 1)[1]
    deadline = time.monotonic() + WAIT
    while (back := bot.written_back(eid)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no write-back of {key}")
        await asyncio.sleep(0.01)
    return {
        "key": key,
        "sent": sent,
        "reaction": reaction,
        "edit_read": edit_read,
        "edit_ots": edit_ots,
        "written_back": back,
    }


def trace(bot: Bot, person: Person, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Each answer's steps, ms apart (p50 of each): the reaction sent → the homeserver took it →
    serve's sync had it (its first ``matrix.synced`` line with events after the homeserver's
    time) → serve recorded the answer (``answer.recorded``) → the write-back received, and →
    the homeserver took the edit → serve had the homeserver's answer to the edit (its
    ``outbox.sent`` line of the update) / the person read the edit."""
    recorded = {e["key"]: e["t"] for e in bot.serve.events("answer.recorded") if "t" in e}
    synced = sorted(e["t"] for e in bot.serve.events("matrix.synced") if e.get("events"))
    updates: dict[str, list[float]] = {}
    for e in bot.serve.events("outbox.sent"):
        if e.get("kind") == "update":
            updates.setdefault(e["key"], []).append(e["t"])
    steps: dict[str, list[float]] = {
        "sent_to_homeserver": [],
        "homeserver_to_synced": [],
        "synced_to_recorded": [],
        "homeserver_to_recorded": [],
        "recorded_to_written_back": [],
        "recorded_to_edit_at_homeserver": [],
        "edit_at_homeserver_to_update_answered": [],
        "edit_at_homeserver_to_read": [],
    }
    for a in answers:
        took = person.mine.get(a["reaction"])
        at = recorded.get(a["key"])
        if took is None or at is None:
            continue
        steps["sent_to_homeserver"].append((took - a["sent"]) * 1000)
        if (sync := next((t for t in synced if took <= t <= at), None)) is not None:
            steps["homeserver_to_synced"].append((sync - took) * 1000)
            steps["synced_to_recorded"].append((at - sync) * 1000)
        steps["homeserver_to_recorded"].append((at - took) * 1000)
        steps["recorded_to_written_back"].append((a["written_back"] - at) * 1000)
        steps["recorded_to_edit_at_homeserver"].append((a["edit_ots"] - at) * 1000)
        if (done := next((t for t in updates.get(a["key"], []) if t >= at), None)) is not None:
            steps["edit_at_homeserver_to_update_answered"].append((done - a["edit_ots"]) * 1000)
        steps["edit_at_homeserver_to_read"].append((a["edit_read"] - a["edit_ots"]) * 1000)
    return {name: round(statistics.median(v), 1) if v else None for name, v in steps.items()} | {
        "n": len(steps["sent_to_homeserver"])
    }


def burst_trace(bot: Bot, person: Person, keys: list[str], committed: float) -> dict[str, Any]:
    """One burst's posts, seconds from the intake's 202: serve claimed the chain (its first
    ``outbox.chain`` line; the claim may come before the 202 reached the bench), the homeserver
    took the first and the last prompt (``origin_server_ts``), serve had the homeserver's answer
    to the last send (its ``outbox.sent`` lines), the person read the last; and per post (p50,
    ms) the homeserver's time → serve had its answer, and → the person read it."""
    wanted = set(keys)
    sent = {
        e["key"]: e["t"]
        for e in bot.serve.events("outbox.sent")
        if e.get("kind") == "post" and e.get("key") in wanted
    }
    ots = {k: person.prompt_ots[k] for k in keys if k in person.prompt_ots}
    read = {k: person.prompts[k][1] for k in keys if k in person.prompts}
    if not sent or not ots:
        return {}
    lane, last = f"chat:matrix:{bot.room}", max(sent.values())
    claims = [
        e["t"]
        for e in bot.serve.events("outbox.chain")
        if e.get("lane") == lane and committed - 1.0 <= e["t"] <= last
    ]

    def at(t: float) -> float:
        return round(t - committed, 3)

    return {
        "claimed": at(min(claims)) if claims else None,
        "first_at_homeserver": at(min(ots.values())),
        "last_at_homeserver": at(max(ots.values())),
        "last_answered": at(max(sent.values())),
        "last_read": at(max(read.values())),
        "homeserver_to_answered_ms": round(
            statistics.median((sent[k] - ots[k]) * 1000 for k in ots if k in sent), 1
        ),
        "homeserver_to_read_ms": round(
            statistics.median((read[k] - ots[k]) * 1000 for k in ots if k in read), 1
        ),
    }


def median_trace(traces: list[dict[str, Any]]) -> dict[str, Any]:
    """Each step's median over the bursts."""
    names = list(traces[0]) if traces else []
    return {
        name: round(statistics.median(v), 3)
        for name in names
        if (v := [t[name] for t in traces if t.get(name) is not None])
    }


async def room_phase(
    bot: Bot,
    person: Person,
    *,
    stats: dict[str, tuple[int, int | None]],
    latency_n: int,
    burst: int,
    bursts: int,
) -> dict[str, Any]:
    kind = bot.kind
    for i in range(WARMUP):  # the first room-key share, Synapse's caches, the connections
        key, root, _ = await post_and_read(bot, person, f"eli_warm_{kind}_{i}")
        await react_and_edit(bot, person, key, root)
    visible: list[float] = []
    posted: list[tuple[str, str]] = []
    for i in range(latency_n):
        key, root, ms = await post_and_read(bot, person, f"eli_one_{kind}_{i:04d}")
        visible.append(ms)
        posted.append((key, root))
    answers = []
    for key, root in posted:
        answers.append(await react_and_edit(bot, person, key, root))
        await asyncio.sleep(0.1)  # the answer's notice and the rest out of the way
    edits = [(a["edit_read"] - a["sent"]) * 1000 for a in answers]

    burst_visible: list[float] = []
    burst_seeded: list[float] = []
    burst_cpu: dict[str, list[float]] = {name: [] for name in stats}
    burst_traces: list[dict[str, Any]] = []
    for b in range(bursts):
        ids = [f"eli_burst_{kind}_{b}_{i:03d}" for i in range(burst)]
        cpu = {name: cpu_seconds(*where) for name, where in stats.items()}
        keys, committed = await bot.intake("options", ids)
        read: float = await person.until(functools.partial(person.read_at, keys), f"burst {b} read")
        seeded: float = await person.until(
            functools.partial(person.seeded_at, keys, SEEDS), f"burst {b} seeded"
        )
        for name, where in stats.items():
            burst_cpu[name].append(cpu_seconds(*where) - cpu[name])
        burst_visible.append(read - committed)
        burst_seeded.append(seeded - committed)
        burst_traces.append(burst_trace(bot, person, keys, committed))
        await asyncio.sleep(0.5)
    chains = [
        e["size"]
        for e in bot.serve.events("outbox.chain")
        if e.get("lane") == f"chat:matrix:{bot.room}"
    ]
    decrypted = [person.prompts[k][2] for k, _ in posted]
    return {
        "post_to_visible_ms": summary(visible),
        "reaction_to_edit_ms": summary(edits),
        "trace_ms": trace(bot, person, answers),
        "burst_visible_s": {
            "p50": round(statistics.median(burst_visible), 3),
            "runs": [round(s, 3) for s in burst_visible],
        },
        "burst_trace_s": median_trace(burst_traces),
        "burst_seeded_s": {
            "p50": round(statistics.median(burst_seeded), 3),
            "runs": [round(s, 3) for s in burst_seeded],
        },
        "burst_cpu_s": {name: round(statistics.median(v), 2) for name, v in burst_cpu.items()},
        "burst_chains": {"logged": len(chains), "largest": max(chains, default=0)},
        "decrypted": all(decrypted) if kind == "encrypted" else None,
        # serve's own sync over the whole phase: its batches, and the limited ones it backfilled.
        "serve_syncs": len(bot.serve.events("matrix.synced")),
        "serve_backfills": len(bot.serve.events("matrix.backfilled")),
    }


async def throughput(bot: Bot, person: Person, n: int) -> dict[str, Any]:
    """N options elicitations until every prompt and keycap is read; N free-text ones until
    every prompt is read."""
    keys, committed = await bot.intake("options", [f"eli_tp_opt_{i:05d}" for i in range(n)])
    seeded: float = await person.until(
        functools.partial(person.seeded_at, keys, SEEDS), "throughput seeded"
    )
    options_s = seeded - committed
    await asyncio.sleep(0.5)
    keys, committed = await bot.intake("free-text", [f"eli_tp_txt_{i:05d}" for i in range(n)])
    read: float = await person.until(functools.partial(person.read_at, keys), "throughput read")
    text_s = read - committed
    return {
        "n": n,
        "elicitbot_per_second": round(n / options_s, 1),
        "elicitbot_seconds": round(options_s, 3),
        "events_per_elicitation": 1 + SEEDS,
        "message_only_per_second": round(n / text_s, 1),
    }


# ---------------------------------------------------------------------------- the run


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    (workdir / "synapse").mkdir(exist_ok=True)
    synapse = Synapse(workdir / "synapse")
    synapse.start()
    result: dict[str, Any] = {"bench": "matrix_post", "measured_on": "serve", "load_before": load()}
    kinds = [k for k in args.rooms.split(",") if k]
    try:
        base = synapse.base_url
        assert synapse.process is not None
        user = synapse.register("person")
        bots = {kind: synapse.register(f"bot-{kind}") for kind in kinds}
        made = {
            kind: await make_room(base, user, [bots[kind]], encrypted=kind == "encrypted")
            for kind in kinds
        }
        bare: list[float] = []
        bare_user = synapse.register("barebot")
        bare_room = await make_room(base, bare_user, [])
        # The bare loop sends exactly the content elicitbot posts for the options fixture.
        sample = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
        view = PromptView(sample, Status.PENDING, None, 1, "http://x/#k", datetime.now(UTC))
        content = message_content(view)
        if not args.skip_throughput and not args.skip_bare:
            bare.append(await bare_loop(base, bare_user, bare_room, content, args.n, "a"))
        person = await Person.start(base, user, workdir / "person")
        rooms: dict[str, Any] = {}
        try:
            async with aiohttp.ClientSession() as session:
                for kind in kinds:
                    bot = await Bot.start(
                        base, kind, bots[kind], user, made[kind], workdir, session
                    )
                    try:
                        stats = {
                            "serve": (bot.serve.pid, None),
                            "serve_loop": (bot.serve.pid, bot.serve.pid),
                            "synapse": (synapse.process.pid, None),
                            "person": (person.process.pid, None),
                        }
                        rooms[kind] = await room_phase(
                            bot,
                            person,
                            stats=stats,
                            latency_n=args.latency_n,
                            burst=args.burst,
                            bursts=args.bursts,
                        )
                        if kind == "plaintext" and not args.skip_throughput:
                            result |= await throughput(bot, person, args.n)
                    finally:
                        await asyncio.to_thread(bot.close)
        finally:
            await person.stop()
        if bare:
            bare.append(await bare_loop(base, bare_user, bare_room, content, args.n, "b"))
            bare_rate = args.n / statistics.mean(bare)
            if "elicitbot_per_second" in result:
                result |= {
                    "bare_per_second": round(bare_rate, 1),
                    "bare_seconds": [round(b, 3) for b in bare],
                    "ratio": round(result["elicitbot_per_second"] / bare_rate, 3),
                    "event_ratio": round(
                        (1 + SEEDS) * result["elicitbot_per_second"] / bare_rate, 3
                    ),
                    "message_only_ratio": round(result["message_only_per_second"] / bare_rate, 3),
                    "goal_ratio": 0.8,
                }
    finally:
        synapse.stop()
    result |= {"latency_n": args.latency_n, "rooms": rooms}
    if {"plaintext", "encrypted"} <= rooms.keys():
        plain, crypt = rooms["plaintext"], rooms["encrypted"]
        result["encrypted_over_plaintext"] = {
            figure: over(crypt[figure]["p50"], plain[figure]["p50"])
            for figure in (
                "post_to_visible_ms",
                "reaction_to_edit_ms",
                "burst_visible_s",
                "burst_seeded_s",
            )
        }
    return result | {
        "burst": args.burst,
        "bursts": args.bursts,
        "goal_burst_visible_s": 0.8,
        "person_undecrypted": person.undecrypted,
        "person_limited_batches": person.limited,
        "load_after": load(),
        "machine": machine(),
    }


def main() -> None:
    logs.configure("WARNING")  # stderr: stdout carries the one JSON line
    if len(sys.argv) == 3 and sys.argv[1] == "--person":  # the person's process (see run())
        spec = json.loads(sys.argv[2])
        Path(spec["store"]).mkdir(parents=True, exist_ok=True)
        asyncio.run(person_main(spec))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=200, help="elicitations in the throughput phase")
    parser.add_argument("--latency-n", type=int, default=50, help="posts and reactions per room")
    parser.add_argument("--burst", type=int, default=50, help="elicitations in one burst")
    parser.add_argument("--bursts", type=int, default=5, help="bursts per room")
    parser.add_argument("--rooms", default="plaintext,encrypted", help="'' to skip the rooms")
    parser.add_argument("--skip-bare", action="store_true", help="no bare loop (no ratios)")
    parser.add_argument("--skip-throughput", action="store_true", help="the room figures only")
    args = parser.parse_args()
    for kind in args.rooms.split(","):
        if kind and kind not in ("plaintext", "encrypted"):
            parser.error(f"--rooms: {kind!r} is neither plaintext nor encrypted")
    with tempfile.TemporaryDirectory(prefix="elicitbot-matrix-bench-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""Matrix benchmark: elicitbot's posting path against a bare matrix-nio send loop, one Synapse,
and what a person reading a plaintext and an encrypted room sees.

1. ``bare``: N messages (the very content elicitbot renders for the options fixture) sent by a
   plain ``AsyncClient`` in a sequential ``room_send`` loop, what a minimal bot does; run before
   and after the elicitbot phases, and averaged.
2. ``elicitbot``: N SuperPipeline "options" elicitations taken in (one batch) and posted by the
   outbox ``Dispatcher`` through ``MatrixChat``: per elicitation one message plus three seeded
   reactions (four events), each with its deterministic transaction id, and every delivery ref
   committed. Timed from the intake commit to the last outbox row done.
   ``message_only``: the same with N "free-text" elicitations (one event each, no reactions).
3. Latency: a person's thread reply on each posted prompt, one at a time, from sending it until
   the answer is committed (the service's change hook), with the listener syncing and the
   dispatcher editing prompts. ``reply_to_answer_ms``: each reply once the previous answer's edit
   and notice are out; ``reply_to_answer_back_to_back_ms``: each reply right after the previous
   answer, its edit and notice still going out.
4. ``rooms``: a plaintext and an encrypted room on the same Synapse, each with a bot account and
   database of its own (the encrypted one's chat made with a pickle key, ``matrix_chat``; its
   room as Element makes one: private, ``m.room.encryption``), run one after the other. One
   person reads both through an E2EE nio client (encryption on, its own store) syncing in a
   process of its own, as on another machine, and reports when each event became readable to
   it: received and, in the encrypted room, decrypted (times are ``time.monotonic``, one clock
   for both processes). After a warm-up (the first room-key share, not counted):
   ``post_to_visible_ms``: one options elicitation at a time, from its intake commit until the
   person read its prompt; ``reply_to_answer_ms``: the person's thread reply (encrypted in the
   encrypted room) until the answer is committed, each once the previous answer's edit and
   notice are out; ``burst_visible_s``: one intake batch of ``--burst`` (50) options
   elicitations to the room, from its commit until the person read all of the prompts, over
   ``--bursts`` bursts with new elicitation ids (goal p50 ≤ 0.8 s); ``burst_seeded_s``: until
   every seeded reaction of the burst was in too; ``burst_cpu_s``: CPU seconds per burst
   (median, from ``/proc``, the figure that holds on a shared machine) of the bot process
   (``bot_loop``: its event-loop thread; the rest is SQL on worker threads), Synapse and the
   person. ``encrypted_over_plaintext``: each figure's p50, encrypted ÷ plaintext (what
   encryption costs).

``ratio`` = elicitbot elicitations/s ÷ bare messages/s (goal ≥ 0.8); ``event_ratio`` counts
events instead (4 per elicitation); reply p50 goal ≤ 100 ms. Prints one JSON line (logs go to
stderr). Synapse is started here (PyPI ``matrix-synapse``; ``SYNAPSE_PYTHON``). ``--profile
FILE`` writes a cProfile of the bot process during each room's bursts to ``FILE.<room>``
(its event loop only: SQL on worker threads is not in it). ``--person SPEC`` is the person's
process, started by the bench itself.

    .venv/bin/python bench/matrix_post.py [--n 200] [--latency-n 50] [--burst 50] [--bursts 5]
        [--rooms plaintext,encrypted] [--skip-bare] [--skip-throughput] [--profile FILE]
    .venv/bin/python bench/matrix_post.py --n 20 --latency-n 10 --bursts 2 --skip-bare  # quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import cProfile
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nio  # noqa: E402
from nio.exceptions import EncryptionError  # noqa: E402
from nio.store import SqliteStore  # noqa: E402

from adapters.matrix import MatrixChat, MatrixListener, make_client, matrix_chat  # noqa: E402
from adapters.matrix.e2ee import EncryptingClient, housekeeping, send_event, upload_keys  # noqa: E402
from adapters.matrix.render import MARKER, message_content  # noqa: E402
from adapters.sources.superpipeline.parse import parse_body  # noqa: E402
from bench.figures import percentile  # noqa: E402 - after the path
from bot.app import logs  # noqa: E402
from bot.clock import SystemClock  # noqa: E402
from bot.domain.model import People, Route, Status  # noqa: E402
from bot.domain.ports import PromptView  # noqa: E402
from bot.domain.records import DeliveryView  # noqa: E402
from bot.outbox import Dispatcher  # noqa: E402
from bot.service import Inbound, Service  # noqa: E402
from store.db import upgrade  # noqa: E402
from store.sql import SqlStore  # noqa: E402
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
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
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


class Answers:
    """The service's change hook: when each change (an answer, here) was committed
    (``time.monotonic``)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.times: list[float] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.times.append(time.monotonic())
        self.event.set()
        self.dispatcher.wake()


async def until_done(store: SqlStore) -> None:
    """Every outbox row done (or failed); polled every 20 ms."""
    while True:
        if all(r.state in ("done", "failed") for r in await store.outbox()):
            return
        await asyncio.sleep(0.02)


def elicitations(case: str, ids: list[str]) -> list[Inbound]:
    """Fixture ``case`` once per elicitation id, as the intake takes them in."""
    inbound = []
    for eid in ids:
        data = copy.deepcopy(VALID[case])
        data["elicitationId"] = eid
        inbound.append(Inbound("ce:/bench", f"ce-{eid}", parse_body(data, workspace="acme"), {}))
    return inbound


async def post_all(
    service: Service, store: SqlStore, n: int, case: str
) -> tuple[float, list[DeliveryView]]:
    """Take N elicitations of fixture ``case`` in and wait until the dispatcher posted them."""
    outcomes = await service.intake(elicitations(case, [f"eli_{case}_{i:05d}" for i in range(n)]))
    started = time.perf_counter()
    await until_done(store)
    seconds = time.perf_counter() - started
    return seconds, [d for o in outcomes for d in await store.deliveries(o.key)]


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


async def reply_latencies(
    base: str,
    person: Any,
    room: str,
    deliveries: list[DeliveryView],
    answers: Answers,
    settle: Any,
) -> list[float]:
    """Reply in each prompt's thread, one at a time; ms from sending to the answer committed.
    ``settle``, when given, is awaited between replies (the previous answer's edit and notice
    out of the way)."""
    client = nio.AsyncClient(base, person.user_id, device_id=person.device_id)
    client.access_token = person.access_token
    latencies: list[float] = []
    try:
        for delivery in deliveries:
            if settle is not None:
                await settle()
            answers.event.clear()
            before = len(answers.times)
            sent = time.monotonic()
            await client.room_send(
                room,
                "m.room.message",
                thread_reply((delivery.ref.key if delivery.ref else None) or "", "deny"),
            )
            await asyncio.wait_for(answers.event.wait(), timeout=10)
            latencies.append((answers.times[before] - sent) * 1000)
    finally:
        await client.close()
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(latencies), 1),
        "p99": round(percentile(latencies, 0.99), 1),
        "max": round(max(latencies), 1),
        "n": len(latencies),
    }


def cpu_seconds(stat: str) -> float:
    """utime + stime so far of the process (or thread) whose ``/proc`` stat file is ``stat``
    (0 once it is gone)."""
    try:
        raw = Path(stat).read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def over(encrypted: float, plaintext: float) -> float | None:
    return round(encrypted / plaintext, 2) if plaintext > 0 else None


# ---------------------------------------------------------------------------- the person


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def readable(event: Any, room_id: str, own: str, seen_at: float) -> dict[str, Any] | None:
    """What the parent wants to know of a readable event: a prompt (by the elicitation key in
    its content; not an edit) or a reaction someone else made."""
    if getattr(event, "sender", own) == own:
        return None
    if isinstance(event, nio.ReactionEvent):
        return {
            "op": "seed",
            "room": room_id,
            "to": event.reacts_to,
            "id": event.event_id,
            "t": seen_at,
        }
    content = event.source.get("content", {}) if isinstance(event.source, dict) else {}
    marker = content.get(MARKER)
    relates = content.get("m.relates_to") or {}
    if not isinstance(marker, dict) or relates.get("rel_type") == "m.replace":
        return None
    return {
        "op": "prompt",
        "room": room_id,
        "key": marker.get("key"),
        "id": event.event_id,
        "decrypted": bool(getattr(event, "decrypted", False)),
        "t": seen_at,
    }


async def follow(client: EncryptingClient, own: str) -> None:
    """Sync for ever, reporting each readable prompt and reaction when its batch came in; an
    event that came before its room key is decrypted (and reported) once the key is in."""
    pending: list[tuple[str, Any]] = []
    while True:
        response = await client.sync(timeout=PERSON_POLL_MS, sync_filter=PERSON_FILTER)
        seen_at = time.monotonic()  # received, and decrypted where nio could
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
            sent = time.monotonic()
            response = await send_event(
                client,
                command["room"],
                "m.room.message",
                thread_reply(command["root"], command["body"]),
                uuid.uuid4().hex,
            )
            ok = isinstance(response, nio.RoomSendResponse)
            emit(
                {"op": "sent", "n": command["n"], "t": sent, "error": None if ok else str(response)}
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
        self.seeds: dict[str, dict[str, float]] = {}
        """Prompt event id → {reaction event id: read at}."""
        self.sent: dict[int, tuple[float, str | None]] = {}
        """Reply number → (when it was sent, the error it met)."""
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
            elif op == "seed":
                self.seeds.setdefault(record["to"], {}).setdefault(record["id"], record["t"])
            elif op == "sent":
                self.sent[record["n"]] = (record["t"], record["error"])
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
            times.extend(seeds.values())
        return max(times)

    async def reply(self, room: str, root: str, body: str) -> float:
        """A thread reply on ``root``; when it was sent (``time.monotonic``)."""
        assert self.process.stdin is not None
        self._n += 1
        n = self._n
        command = {"op": "reply", "n": n, "room": room, "root": root, "body": body}
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        sent, error = await self.until(lambda: self.sent.get(n), "the reply sent")
        if error:
            raise RuntimeError(f"the person's reply failed: {error}")
        return float(sent)

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


# ---------------------------------------------------------------------------- the rooms


@dataclass
class Stack:
    """One bot process for one room: database, chat, dispatcher (running), service, listener."""

    kind: str
    room: str
    store: SqlStore
    chat: MatrixChat
    dispatcher: Dispatcher
    service: Service
    listener: MatrixListener
    answers: Answers
    stop: asyncio.Event
    loop_task: asyncio.Task[None]

    @classmethod
    async def start(
        cls, base: str, kind: str, bot: MatrixUser, person: MatrixUser, room: str, workdir: Path
    ) -> Stack:
        url = f"sqlite:///{workdir / f'{kind}.db'}"
        upgrade(url)
        store = SqlStore.from_url(url)
        clock = SystemClock()
        scratch = workdir / f"{kind}-crypto"
        scratch.mkdir()
        chat = matrix_chat(
            base,
            bot.user_id,
            bot.device_id,
            bot.access_token,
            pickle_key=PICKLE_KEY if kind == "encrypted" else None,
            states=store,
            clock=clock,
            scratch=scratch,
        )
        dispatcher = Dispatcher(store, clock, {"matrix": chat}, {}, lambda key: f"http://x/#{key}")
        answers = Answers(dispatcher)
        service = Service(
            store,
            clock,
            People(admins=frozenset({f"matrix:{person.user_id}"})),
            [Route(destinations=(f"matrix:{room}",))],
            on_change=answers,
        )
        listener = MatrixListener(chat, service, store, device_id=bot.device_id)
        await listener.start()  # holds the crypto state: the encrypted room's sends need it
        deadline = time.monotonic() + WAIT
        while not listener.ready:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} bot's listener did not sync")
            await asyncio.sleep(0.02)
        stop = asyncio.Event()
        loop_task = asyncio.create_task(dispatcher.run(stop, idle_seconds=0.05))
        return cls(kind, room, store, chat, dispatcher, service, listener, answers, stop, loop_task)

    async def settle(self) -> None:
        """Every effect out and every event the listener was handed handled."""
        await until_done(self.store)
        await self.listener.drain()

    async def close(self) -> None:
        await self.listener.stop()
        self.stop.set()
        self.dispatcher.wake()
        await self.loop_task
        await self.chat.client.close()
        await self.store.close()

    async def intake(self, ids: list[str]) -> tuple[list[str], float]:
        """Options elicitations in one batch; their keys and when the intake committed."""
        outcomes = await self.service.intake(elicitations("options", ids))
        committed = time.monotonic()
        assert all(o.result == "accepted" for o in outcomes), outcomes
        return [o.key for o in outcomes], committed


async def post_and_read(stack: Stack, person: Person, eid: str) -> tuple[str, str, float]:
    """One prompt posted and read, then everything settled; (its elicitation key, its event id,
    ms from the intake commit until the person read it)."""
    [key], committed = await stack.intake([eid])
    read: float = await person.until(lambda: person.read_at([key]), f"prompt {eid} read")
    await stack.settle()
    return key, person.prompts[key][0], (read - committed) * 1000


async def reply_and_record(stack: Stack, person: Person, key: str, root: str) -> float:
    """The person's thread reply on ``root``; ms until its answer is committed."""
    stack.answers.event.clear()
    before = len(stack.answers.times)
    sent = await person.reply(stack.room, root, "deny")

    async def answered() -> bool:
        view = await stack.service.view(key)
        return view is not None and view.status is Status.ANSWERED

    deadline = time.monotonic() + WAIT
    while not await answered():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the reply on {key} was not recorded")
        stack.answers.event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stack.answers.event.wait(), timeout=1)
    return (stack.answers.times[before] - sent) * 1000


async def room_phase(
    stack: Stack,
    person: Person,
    *,
    stats: dict[str, str],
    latency_n: int,
    burst: int,
    bursts: int,
    profile: Path | None,
) -> dict[str, Any]:
    kind = stack.kind
    for i in range(WARMUP):  # the first room-key share, Synapse's caches, the connections
        key, root, _ = await post_and_read(stack, person, f"eli_warm_{kind}_{i}")
        await reply_and_record(stack, person, key, root)
        await stack.settle()
    visible: list[float] = []
    posted: list[tuple[str, str]] = []
    for i in range(latency_n):
        key, root, ms = await post_and_read(stack, person, f"eli_one_{kind}_{i:04d}")
        visible.append(ms)
        posted.append((key, root))
    replies: list[float] = []
    for key, root in posted:
        await stack.settle()
        replies.append(await reply_and_record(stack, person, key, root))
    await stack.settle()

    burst_visible: list[float] = []
    burst_seeded: list[float] = []
    burst_cpu: dict[str, list[float]] = {name: [] for name in stats}
    profiler = cProfile.Profile() if profile is not None else None
    for b in range(bursts):
        ids = [f"eli_burst_{kind}_{b}_{i:03d}" for i in range(burst)]
        cpu = {name: cpu_seconds(stat) for name, stat in stats.items()}
        if profiler is not None:
            profiler.enable()
        keys, committed = await stack.intake(ids)
        read: float = await person.until(functools.partial(person.read_at, keys), f"burst {b} read")
        seeded: float = await person.until(
            functools.partial(person.seeded_at, keys, SEEDS), f"burst {b} seeded"
        )
        await until_done(stack.store)
        if profiler is not None:
            profiler.disable()
        for name, stat in stats.items():
            burst_cpu[name].append(cpu_seconds(stat) - cpu[name])
        burst_visible.append(read - committed)
        burst_seeded.append(seeded - committed)
        await stack.settle()
    if profiler is not None and profile is not None:
        profiler.dump_stats(f"{profile}.{kind}")
    decrypted = [person.prompts[k][2] for k, _ in posted]
    return {
        "post_to_visible_ms": summary(visible),
        "reply_to_answer_ms": summary(replies),
        "burst_visible_s": {
            "p50": round(statistics.median(burst_visible), 3),
            "runs": [round(s, 3) for s in burst_visible],
        },
        "burst_seeded_s": {
            "p50": round(statistics.median(burst_seeded), 3),
            "runs": [round(s, 3) for s in burst_seeded],
        },
        "burst_cpu_s": {name: round(statistics.median(v), 2) for name, v in burst_cpu.items()},
        "decrypted": all(decrypted) if kind == "encrypted" else None,
    }


# ---------------------------------------------------------------------------- the run


async def throughput(
    base: str, synapse: Synapse, workdir: Path, n: int, *, bare_loops: bool
) -> dict[str, Any]:
    """Phases 1 to 3: the bare loop, elicitbot's posting rate, reply → answer (plaintext)."""
    bot, alice, bare_user = (synapse.register(p) for p in ("elicitbot", "alice", "barebot"))
    room = await make_room(base, alice, [bot, bare_user])
    bare_room = await make_room(base, alice, [bare_user])

    url = f"sqlite:///{workdir / 'elicitbot.db'}"
    upgrade(url)
    store = SqlStore.from_url(url)
    clock = SystemClock()
    chat = MatrixChat(make_client(base, bot.user_id, bot.device_id, bot.access_token))
    dispatcher = Dispatcher(store, clock, {"matrix": chat}, {}, lambda key: f"http://x/#{key}")
    answers = Answers(dispatcher)
    service = Service(
        store,
        clock,
        People(admins=frozenset({f"matrix:{alice.user_id}"})),
        [Route(destinations=(f"matrix:{room}",))],
        on_change=answers,
    )
    listener = MatrixListener(chat, service, store, device_id=bot.device_id)
    stop = asyncio.Event()
    loop_task = asyncio.create_task(dispatcher.run(stop, idle_seconds=0.05))

    async def settle() -> None:
        await until_done(store)
        await listener.drain()

    bare: list[float] = []
    try:
        # The bare loop sends exactly the content elicitbot posts for the options fixture.
        sample = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
        view = PromptView(sample, Status.PENDING, None, 1, "http://x/#k", clock.now())
        content = message_content(view)
        if bare_loops:
            bare.append(await bare_loop(base, bare_user, bare_room, content, n, "a"))
        options_seconds, options = await post_all(service, store, n, "options")
        text_seconds, texts = await post_all(service, store, n, "free-text")
        if bare_loops:
            bare.append(await bare_loop(base, bare_user, bare_room, content, n, "b"))
        answers.times.clear()
        await listener.start()
        quiet = await reply_latencies(base, alice, room, options, answers, settle)
        busy = await reply_latencies(base, alice, room, texts, answers, None)
    finally:
        await listener.stop()
        stop.set()
        dispatcher.wake()
        await loop_task
        await chat.client.close()
        await store.close()

    options_rate = n / options_seconds
    text_rate = n / text_seconds
    result: dict[str, Any] = {
        "posted": sum(1 for d in options + texts if d.state == "posted"),
        "elicitbot_per_second": round(options_rate, 1),
        "elicitbot_seconds": round(options_seconds, 3),
        "events_per_elicitation": 1 + SEEDS,
        "message_only_per_second": round(text_rate, 1),
    }
    if bare:
        bare_rate = n / statistics.mean(bare)
        result |= {
            "bare_per_second": round(bare_rate, 1),
            "bare_seconds": [round(b, 3) for b in bare],
            "ratio": round(options_rate / bare_rate, 3),
            "event_ratio": round((1 + SEEDS) * options_rate / bare_rate, 3),
            "message_only_ratio": round(text_rate / bare_rate, 3),
            "goal_ratio": 0.8,
        }
    return result | {
        "reply_to_answer_ms": summary(quiet),
        "reply_to_answer_back_to_back_ms": summary(busy),
        "goal_p50_ms": 100,
    }


async def rooms(
    base: str, synapse: Synapse, workdir: Path, kinds: list[str], **options: Any
) -> dict[str, Any]:
    """Phase 4: the plaintext and the encrypted room, one after the other, one person."""
    user = synapse.register("person")
    bots = {kind: synapse.register(f"bot-{kind}") for kind in kinds}
    made = {
        kind: await make_room(base, user, [bots[kind]], encrypted=kind == "encrypted")
        for kind in kinds
    }
    person = await Person.start(base, user, workdir / "person")
    results: dict[str, Any] = {}
    try:
        for kind in kinds:
            stack = await Stack.start(base, kind, bots[kind], user, made[kind], workdir)
            try:
                assert synapse.process is not None
                me = os.getpid()
                stats = {  # the bot's event loop is its main thread; the rest, SQL on threads
                    "bot": f"/proc/{me}/stat",
                    "bot_loop": f"/proc/{me}/task/{me}/stat",
                    "synapse": f"/proc/{synapse.process.pid}/stat",
                    "person": f"/proc/{person.process.pid}/stat",
                }
                results[kind] = await room_phase(stack, person, stats=stats, **options)
            finally:
                await stack.close()
    finally:
        await person.stop()
    out: dict[str, Any] = {"rooms": results}
    if {"plaintext", "encrypted"} <= results.keys():
        plain, crypt = results["plaintext"], results["encrypted"]
        out["encrypted_over_plaintext"] = {
            figure: over(crypt[figure]["p50"], plain[figure]["p50"])
            for figure in (
                "post_to_visible_ms",
                "reply_to_answer_ms",
                "burst_visible_s",
                "burst_seeded_s",
            )
        }
    return out | {
        "burst": options["burst"],
        "bursts": options["bursts"],
        "goal_burst_visible_s": 0.8,
        "person_undecrypted": person.undecrypted,
        "person_limited_batches": person.limited,
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    (workdir / "synapse").mkdir(exist_ok=True)
    synapse = Synapse(workdir / "synapse")
    synapse.start()
    result: dict[str, Any] = {"bench": "matrix_post"}
    try:
        base = synapse.base_url
        if not args.skip_throughput:
            result |= {"n": args.n}
            result |= await throughput(
                base, synapse, workdir, args.n, bare_loops=not args.skip_bare
            )
        kinds = [k for k in args.rooms.split(",") if k]
        if kinds:
            result |= {"latency_n": args.latency_n}
            result |= await rooms(
                base,
                synapse,
                workdir,
                kinds,
                latency_n=args.latency_n,
                burst=args.burst,
                bursts=args.bursts,
                profile=args.profile,
            )
    finally:
        synapse.stop()
    return result | {"python": sys.version.split()[0]}


def main() -> None:
    logs.configure("WARNING")  # stderr: stdout carries the one JSON line
    if len(sys.argv) == 3 and sys.argv[1] == "--person":  # the person's process (see rooms())
        spec = json.loads(sys.argv[2])
        Path(spec["store"]).mkdir(parents=True, exist_ok=True)
        asyncio.run(person_main(spec))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="elicitations in the throughput phases")
    parser.add_argument("--latency-n", type=int, default=50, help="posts and replies per room")
    parser.add_argument("--burst", type=int, default=50, help="elicitations in one burst")
    parser.add_argument("--bursts", type=int, default=5, help="bursts per room")
    parser.add_argument("--rooms", default="plaintext,encrypted", help="'' to skip phase 4")
    parser.add_argument("--skip-bare", action="store_true", help="no bare loop (no ratios)")
    parser.add_argument("--skip-throughput", action="store_true", help="phase 4 only")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the bursts")
    args = parser.parse_args()
    for kind in args.rooms.split(","):
        if kind and kind not in ("plaintext", "encrypted"):
            parser.error(f"--rooms: {kind!r} is neither plaintext nor encrypted")
    with tempfile.TemporaryDirectory(prefix="elicitbot-matrix-bench-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

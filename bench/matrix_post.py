"""Matrix benchmark: elicitbot's posting path against a bare matrix-nio send loop, one Synapse.

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

``ratio`` = elicitbot elicitations/s ÷ bare messages/s (goal ≥ 0.8); ``event_ratio`` counts
events instead (4 per elicitation); reply p50 goal ≤ 100 ms. Prints one JSON line (logs go to
stderr). Synapse is started here (PyPI ``matrix-synapse``; ``SYNAPSE_PYTHON``).

    .venv/bin/python bench/matrix_post.py [--n 200]
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import nio  # noqa: E402

from adapters.matrix import MatrixChat, MatrixListener, make_client  # noqa: E402
from adapters.matrix.render import message_content  # noqa: E402
from adapters.sources.superpipeline.parse import parse_body  # noqa: E402
from bench.figures import percentile  # noqa: E402 - after the path
from bot import logs  # noqa: E402
from bot.clock import SystemClock  # noqa: E402
from bot.domain.model import People, Route, Status  # noqa: E402
from bot.domain.ports import PromptView  # noqa: E402
from bot.domain.records import DeliveryView  # noqa: E402
from bot.outbox import Dispatcher  # noqa: E402
from bot.service import Inbound, Service  # noqa: E402
from store.db import upgrade  # noqa: E402
from store.sql import SqlStore  # noqa: E402
from tests.synapse import Synapse, http_json  # noqa: E402
from tests.unit.sources.superpipeline_fixtures import VALID  # noqa: E402


async def make_room(base: str, owner: Any, members: list[Any]) -> str:
    reply = http_json(
        f"{base}/_matrix/client/v3/createRoom",
        {"preset": "private_chat", "invite": [m.user_id for m in members]},
        token=owner.access_token,
    )
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
    """The service's change hook: when each answer was committed."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.times: list[float] = []
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.times.append(time.perf_counter())
        self.event.set()
        self.dispatcher.wake()


async def until_done(store: SqlStore) -> None:
    """Every outbox row done (or failed); polled every 20 ms."""
    while True:
        if all(r.state in ("done", "failed") for r in await store.outbox()):
            return
        await asyncio.sleep(0.02)


async def post_all(
    service: Service, store: SqlStore, n: int, case: str
) -> tuple[float, list[DeliveryView]]:
    """Take N elicitations of fixture ``case`` in and wait until the dispatcher posted them."""
    inbound = []
    for i in range(n):
        data = copy.deepcopy(VALID[case])
        data["elicitationId"] = f"eli_{case}_{i:05d}"
        inbound.append(Inbound("ce:/bench", f"{case}-{i}", parse_body(data, workspace="acme"), {}))
    outcomes = await service.intake(inbound)
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
            sent = time.perf_counter()
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


async def run(n: int, workdir: Path) -> dict[str, Any]:
    (workdir / "synapse").mkdir(exist_ok=True)
    synapse = Synapse(workdir / "synapse")
    synapse.start()
    try:
        base = synapse.base_url
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

        try:
            # The bare loop sends exactly the content elicitbot posts for the options fixture.
            sample = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
            view = PromptView(sample, Status.PENDING, None, 1, "http://x/#k", clock.now())
            content = message_content(view)
            bare = [await bare_loop(base, bare_user, bare_room, content, n, "a")]
            options_seconds, options = await post_all(service, store, n, "options")
            text_seconds, texts = await post_all(service, store, n, "free-text")
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
    finally:
        synapse.stop()

    bare_rate = n / statistics.mean(bare)
    options_rate = n / options_seconds
    text_rate = n / text_seconds
    return {
        "bench": "matrix_post",
        "n": n,
        "posted": sum(1 for d in options + texts if d.state == "posted"),
        "bare_per_second": round(bare_rate, 1),
        "bare_seconds": [round(b, 3) for b in bare],
        "elicitbot_per_second": round(options_rate, 1),
        "elicitbot_seconds": round(options_seconds, 3),
        "ratio": round(options_rate / bare_rate, 3),
        "events_per_elicitation": 4,
        "event_ratio": round(4 * options_rate / bare_rate, 3),
        "message_only_per_second": round(text_rate, 1),
        "message_only_ratio": round(text_rate / bare_rate, 3),
        "goal_ratio": 0.8,
        "reply_to_answer_ms": summary(quiet),
        "reply_to_answer_back_to_back_ms": summary(busy),
        "goal_p50_ms": 100,
        "python": sys.version.split()[0],
    }


def main() -> None:
    logs.configure("WARNING")  # stderr: stdout carries the one JSON line
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="elicitbot-matrix-bench-") as tmp:
        result = asyncio.run(run(args.n, Path(tmp)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

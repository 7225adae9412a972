"""``python -m bot serve`` with Matrix on, against the real Synapse: a burst of questions routed to
one room is claimed as one chain and posted together (a platform that sets no pace), in the
process the command builds, not in a dispatcher a test put together. The burst is larger than
the dispatcher's concurrency (16), so one chain means the chain is one unit of the claim.

The chain is read from the dispatcher's ``outbox.chain`` debug line (one per chain claimed, with
its lane and size); the posts themselves from what the homeserver holds.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.superpipeline.parse import CE_TYPE
from tests.synapse import Cast, Homeserver
from tests.unit.sources.superpipeline_fixtures import VALID

pytestmark = pytest.mark.slow

BURST = 24
START_TIMEOUT_S = 30.0
POST_TIMEOUT_S = 30.0
BATCH = "application/cloudevents-batch+json"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def event(i: int) -> dict[str, Any]:
    data = copy.deepcopy(VALID["options"])
    data["elicitationId"] = f"eli_chain{i:08d}"
    return {
        "specversion": "1.0",
        "id": f"evt-chain-{i:04d}",
        "source": "/superpipeline/chain-test",
        "type": CE_TYPE,
        "subject": "evt.acme.superpipeline.elicitation.pending",
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "data": data,
    }


def log_events(path: Path, name: str) -> list[dict[str, Any]]:
    """The JSON log lines of ``serve`` whose event is ``name``."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == name:
            found.append(record)
    return found


class Serve:
    """``python -m bot serve -c cfg.toml`` in ``cwd``, its JSON logs (at DEBUG) in a file there."""

    def __init__(self, cwd: Path, config: str, env: dict[str, str]) -> None:
        self.log = cwd / "serve.log"
        (cwd / "cfg.toml").write_text(config, encoding="utf-8")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot", "serve", "-c", "cfg.toml"],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env, "ELICITBOT_LOG_LEVEL": "DEBUG"},
            )

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    async def ready(self, base: str) -> None:
        """Until ``/readyz`` answers 200 (the Matrix listener has synced)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        async with httpx.AsyncClient(timeout=5.0) as client:
            while True:
                if self.proc.poll() is not None:
                    pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.logs()}")
                try:
                    if (await client.get(f"{base}/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"serve not ready after {START_TIMEOUT_S} s:\n{self.logs()}")
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


async def test_serve_posts_a_burst_to_a_matrix_room_as_one_chain(
    tmp_path: Path, homeserver: Homeserver, cast: Cast
) -> None:
    room = await homeserver.make_room(cast.alice, [cast.bot, cast.agent])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = (
        f'[server]\nlisten = "127.0.0.1:{port}"\nlog_format = "json"\n\n'
        f'[store]\nurl = "sqlite:///{tmp_path / "elicitbot.db"}"\n\n'
        f'[matrix]\nhomeserver = "{homeserver.base_url}"\nuser_id = "{cast.bot.user_id}"\n'
        f'access_token_env = "CHAIN_TEST_MATRIX_TOKEN"\ndevice_id = "{cast.bot.device_id}"\n\n'
        f'[[routes]]\ndestinations = ["matrix:{room}"]\n'
    )
    serve = Serve(tmp_path, config, {"CHAIN_TEST_MATRIX_TOKEN": cast.bot.access_token})
    try:
        await serve.ready(base)
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.post(
                f"{base}/v1/events",
                content=json.dumps([event(i) for i in range(BURST)]).encode(),
                headers={"Content-Type": BATCH},
            )
        assert response.status_code == 202, response.text

        async def posted() -> list[dict[str, Any]]:
            return [
                e
                for e in await homeserver.messages(cast.alice, room)
                if e["type"] == "m.room.message" and e["sender"] == cast.bot.user_id
            ]

        deadline = time.monotonic() + POST_TIMEOUT_S
        while len(await posted()) < BURST:
            if time.monotonic() > deadline:
                pytest.fail(f"{BURST} questions not in the room:\n{serve.logs()}")
            await asyncio.sleep(0.1)
    finally:
        serve.stop()

    assert len(await posted()) == BURST
    chains = [
        e for e in log_events(serve.log, "outbox.chain") if e["lane"] == f"chat:matrix:{room}"
    ]
    sizes = [e["size"] for e in chains]
    # The burst came in one commit: its posts were claimed together, as one chain.
    assert sizes == [BURST], serve.logs()

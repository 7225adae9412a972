"""Issue 26: the database out of reach. A running Elicitbot on PostgreSQL reaches it through a TCP
proxy the test controls; ``down()`` kills every open connection and refuses new ones, ``up()``
listens again. Intake and reads answer 503 with ``Retry-After`` and a problem+json naming the
cause, the log says once that the outage began and once that it ended (no traceback per
request), the metric counts the refusals, and the same event is accepted once the store is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from bot.app.config import AppConfig, StoreConfig
from bot.app.wiring import Elicitbot
from tests.conftest import FakeClock
from tests.integration.test_http_intake import STRUCTURED, envelope

PROBLEM = "application/problem+json"


class Proxy:
    """A TCP forwarder to PostgreSQL that can be cut (connections killed, new ones refused)."""

    def __init__(self, upstream: tuple[str, int] = ("127.0.0.1", 5432)) -> None:
        self.upstream = upstream
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            writer.transport.abort()  # a reset, as when the server is killed
        self._open.clear()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._open |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        with contextlib.suppress(asyncio.CancelledError):  # the loop closing at teardown
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._open -= {writer, up_writer}


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    p = Proxy()
    await p.up()
    try:
        yield p
    finally:
        if p._server is not None:
            await p.down()


@pytest.fixture
async def bot(pg_url: str, proxy: Proxy, clock: FakeClock) -> AsyncIterator[Elicitbot]:
    url = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    assert url != pg_url
    b = Elicitbot(AppConfig(store=StoreConfig(url=url)), environ={}, clock=clock)
    await b.start()
    try:
        yield b
    finally:
        if proxy._server is None:
            await proxy.up()
        await b.stop()


async def post(client: httpx.AsyncClient, ident: str) -> httpx.Response:
    return await client.post(
        "/v1/events",
        content=json.dumps(envelope(id=ident)).encode(),
        headers={"Content-Type": STRUCTURED},
    )


def has_traceback(entry: MutableMapping[str, Any]) -> bool:
    return bool(entry.get("exc_info")) or entry.get("log_level") in ("error", "critical")


@pytest.mark.slow
async def test_intake_and_reads_answer_503_while_the_store_is_out_then_202(
    bot: Elicitbot, proxy: Proxy
) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=bot.asgi()), base_url="http://elicitbot.test"
    ) as client:
        assert (await post(client, "ce-before")).status_code == 202
        with capture_logs() as logs:
            await proxy.down()
            refused = [await post(client, f"ce-{n}") for n in range(10)]
            refused.append(await client.get("/v1/elicitations"))
            refused.append(await client.get("/v1/elicitations/superpipeline:eli_1a2b3c4d5e6f7081"))
            refused.append(await client.get("/"))  # the web inbox
            assert (await client.get("/healthz")).status_code == 200  # touches no store
            assert (await client.get("/readyz")).status_code == 503
            await asyncio.sleep(3)  # the dispatcher's loop turns a few times meanwhile
            await proxy.up()
            back = await post(client, "ce-3")
            stop = time.monotonic() + 10
            while not [e for e in logs if e["event"] == "store.reachable"]:
                assert time.monotonic() < stop, "the end of the outage is logged"
                await client.get("/healthz")
                await asyncio.sleep(0.05)
        metrics = (await client.get("/metrics")).text
        again = await post(client, "ce-3")

    for response in refused:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        assert response.headers["content-type"].startswith(PROBLEM)
        problem = response.json()
        assert problem["status"] == 503
        assert problem["cause"] == "the database is not reachable"
        assert "not reachable" in problem["detail"]
    assert back.status_code == 202, back.text
    http = [e for e in logs if e["event"].startswith(("store.", "http."))]
    print("\n".join(f"{e['log_level']} {e['event']} {e}" for e in http))
    assert [e["event"] for e in http] == ["store.unreachable", "store.reachable"]
    assert http[1]["refused"] == len(refused)
    assert not [e for e in logs if e["event"] == "http.unhandled"]
    assert not [e for e in http if has_traceback(e)]
    # The loops that keep running meanwhile (the dispatcher, the deadline sweep) say it once
    # each, however many turns they take: at most the first failure of each with its traceback.
    tracebacks = [e["event"] for e in logs if has_traceback(e)]
    print(f"tracebacks during the outage: {tracebacks}")
    assert len(tracebacks) == len(set(tracebacks)) <= 3, tracebacks
    assert f"elicitbot_store_unavailable_total {float(len(refused))}" in metrics
    assert again.status_code == 200, "accepted once: the same event again is a duplicate"

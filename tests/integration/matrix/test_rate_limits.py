"""MatrixChat on a stand-in homeserver: 429s honoured or handed back to the outbox, and a
homeserver that is down."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp import web

from adapters.matrix import MatrixChat, make_client
from bot.domain.errors import TransientDeliveryError

# --------------------------------------------------------------------------- 429 handling


class Throttling:
    """A homeserver stand-in answering ``PUT …/send`` with scripted 429s, then an event id."""

    def __init__(self, script: list[tuple[dict[str, str], dict[str, Any]]]) -> None:
        self.script = script
        self.times: list[float] = []

    async def send(self, request: web.Request) -> web.Response:
        self.times.append(time.monotonic())
        if self.script:
            headers, body = self.script.pop(0)
            return web.json_response(
                {"errcode": "M_LIMIT_EXCEEDED", "error": "Too Many Requests", **body},
                status=429,
                headers=headers,
            )
        return web.json_response({"event_id": f"$ev{len(self.times)}"})


async def serve(handler: Throttling) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_put("/_matrix/client/r0/rooms/{room}/send/{type}/{txn}", handler.send)
    app.router.add_put("/_matrix/client/v3/rooms/{room}/send/{type}/{txn}", handler.send)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("headers", "body", "least", "most"),
    [
        ({"Retry-After": "1"}, {}, 1.0, 1.5),
        ({}, {"retry_after_ms": 300}, 0.3, 0.8),
        ({"Retry-After": "0.5"}, {"retry_after_ms": 4000}, 0.5, 1.0),
    ],
    ids=["retry-after-header", "retry-after-ms", "header-wins"],
)
async def test_a_429_waits_as_the_server_says_then_succeeds(
    headers: dict[str, str], body: dict[str, Any], least: float, most: float
) -> None:
    throttle = Throttling([(headers, body)])
    runner, url = await serve(throttle)
    chat = MatrixChat(make_client(url, "@b:localhost", "DEV", "secret-token"))
    try:
        event_id = await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t1", "post")
    finally:
        await chat.client.close()
        await runner.cleanup()

    assert event_id == "$ev2"
    assert least <= throttle.times[1] - throttle.times[0] < most


async def test_a_long_or_endless_429_goes_back_to_the_outbox_with_its_delay() -> None:
    throttle = Throttling([({"Retry-After": "30"}, {})] + [({}, {"retry_after_ms": 10})] * 10)
    runner, url = await serve(throttle)
    chat = MatrixChat(make_client(url, "@b:localhost", "DEV", "secret-token"))
    try:
        started = time.monotonic()
        with pytest.raises(TransientDeliveryError) as long_wait:
            await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t1", "post")
        assert time.monotonic() - started < 1.0, "a 30 s Retry-After is not slept in place"
        assert long_wait.value.retry_after == 30.0
        assert len(throttle.times) == 1

        with pytest.raises(TransientDeliveryError) as endless:
            await chat.send("!r:localhost", "m.room.message", {"body": "x"}, "t2", "post")
        assert len(throttle.times) == 1 + 4, "bounded: the first try and three retries"
        assert endless.value.retry_after == 0.01
        assert "secret-token" not in str(endless.value)
    finally:
        await chat.client.close()
        await runner.cleanup()


async def test_the_homeserver_down_is_a_transient_error_at_once() -> None:
    from tests.synapse import free_port

    chat = MatrixChat(make_client(f"http://127.0.0.1:{free_port()}", "@b:l", "DEV", "tok"))
    try:
        started = time.monotonic()
        with pytest.raises(TransientDeliveryError, match="ClientConnectorError"):
            await chat.send("!r:l", "m.room.message", {"body": "x"}, "t", "post")
        assert time.monotonic() - started < 2.0
    finally:
        await chat.client.close()

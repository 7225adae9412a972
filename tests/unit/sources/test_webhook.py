"""The one webhook client every answer sink posts through: the reply mapped to done/retry/fail."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from adapters.shared.webhook import Receiver, post_json
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError

URL = "https://receiver.example/hook"
RECEIVER = Receiver.named("test receiver")
SECRET = {"value": "s3cret"}

Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def replying(status: int, text: str = "", **headers: str) -> Handler:
    return lambda _: httpx.Response(status, text=text, headers=headers)


async def test_posts_json_with_the_idempotency_key_and_the_callers_headers() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"ok": True})

    async with client(handler) as c:
        response = await post_json(
            c,
            URL,
            {"a": 1},
            idempotency_key="key-1",
            receiver=RECEIVER,
            headers={"Authorization": "Bearer t"},
        )
    assert response.json() == {"ok": True}
    [request] = seen
    assert request.method == "POST"
    assert json.loads(request.content) == {"a": 1}
    assert request.headers["idempotency-key"] == "key-1"
    assert request.headers["authorization"] == "Bearer t"
    assert request.headers["content-type"] == "application/json"


async def test_409_is_done_only_where_the_caller_says_so() -> None:
    async with client(replying(409, "have it")) as c:
        done = await post_json(
            c, URL, {}, idempotency_key="k", receiver=RECEIVER, conflict_is_done=True
        )
        assert done.status_code == 409
        with pytest.raises(PermanentDeliveryError, match="answered HTTP 409: have it"):
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER)


@pytest.mark.parametrize(("status", "retry_after"), [(429, 7.0), (500, None), (503, 2.5)])
async def test_429_and_5xx_are_transient_with_the_retry_after(
    status: int, retry_after: float | None
) -> None:
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    async with client(replying(status, **headers)) as c:
        with pytest.raises(TransientDeliveryError) as caught:
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER)
    assert str(caught.value) == f"test receiver answered HTTP {status}"
    assert caught.value.retry_after == retry_after


async def test_a_retry_after_that_is_not_seconds_is_ignored() -> None:
    async with client(replying(503, **{"Retry-After": "soon"})) as c:
        with pytest.raises(TransientDeliveryError) as caught:
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER)
    assert caught.value.retry_after is None


async def test_a_connection_error_is_transient_and_names_the_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with client(handler) as c:
        with pytest.raises(TransientDeliveryError) as caught:
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER)
    assert str(caught.value) == "test receiver unreachable: ConnectError"
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


async def test_another_4xx_is_permanent_quoting_the_start_of_the_body() -> None:
    async with client(replying(422, "x" * 500)) as c:
        with pytest.raises(PermanentDeliveryError) as caught:
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER)
    assert str(caught.value) == "test receiver answered HTTP 422: " + "x" * 200


async def test_read_refusals_hands_a_4xx_back_but_still_raises_transient() -> None:
    async with client(replying(404, '{"error": "gone"}')) as c:
        response = await post_json(
            c, URL, {}, idempotency_key="k", receiver=RECEIVER, read_refusals=True
        )
        assert response.status_code == 404
    async with client(replying(502)) as c:
        with pytest.raises(TransientDeliveryError):
            await post_json(c, URL, {}, idempotency_key="k", receiver=RECEIVER, read_refusals=True)


async def test_confidential_keeps_the_request_and_the_reply_out_of_errors() -> None:
    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with client(unreachable) as c:
        with pytest.raises(TransientDeliveryError) as caught:
            await post_json(
                c,
                URL,
                {"value": "s3cret"},
                idempotency_key="k",
                receiver=RECEIVER,
                confidential=True,
            )
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    async with client(replying(400, "echo: s3cret")) as c:
        with pytest.raises(PermanentDeliveryError) as refused:
            await post_json(
                c,
                URL,
                {"value": "s3cret"},
                idempotency_key="k",
                receiver=RECEIVER,
                confidential=True,
            )
    assert "s3cret" not in str(refused.value)


def test_receiver_wording_is_the_callers() -> None:
    custom = Receiver("hook down: {error}", "hook said {status}")
    assert custom.unreachable.format(error="ConnectError") == "hook down: ConnectError"
    assert custom.answered.format(status=503) == "hook said 503"

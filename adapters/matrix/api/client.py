"""The nio client the Matrix adapter shares, and :func:`call`, the one way a request is made.

nio's defaults retry a 429 forever (5 s whatever ``Retry-After`` says) and connection failures
forever; here nio gives every failure back at once and :func:`call` retries a 429 a bounded
number of times honouring ``Retry-After``. With a pickle key the crypto store is *not loaded*
here: the Matrix lease holder restores it (:mod:`adapters.matrix.e2ee.crypto`); until then
``client.olm`` is None. Requests time out (``request_timeout``), so none can hang a shutdown.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from nio import AsyncClient, AsyncClientConfig, ErrorResponse
from nio.store import SqliteStore

from adapters.matrix.e2ee.client import EncryptingClient
from adapters.matrix.errors import errcode, from_exception, from_response
from bot.domain.errors import DeliveryError, PermanentDeliveryError, TransientDeliveryError

log = structlog.get_logger("elicitbot.matrix")

T = TypeVar("T")

REQUEST_TIMEOUT = 20.0
MAX_RETRIES = 3
"""429s retried in place, at most; then the outbox reschedules with the server's delay."""
MAX_INLINE_WAIT = 5.0
"""A longer ``Retry-After`` is not slept here: the outbox retries after it instead."""


def make_client(
    homeserver: str,
    user_id: str,
    device_id: str,
    access_token: str,
    *,
    pickle_key: str | None = None,
) -> AsyncClient:
    """An ``AsyncClient`` on the configured access token and fixed device: never a login, so the
    device, its keys and the homeserver's transaction-id dedupe survive restarts. ``pickle_key``:
    encryption on (the store's directory comes with its restore); nio writes no sync token (the
    listener writes each *handled* batch's)."""
    encrypted = pickle_key is not None
    config = AsyncClientConfig(
        max_limit_exceeded=0,
        max_timeouts=0,
        request_timeout=REQUEST_TIMEOUT,
        encryption_enabled=encrypted,
        store_sync_tokens=False,
        **({"store": SqliteStore, "pickle_key": pickle_key} if encrypted else {}),
    )
    kind = EncryptingClient if encrypted else AsyncClient
    client = kind(
        homeserver.rstrip("/"), user_id, device_id=device_id, store_path="", config=config
    )
    client.user_id = user_id
    client.device_id = device_id
    client.access_token = access_token
    return client


async def call(
    what: str,
    request: Callable[[], Awaitable[Any]],
    ok: type[T],
    *,
    max_retries: int = MAX_RETRIES,
    max_inline_wait: float = MAX_INLINE_WAIT,
    accept: frozenset[str] = frozenset(),
) -> T | None:
    """Make a nio request; return the response when it is an ``ok``, None for an errcode in
    ``accept``; otherwise raise the mapped DeliveryError. A 429 whose delay is at most
    ``max_inline_wait`` is retried here, ``max_retries`` times at most."""
    for attempt in range(max_retries + 1):
        try:
            response = await request()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # nio raises aiohttp/timeout errors: mapped, never leaked
            raise from_exception(what, exc) from exc
        if isinstance(response, ok):
            return response
        if isinstance(response, ErrorResponse) and errcode(response) in accept:
            return None
        error: DeliveryError = (
            from_response(what, response)
            if isinstance(response, ErrorResponse)
            else PermanentDeliveryError(f"matrix {what}: unexpected {type(response).__name__}")
        )
        wait = error.retry_after if isinstance(error, TransientDeliveryError) else None
        if wait is None or wait > max_inline_wait or attempt == max_retries:
            raise error
        log.info("matrix.rate_limited", call=what, wait=round(wait, 3), attempt=attempt + 1)
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def send_json(
    client: AsyncClient, method: str, path: str, body: Any
) -> tuple[int, dict[str, Any]]:
    """A client-server request nio has no method for (``path`` under ``/_matrix/client/v3``):
    the HTTP status and the JSON reply ({} when it is not an object)."""
    response = await client.send(
        method,
        f"/_matrix/client/v3{path}",
        json.dumps(body),
        headers={
            "Authorization": f"Bearer {client.access_token}",
            "Content-Type": "application/json",
        },
    )
    try:
        reply = await response.json(content_type=None)
    finally:
        response.release()
    return int(response.status), reply if isinstance(reply, dict) else {}

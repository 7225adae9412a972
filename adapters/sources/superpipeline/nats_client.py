"""The NATS connection both SuperPipeline NATS parts use: connect (bounded), and small helpers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NatsClient

_log = structlog.get_logger("elicitbot.nats")


async def connect(url: str, *, name: str, give_up_after: float, **callbacks: Any) -> Any:
    """A NATS client that reconnects forever once connected, but gives up connecting at first
    after ``give_up_after`` seconds (nats-py alone would retry that forever too)."""
    nc = NatsClient()
    callbacks.setdefault("error_cb", _log_error)
    try:
        await asyncio.wait_for(
            nc.connect(
                url,
                name=name,
                max_reconnect_attempts=-1,
                reconnect_time_wait=2,
                connect_timeout=max(1, min(int(give_up_after), 5)),
                **callbacks,
            ),
            give_up_after,
        )
    except BaseException:
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await nc.close()
        raise
    return nc


def described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def _log_error(exc: Exception) -> None:
    _log.warning("nats.error", error=described(exc))


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def stream_of(js: Any, subject: str) -> str | None:
    """The stream that stores ``subject``, or None. Asked of the JetStream API: a publish cannot
    tell, as a core subscriber takes the request, never replies, and the publish times out."""
    try:
        return str(await js.find_stream_name_by_subject(subject))
    except (nats.js.errors.NotFoundError, nats.js.errors.ServiceUnavailableError):
        return None

"""What the cached lookups (people, groups) share: one shielded call per key for every caller
meanwhile, and a pause of every lookup while Slack rate-limits the method or refuses the app
(:data:`APP_WIDE`). Logs name Slack's code, never the request (it carries the token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Generic, TypeVar

from slack_sdk.errors import SlackApiError

from adapters.slack.errors import (
    APP_WIDE,
    HTTP_TOO_MANY_REQUESTS,
    RATE_LIMITED,
    api_error,
    retry_after,
)
from bot.clock import SystemClock
from bot.domain.ports import Clock

V = TypeVar("V")

RATE_LIMIT_WAIT = timedelta(seconds=60)
"""How long to stay away after a 429 that names no ``Retry-After``."""


@dataclass(frozen=True)
class Entry(Generic[V]):
    """A cached lookup's value and until when it is believed."""

    value: V
    until: datetime


class Failure(Enum):
    RATE_LIMITED = "rate_limited"
    """Every lookup paused until the ``Retry-After``."""
    APP = "app"
    """Every lookup paused: an error every lookup would get alike."""
    ONE = "one"
    """This lookup only."""


@dataclass(frozen=True)
class Said:
    """How one kind of lookup logs what stops every lookup of its kind."""

    log: Any  # its module's structlog logger
    rate_limited: str
    refused: str
    scope_missing: str
    scope: str
    effect: str
    """What a missing scope means for the people using elicitbot."""


class Lookups(Generic[V]):
    def __init__(
        self, said: Said, *, clock: Clock | None, pause: timedelta, timeout: float
    ) -> None:
        self.said = said
        self.clock: Clock = clock or SystemClock()
        self.pause = pause  # how long an error of the app's own stops every lookup
        self.timeout = timeout
        self._pending: dict[str, asyncio.Task[V]] = {}
        self._paused_until: datetime | None = None  # a 429's Retry-After, a missing scope
        self._scope_logged = False

    def paused(self, now: datetime) -> bool:
        return self._paused_until is not None and now < self._paused_until

    async def shared(self, key: str, look_up: Callable[[], Coroutine[Any, Any, V]]) -> V:
        """``look_up()``'s result, with every caller asking for ``key`` meanwhile."""
        task = self._pending.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(look_up())
            self._pending[key] = task
            task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task)

    def _done(self, key: str, task: asyncio.Task[V]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]

    def failed(self, exc: SlackApiError) -> tuple[Failure, str | None, int | None]:
        """A lookup Slack refused: pauses every lookup when that is what it calls for (logged);
        returns which kind of failure, Slack's error code and the HTTP status."""
        status, code, headers = api_error(exc)
        now, said = self.clock.now(), self.said
        if status == HTTP_TOO_MANY_REQUESTS or code in RATE_LIMITED:
            seconds = retry_after(headers)
            wait = timedelta(seconds=seconds) if seconds is not None else RATE_LIMIT_WAIT
            self._paused_until = now + wait
            said.log.info(said.rate_limited, retry_after=wait.total_seconds())
            return Failure.RATE_LIMITED, code, status
        if code not in APP_WIDE:
            return Failure.ONE, code, status
        self._paused_until = now + self.pause
        if code != "missing_scope":
            said.log.warning(said.refused, error=code)
        elif not self._scope_logged:
            self._scope_logged = True
            said.log.warning(
                said.scope_missing,
                scope=said.scope,
                effect=said.effect,
                fix=f"add the bot scope {said.scope} to the Slack app and reinstall it",
            )
        return Failure.APP, code, status

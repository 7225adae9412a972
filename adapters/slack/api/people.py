"""Slack people's display names (``users.info``), cached, for "Answered by Alice" on every copy.
Failures are soft (the surface shows the id); a known name stays in use while a refresh fails.
``missing_scope``, token errors and a 429 stop every lookup (limits are per method and workspace).
Logs name the user id and Slack's code, never the request (it carries the token).
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from datetime import timedelta
from typing import Any, Protocol

import structlog
from slack_sdk.errors import SlackApiError

from adapters.slack.api.cached import Entry, Failure, Lookups, Said
from bot.domain.model import Identity
from bot.domain.ports import Clock

log = structlog.get_logger("elicitbot.slack.people")

SCOPE = "users:read"
TTL = timedelta(hours=1)
"""How long a name is used before it is asked for again (people rename themselves rarely)."""
FAILURE_TTL = timedelta(minutes=5)
"""How long a failed lookup (or a missing scope) is remembered before Slack is asked again."""
MAX_PEOPLE = 5_000
LOOKUP_TIMEOUT = 3.0
"""Seconds a lookup may take; the action waits for it (after the ack), then goes on unnamed."""
MAX_NAME = 80
"""Slack's own limit on a display name; longer text is cut."""

_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,}$")
_SAID = Said(
    log,
    rate_limited="slack.names_rate_limited",
    refused="slack.names_refused",
    scope_missing="slack.users_read_missing",
    scope=SCOPE,
    effect="people are shown by their Slack id, not their name",
)


class UsersInfo(Protocol):
    """What :class:`SlackNames` needs of ``slack_sdk``'s ``AsyncWebClient``."""

    async def users_info(self, *, user: str) -> Any: ...


def name_of(user: Any) -> str | None:
    """The name to show for a ``users.info`` ``user`` object."""
    if not isinstance(user, dict):
        return None
    profile = user.get("profile")
    profile = profile if isinstance(profile, dict) else {}
    for value in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()[:MAX_NAME]
    return None


class SlackNames:
    def __init__(
        self,
        client: UsersInfo,
        *,
        clock: Clock | None = None,
        ttl: timedelta = TTL,
        failure_ttl: timedelta = FAILURE_TTL,
        size: int = MAX_PEOPLE,
        timeout: float = LOOKUP_TIMEOUT,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self.size = size
        self._cache: OrderedDict[str, Entry[str | None]] = OrderedDict()
        self._lookups: Lookups[str | None] = Lookups(
            _SAID, clock=clock, pause=failure_ttl, timeout=timeout
        )
        self.clock = self._lookups.clock

    async def identify(self, who: Identity) -> Identity:
        """``who`` with its Slack display name; none when unknown (shown by id, which Slack
        shows as a mention), never the payload's legacy username. Non-Slack users: unchanged."""
        if who.platform != "slack" or not _USER_ID.match(who.user):
            return who
        name = await self.name(who.user)
        if name == who.display_name:
            return who
        return who.model_copy(update={"display_name": name})

    async def name(self, user: str) -> str | None:
        """None: unknown for now."""
        now = self.clock.now()
        entry = self._cache.get(user)
        if entry is not None and now < entry.until:
            self._cache.move_to_end(user)
            return entry.value
        stale = entry.value if entry is not None else None
        if self._lookups.paused(now):
            return stale
        return await self._lookups.shared(user, lambda: self._look_up(user, stale))

    def __len__(self) -> int:
        return len(self._cache)

    async def _look_up(self, user: str, stale: str | None) -> str | None:
        try:
            async with asyncio.timeout(self._lookups.timeout):
                response = await self.client.users_info(user=user)
        except SlackApiError as exc:
            failure, code, status = self._lookups.failed(exc)
            if failure is Failure.RATE_LIMITED:
                return stale
            if failure is Failure.ONE:
                log.info("slack.name_unknown", user=user, error=code or "error", status=status)
            return self._keep(user, stale, self.failure_ttl)
        except Exception as exc:  # a timeout, the network, anything: never fails an action
            log.info("slack.name_unknown", user=user, error=type(exc).__name__)
            return self._keep(user, stale, self.failure_ttl)
        name = name_of(response.get("user"))
        if name is None:
            log.info("slack.name_unknown", user=user, error="no_name")
            return self._keep(user, stale, self.failure_ttl)
        return self._keep(user, name, self.ttl)

    def _keep(self, user: str, name: str | None, ttl: timedelta) -> str | None:
        self._cache[user] = Entry(name, self.clock.now() + ttl)
        self._cache.move_to_end(user)
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return name

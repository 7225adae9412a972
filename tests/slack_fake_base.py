"""The fake Slack API's state and what every part of it uses: the call record, the lock, the
clock that stamps a ``ts``, channel errors. :class:`tests.slack_fake.FakeSlack` is this plus its
messages (:mod:`tests.slack_fake_messages`) and modals, files, response URLs and Socket Mode
(:mod:`tests.slack_fake_modals`)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_TOKEN = "xoxb-test-elicitbot"
DEFAULT_APP_TOKEN = "xapp-1-test-elicitbot"
BOT_USER = "U0ELICITBOT"
BOT_ID = "B0ELICITBOT"
TEAM_ID = "T0ACME"
SCOPES = frozenset(
    {
        "chat:write",
        "commands",
        "channels:history",
        "groups:history",
        "im:history",
        "mpim:history",
        "im:write",
        "metadata.message:read",
        "users:read",
        "usergroups:read",
        "files:write",
    }
)
"""The bot scopes the repository's manifest asks for: the token's, unless a test changes them."""


@dataclass(frozen=True)
class SlackCall:
    """One request to the fake, and what it answered."""

    method: str
    params: dict[str, Any]
    """Query, form and JSON parameters together; ``blocks``/``metadata`` strings parsed."""
    headers: dict[str, str]
    """Header names lower-cased."""
    status: int
    response: dict[str, Any] | None
    """None when the connection was dropped."""
    at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.response is not None and bool(self.response.get("ok"))


@dataclass
class _Script:
    method: str
    status: int
    error: str | None
    retry_after: float | None
    drop: bool
    delay: float
    times: int
    where: Callable[[Mapping[str, Any]], bool] | None = None
    """Only calls whose parameters this accepts take the script (None: every call)."""


class FakeState:
    """What the fake keeps; every part reads and writes it under ``_lock``."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        app_token: str = DEFAULT_APP_TOKEN,
        port: int = 0,
        record: Path | None = None,
        on_call: Callable[[SlackCall], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token = token
        self._clock = clock
        self._last_micros = 0
        self.app_token = app_token
        self._views: list[dict[str, Any]] = []
        self._current_views: dict[str, dict[str, Any]] = {}
        """Every view by id as it stands now (opened, pushed, updated)."""
        self._view_updates: list[dict[str, Any]] = []
        self._pushed: list[dict[str, Any]] = []
        self._files: dict[str, dict[str, Any]] = {}
        self._triggers: dict[str, float] = {}
        self._hooks: dict[str, dict[str, Any]] = {}
        self._storms: dict[str, tuple[float, float]] = {}
        self._limits: dict[str, tuple[float, int]] = {}
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_acks: list[dict[str, Any]] = []
        self._socket_connects = 0
        self._port = port
        self._record = record
        self._on_call = on_call
        self._lock = threading.Lock()
        self._calls: list[SlackCall] = []
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._ephemerals: list[dict[str, Any]] = []
        self._scripts: list[_Script] = []
        self.unknown_channels: set[str] = set()
        """Channels that answer ``channel_not_found``."""
        self.archived_channels: set[str] = set()
        self.scopes: set[str] = set(SCOPES)
        """The bot token's scopes (``x-oauth-scopes``; a method needing another: missing_scope)."""
        self._usergroups: dict[str, list[str]] = {}
        self._handles: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_url(self) -> str:
        """What ``base_url`` of the SDK client must be (with the trailing slash)."""
        return f"{self.base_url}/api/"

    def calls(self) -> list[SlackCall]:
        with self._lock:
            return list(self._calls)

    def _log(self, call: SlackCall) -> None:
        with self._lock:
            self._calls.append(call)
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(call), ensure_ascii=False) + "\n")
        if self._on_call is not None:
            self._on_call(call)

    def _channel_error(self, channel: Any) -> str | None:
        if not isinstance(channel, str) or not channel or channel in self.unknown_channels:
            return "channel_not_found"
        if channel in self.archived_channels:
            return "is_archived"
        return None

    def _next_ts(self) -> str:
        with self._lock:
            return self._stamp()

    def _stamp(self) -> str:
        """Now as a ``ts``, later than every one before (call it under the lock)."""
        micros = max(round(self._clock() * 1_000_000), self._last_micros + 1)
        self._last_micros = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

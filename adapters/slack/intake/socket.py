"""Socket Mode (``[slack] app_token_env`` set): events over a websocket we open, no public URL.
An interaction that could not be recorded is answered 503, which Bolt's handler does not ack.
One replica only: Slack sends each envelope to one random connection and drops those to a dead one.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp

from adapters.slack.errors import from_slack
from bot.domain.errors import (
    ConfigError,
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)

log = structlog.get_logger("elicitbot.slack.socket")

CONNECT_TIMEOUT = 30.0


class SlackSocket:
    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        *,
        ping_interval: float = 10.0,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        if not app_token.startswith("xapp-"):
            raise PermanentDeliveryError("Socket Mode needs an app-level token (xapp-…)")
        self.app = app
        self._token = app_token
        self.ping_interval = ping_interval
        self.connect_timeout = connect_timeout
        self._handler: AsyncSocketModeHandler | None = None

    async def start(self) -> None:
        """Returns once connected (the client reconnects by itself later). The token is checked
        first with one ``apps.connections.open``: the SDK would retry a refused one forever."""
        if self._handler is not None:
            return
        try:
            opened = await self.app.client.apps_connections_open(app_token=self._token)
        except Exception as exc:  # mapped: the token is refused, or Slack does not answer
            raise from_slack("apps.connections.open", exc) from exc
        url = opened.get("url")
        if not isinstance(url, str) or not url:
            raise PermanentDeliveryError("slack apps.connections.open: the answer has no url")
        quiet = logging.getLogger("elicitbot.slack.socket_mode")
        quiet.setLevel(logging.WARNING)  # at DEBUG the client logs every envelope
        handler = AsyncSocketModeHandler(
            self.app, self._token, logger=quiet, ping_interval=self.ping_interval
        )
        handler.client.wss_uri = url
        try:
            await asyncio.wait_for(
                handler.connect_async(),  # type: ignore[no-untyped-call]
                self.connect_timeout,
            )
        except TimeoutError:
            await handler.close_async()  # type: ignore[no-untyped-call]
            raise TransientDeliveryError(
                f"slack socket mode: no connection within {self.connect_timeout:.0f} s"
            ) from None
        self._handler = handler
        log.info("slack.socket_connected")

    @property
    def lease(self) -> str:
        """The lease that gives one replica this app's connection: named by the app."""
        return f"slack-socket:{app_of(self._token)}"

    async def check_token(self, env: str) -> None:
        """One ``apps.connections.open`` at start on every replica: a refused app-level token
        (from the variable ``env``) stops the start, named, also on a replica that will not
        hold the connection."""
        try:
            await self.app.client.apps_connections_open(app_token=self._token)
        except Exception as exc:  # mapped: the token is refused, or Slack does not answer
            raise _config_error(from_slack("apps.connections.open", exc), env) from None

    async def hold(self, env: str) -> None:
        """The lease holder's connection: open until the lease is lost or we stop."""
        try:
            await self.start()
        except DeliveryError as exc:
            raise _config_error(exc, env) from None
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    def connected(self) -> bool:
        """For ``/readyz`` (synchronous): the websocket is open and not stale."""
        handler = self._handler
        if handler is None:
            return False
        client = handler.client
        session = client.current_session
        return not client.closed and not client.stale and session is not None and not session.closed

    async def stop(self) -> None:
        handler, self._handler = self._handler, None
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]
            log.info("slack.socket_closed")


def app_of(app_token: str) -> str:
    """The app an app-level token belongs to (``xapp-1-<app id>-…``); a token of another shape
    is named by a digest of it (never the token itself)."""
    parts = app_token.split("-")
    if len(parts) > 3 and parts[2].startswith("A"):  # noqa: PLR2004 - xapp, version, app id, …
        return parts[2]
    return hashlib.sha256(app_token.encode()).hexdigest()[:16]


def _config_error(error: DeliveryError, env: str) -> ConfigError:
    if isinstance(error, PermanentDeliveryError):
        return ConfigError(
            f"slack.app_token_env: Slack refused the app-level token in {env} ({error})"
        )
    return ConfigError(f"slack.api_url: Socket Mode did not connect ({error})")

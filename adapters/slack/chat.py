"""The Slack :class:`~bot.domain.ports.ChatAdapter`: post, update and private notices.

Destinations are ``slack:<channel id>``, or ``slack:<user id>`` (``U…``/``W…``) for a DM, opened
with ``conversations.open``. ``chat.postMessage`` has no idempotency key, so every post carries
message metadata naming its elicitation and its outbox key; an *uncertain* post (an earlier
attempt may have reached Slack: a crash, a dropped connection) first looks for that metadata in
the channel's recent history and adopts the message it finds instead of posting again.

The client must not retry on its own: build it with ``retry_handlers=[]``. slack_sdk's default
connection-error retry resends a ``chat.postMessage`` whose connection dropped after Slack took
it, posting twice (reliability.md §1.5); the outbox retries instead, as an uncertain post.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.errors import from_slack
from adapters.slack.render import EVENT_TYPE, clip, escape, metadata, render
from bot.domain.errors import PermanentDeliveryError
from bot.domain.ports import MessageRef, Notice, PromptView

log = structlog.get_logger("elicitbot.slack")

HISTORY_LIMIT = 100
NOTICE_TEXT = 4000


class SlackChat:
    platform = "slack"

    def __init__(self, client: AsyncWebClient, *, history_limit: int = HISTORY_LIMIT) -> None:
        self.client = client
        self.history_limit = history_limit
        self.bot_user_id: str | None = None
        self._dms: dict[str, str] = {}

    async def verify(self) -> str:
        """``auth.test``: the token works; returns the bot's user id (raises a DeliveryError)."""
        response = await self._call("auth.test", self.client.auth_test())
        user_id = response.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise PermanentDeliveryError("slack auth.test: the answer has no user_id")
        self.bot_user_id = user_id
        log.info("slack.verified", user_id=user_id, team_id=response.get("team_id"))
        return user_id

    # ------------------------------------------------------------------ ChatAdapter

    async def post(
        self, destination: str, view: PromptView, *, idempotency_key: str, uncertain: bool
    ) -> MessageRef:
        channel = await self._channel(destination)
        text, blocks = render(view)
        if uncertain:
            ts = await self._find(channel, idempotency_key)
            if ts is not None:
                log.info("slack.post_adopted", channel=channel, ts=ts, key=idempotency_key)
                await self._refresh(channel, ts, text, blocks)
                return {"channel": channel, "ts": ts}
        response = await self._call(
            "chat.postMessage",
            self.client.chat_postMessage(
                channel=channel,
                text=text,
                blocks=blocks,
                metadata=metadata(view.elicitation.key, idempotency_key),
                unfurl_links=False,
                unfurl_media=False,
            ),
        )
        ts = response.get("ts")
        if not isinstance(ts, str) or not ts:
            raise PermanentDeliveryError("slack chat.postMessage: the answer has no ts")
        posted_in = response.get("channel")
        if isinstance(posted_in, str) and posted_in:
            channel = posted_in
        return {"channel": channel, "ts": ts}

    async def update(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        channel, ts = ref.get("channel"), ref.get("ts")
        if not isinstance(channel, str) or not isinstance(ts, str):
            raise PermanentDeliveryError(f"slack chat.update: {ref!r} is not a Slack message ref")
        text, blocks = render(view)
        await self._call(
            "chat.update", self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
        )

    async def notify(self, destination: str, notice: Notice, *, idempotency_key: str) -> None:
        platform, _, user = notice.user.partition(":")
        if platform != "slack" or not user:
            raise PermanentDeliveryError(f"slack chat.postEphemeral: {notice.user!r} is not slack")
        channel = await self._channel(destination)
        thread_ts = (notice.thread or {}).get("ts")
        await self._call(
            "chat.postEphemeral",
            self.client.chat_postEphemeral(
                channel=channel,
                user=user,
                text=clip(escape(notice.text), NOTICE_TEXT),
                thread_ts=thread_ts if isinstance(thread_ts, str) and thread_ts else None,
            ),
        )

    # ------------------------------------------------------------------ helpers

    async def _call(self, method: str, call: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
        try:
            return await call
        except Exception as exc:  # mapped: every failure is a Transient/PermanentDeliveryError
            raise from_slack(method, exc) from exc

    async def _channel(self, destination: str) -> str:
        """The channel id to post in: the destination's, or the DM opened with its user."""
        platform, _, target = destination.partition(":")
        if platform != "slack" or not target:
            raise PermanentDeliveryError(f"{destination!r} is not a Slack destination")
        if not target.startswith(("U", "W")):
            return target
        known = self._dms.get(target)
        if known is not None:
            return known
        response = await self._call(
            "conversations.open", self.client.conversations_open(users=target)
        )
        opened = response.get("channel")
        channel = opened.get("id") if isinstance(opened, Mapping) else None
        if not isinstance(channel, str) or not channel:
            raise PermanentDeliveryError("slack conversations.open: the answer has no channel id")
        self._dms[target] = channel
        return channel

    async def _find(self, channel: str, idempotency_key: str) -> str | None:
        """The ts of the message an earlier attempt posted with this key, if Slack has it."""
        try:
            response = await self._call(
                "conversations.history",
                self.client.conversations_history(
                    channel=channel, limit=self.history_limit, include_all_metadata=True
                ),
            )
        except PermanentDeliveryError as exc:
            # No history scope (or similar): posting again risks a duplicate, not posting loses it.
            log.warning("slack.history_unavailable", channel=channel, error=str(exc))
            return None
        messages = response.get("messages")
        for message in messages if isinstance(messages, list) else []:
            if _posted_with(message, idempotency_key):
                ts = message.get("ts")
                return ts if isinstance(ts, str) and ts else None
        return None

    async def _refresh(self, channel: str, ts: str, text: str, blocks: list[Any]) -> None:
        """Bring an adopted message to the current view (it may show an older one)."""
        try:
            await self._call(
                "chat.update",
                self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks),
            )
        except PermanentDeliveryError as exc:
            log.warning("slack.adopted_not_updated", channel=channel, ts=ts, error=str(exc))


def _posted_with(message: Any, idempotency_key: str) -> bool:
    if not isinstance(message, Mapping):
        return False
    meta = message.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("event_type") != EVENT_TYPE:
        return False
    payload = meta.get("event_payload")
    return isinstance(payload, Mapping) and payload.get("post") == idempotency_key

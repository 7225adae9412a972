"""The Slack :class:`~bot.domain.ports.ChatAdapter`: post, update and private notices.

Destinations are ``slack:<channel id>``, or ``slack:<user id>`` (``U…``/``W…``) for a DM, opened
with ``conversations.open``. ``chat.postMessage`` has no idempotency key, so every post carries
message metadata naming its elicitation and its outbox key; an *uncertain* post (an earlier
attempt may have reached Slack: a crash, a dropped connection) first looks for that metadata in
the channel's recent history and adopts the message it finds instead of posting again.

The client must not retry on its own: build it with ``retry_handlers=[]``. slack_sdk's default
connection-error retry resends a ``chat.postMessage`` whose connection dropped after Slack took
it, posting twice; the outbox retries instead, as an uncertain post. With a
:class:`~adapters.slack.pacing.Pacer`, every call waits for its turn (one post per second per
channel, an update budget per workspace, nothing on a key during a 429's ``Retry-After``), updates
of one message still waiting are coalesced, and the client gets the pacer's 429 retry handler
(a 429 is never carried out, so retrying it cannot double-post).

A posted message's ref is a :class:`~bot.domain.refs.SlackRef` (channel, ts); its ``key``
(``<channel>/<ts>``) is what :meth:`~bot.domain.ports.Elicitations.key_for_message` finds a
thread reply's elicitation by.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

import structlog
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.blocks import clip, escape
from adapters.slack.errors import from_slack
from adapters.slack.pacing import PacedRetryHandler, Pacer
from adapters.slack.render import EVENT_TYPE, metadata, render
from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.ports import Notice, PromptView
from bot.domain.records import NoticeKind
from bot.domain.refs import MessageRef, SlackRef

log = structlog.get_logger("elicitbot.slack")

HISTORY_LIMIT = 100
NOTICE_TEXT = 4000
ANY_WORKSPACE = "*"


class SlackChat:
    platform = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        history_limit: int = HISTORY_LIMIT,
        pacer: Pacer | None = None,
    ) -> None:
        self.client = client
        self.history_limit = history_limit
        self.pacer = pacer
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self.enterprise_id: str | None = None
        self._dms: dict[str, str] = {}
        if pacer is not None and not any(
            isinstance(h, PacedRetryHandler) for h in client.retry_handlers
        ):
            client.retry_handlers.append(PacedRetryHandler(pacer))

    async def verify(self) -> str:
        """``auth.test``: the token works; returns the bot's user id (raises a DeliveryError).

        Also keeps the bot id and the workspace (team) id: the Bolt app's precomputed
        authorization and the self-event filter need them."""
        response = await self._call("auth.test", ANY_WORKSPACE, self.client.auth_test)
        user_id = response.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise PermanentDeliveryError("slack auth.test: the answer has no user_id")
        self.bot_user_id = user_id
        self.bot_id = _text(response.get("bot_id"))
        self.team_id = _text(response.get("team_id"))
        self.enterprise_id = _text(response.get("enterprise_id"))
        log.info("slack.verified", user_id=user_id, team_id=self.team_id, bot_id=self.bot_id)
        return user_id

    @property
    def workspace(self) -> str:
        """The scope of per-workspace budgets: the team id once verified."""
        return self.team_id or ANY_WORKSPACE

    # ------------------------------------------------------------------ ChatAdapter

    async def post(
        self, destination: str, view: PromptView, *, idempotency_key: str, uncertain: bool
    ) -> SlackRef:
        channel = await self._channel(destination)
        text, blocks = render(view)
        if uncertain:
            ts = await self._find(channel, idempotency_key)
            if ts is not None:
                log.info("slack.post_adopted", channel=channel, ts=ts, key=idempotency_key)
                await self._refresh(channel, ts, text, blocks)
                return SlackRef(channel, ts)
        response = await self._call(
            "chat.postMessage",
            channel,
            lambda: self.client.chat_postMessage(
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
        return SlackRef(channel, ts)

    async def update(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        if not isinstance(ref, SlackRef):
            raise PermanentDeliveryError(f"slack chat.update: {ref!r} is not a Slack message ref")
        channel, ts = ref.channel, ref.ts
        text, blocks = render(view)
        await self._call(
            "chat.update",
            self.workspace,
            lambda: self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks),
            item=(channel, ts),
        )

    async def notify(self, destination: str, notice: Notice, *, idempotency_key: str) -> None:
        if notice.kind is NoticeKind.REMINDER or not notice.user:
            await self._remind(destination, notice)
            return
        platform, _, user = notice.user.partition(":")
        if platform != "slack" or not user:
            raise PermanentDeliveryError(f"slack chat.postEphemeral: {notice.user!r} is not slack")
        channel = await self._channel(destination)
        await self.ephemeral(channel, user, notice.text, thread_ts=_thread_ts(notice))

    async def _remind(self, destination: str, notice: Notice) -> None:
        """A reminder: a public reply in the copy's thread that pings the route's Slack people."""
        channel = await self._channel(destination)
        thread_ts = _thread_ts(notice)
        if thread_ts is None:
            raise PermanentDeliveryError("slack reminder: the copy has no message to reply under")
        mentions = " ".join(
            f"<@{ident.partition(':')[2]}>"
            for ident in notice.mentions
            if ident.startswith("slack:") and ident.partition(":")[2][:1] in ("U", "W")
        )
        text = escape(notice.text) + (f" {mentions}" if mentions else "")
        await self.say(channel, text, thread_ts=thread_ts)

    # ------------------------------------------------------------------ for the interactive app

    async def ephemeral(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None
    ) -> None:
        """A message only ``user`` sees (``text`` is plain: it is escaped here)."""
        await self._call(
            "chat.postEphemeral",
            self.workspace,
            lambda: self.client.chat_postEphemeral(
                channel=channel,
                user=user,
                text=clip(escape(text), NOTICE_TEXT),
                thread_ts=thread_ts,
            ),
        )

    async def say(self, channel: str, mrkdwn: str, *, thread_ts: str) -> str | None:
        """Post ready-made mrkdwn (already escaped) in a thread; returns its ts."""
        response = await self._call(
            "chat.postMessage",
            channel,
            lambda: self.client.chat_postMessage(
                channel=channel,
                text=clip(mrkdwn, NOTICE_TEXT),
                thread_ts=thread_ts,
                unfurl_links=False,
                unfurl_media=False,
            ),
        )
        return _text(response.get("ts"))

    async def open_view(self, trigger_id: str, view: Mapping[str, Any]) -> None:
        """``views.open`` (a modal); the trigger id is good for 3 seconds, once."""
        await self._call(
            "views.open",
            self.workspace,
            lambda: self.client.views_open(trigger_id=trigger_id, view=dict(view)),
        )

    # ------------------------------------------------------------------ helpers

    async def _call(
        self,
        method: str,
        scope: str,
        call: Callable[[], Awaitable[AsyncSlackResponse]],
        *,
        item: Hashable | None = None,
    ) -> AsyncSlackResponse:
        """One Web API call, paced on (method, scope) when there is a pacer; ``item`` names the
        message an update rewrites, so a newer update of it replaces one still waiting."""
        try:
            if self.pacer is None:
                return await call()
            if item is not None:
                return await self.pacer.send_latest((method, scope), item, call)
            return await self.pacer.send((method, scope), call)
        except DeliveryError:
            raise
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
            "conversations.open",
            self.workspace,
            lambda: self.client.conversations_open(users=target),
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
                self.workspace,
                lambda: self.client.conversations_history(
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
                self.workspace,
                lambda: self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks),
                item=(channel, ts),
            )
        except PermanentDeliveryError as exc:
            log.warning("slack.adopted_not_updated", channel=channel, ts=ts, error=str(exc))


def _thread_ts(notice: Notice) -> str | None:
    """The ts of the Slack message whose thread a notice goes in (None: not a Slack message)."""
    thread = notice.thread
    return thread.ts if isinstance(thread, SlackRef) and thread.ts else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _posted_with(message: Any, idempotency_key: str) -> bool:
    if not isinstance(message, Mapping):
        return False
    meta = message.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("event_type") != EVENT_TYPE:
        return False
    payload = meta.get("event_payload")
    return isinstance(payload, Mapping) and payload.get("post") == idempotency_key

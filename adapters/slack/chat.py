"""The Slack :class:`~bot.domain.ports.ChatAdapter`: post, update and private notices.

Destinations are ``slack:<channel id>``, or ``slack:<U…/W…>`` for a DM (``conversations.open``).
``chat.postMessage`` has no idempotency key, so a post or public notice carries metadata naming its
outbox key, and an uncertain one (an earlier attempt may have reached Slack) first looks for it
since the first attempt (:mod:`adapters.slack.api.lookup`) and adopts what it finds. Slack keeps no
ephemeral notice to look up: an uncertain one is sent again.

Build the client with ``retry_handlers=[]``: slack_sdk's connection-error retry would resend a
post Slack took, posting twice; the outbox retries instead. With a
:class:`~adapters.slack.api.pacing.Pacer` every call waits its turn, updates of one waiting message
coalesce, and the client gets the pacer's 429 retry handler (a 429 is never carried out);
``slots`` (the store) shares the rates among replicas.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.api import lookup
from adapters.slack.api.lookup import LOOKUP_MARGIN, PAGE_SIZE
from adapters.slack.api.pacing import POST_RATE, PacedRetryHandler, Pacer
from adapters.slack.api.scopes import oauth_scopes
from adapters.slack.errors import api_error, from_slack
from adapters.slack.markup.blocks import clip, escape
from adapters.slack.render import metadata, notice_metadata, render
from adapters.slack.translate import text_of
from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.model import Destination
from bot.domain.ports import Notice, PromptView
from bot.domain.records import NoticeKind
from bot.domain.refs import MessageRef, SlackRef
from bot.domain.store import Pacing

log = structlog.get_logger("elicitbot.slack")

NOTICE_TEXT = 4000
ANY_WORKSPACE = "*"


class SlackChat:
    platform = "slack"
    post_interval = POST_RATE.interval
    seeds = False
    """A Slack copy is answered by its buttons: nothing to seed."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        pacer: Pacer | None = None,
        slots: Pacing | None = None,
        page_size: int = PAGE_SIZE,
        lookup_margin: timedelta = LOOKUP_MARGIN,
    ) -> None:
        """``slots``: rates shared with the other replicas (the store); given without a
        ``pacer``, a default Pacer is made for them; given with one that has none, it takes
        them."""
        self.client = client
        if slots is not None:
            if pacer is None:
                pacer = Pacer(slots=slots)
            elif pacer.slots is None:
                pacer.slots = slots
        self.pacer = pacer
        self.page_size = page_size
        self.lookup_margin = lookup_margin
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.team_id: str | None = None
        self.enterprise_id: str | None = None
        self.scopes: frozenset[str] | None = None
        """The token's scopes, as auth.test's ``x-oauth-scopes`` header says (None: unsaid)."""
        self._dms: dict[str, str] = {}
        if pacer is not None and not any(
            isinstance(h, PacedRetryHandler) for h in client.retry_handlers
        ):
            client.retry_handlers.append(PacedRetryHandler(pacer))

    async def verify(self) -> str:
        """``auth.test``: returns the bot's user id (else a DeliveryError); keeps the bot and team
        ids for the Bolt app's precomputed authorization and the self-event filter."""
        response = await self._call("auth.test", ANY_WORKSPACE, self.client.auth_test)
        user_id = response.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise PermanentDeliveryError("slack auth.test: the answer has no user_id")
        self.bot_user_id = user_id
        self.bot_id = text_of(response.get("bot_id"))
        self.team_id = text_of(response.get("team_id"))
        self.enterprise_id = text_of(response.get("enterprise_id"))
        self.scopes = oauth_scopes(response.headers)
        log.info("slack.verified", user_id=user_id, team_id=self.team_id, bot_id=self.bot_id)
        return user_id

    @property
    def workspace(self) -> str:
        """The scope of per-workspace budgets: the team id once verified."""
        return self.team_id or ANY_WORKSPACE

    async def post(
        self,
        destination: Destination,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> SlackRef:
        channel = await self._channel(destination)
        text, blocks = render(view)
        if uncertain is not None:
            ts = await self._find(channel, idempotency_key, uncertain)
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
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        if not isinstance(ref, SlackRef):
            raise PermanentDeliveryError(f"slack chat.update: {ref!r} is not a Slack message ref")
        await self._rewrite(ref.channel, ref.ts, *render(view))

    async def notify(
        self,
        destination: Destination,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        if notice.kind is NoticeKind.REMINDER or not notice.user:
            await self._remind(destination, notice, idempotency_key, uncertain)
            return
        user = notice.user.user
        if notice.user.platform != "slack" or not user:
            raise PermanentDeliveryError(f"slack chat.postEphemeral: {notice.user!r} is not slack")
        channel = await self._channel(destination)
        await self.ephemeral(channel, user, notice.text, thread_ts=_thread_ts(notice))

    async def _remind(
        self,
        destination: Destination,
        notice: Notice,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> None:
        """A reminder: a public reply in the copy's thread that pings the route's Slack people,
        tagged with its outbox key; an uncertain one is first looked for in that thread."""
        channel = await self._channel(destination)
        thread_ts = _thread_ts(notice)
        if thread_ts is None:
            raise PermanentDeliveryError("slack reminder: the copy has no message to reply under")
        if uncertain is not None:
            found = await self._find(channel, idempotency_key, uncertain, thread_ts=thread_ts)
            if found is not None:
                log.info("slack.notice_adopted", channel=channel, ts=found, key=idempotency_key)
                return
        mentions = " ".join(
            f"<@{ident.user}>"
            for ident in notice.mentions
            if ident.platform == "slack" and ident.user[:1] in ("U", "W")
        )
        text = escape(notice.text) + (f" {mentions}" if mentions else "")
        await self.say(
            channel,
            text,
            thread_ts=thread_ts,
            metadata=notice_metadata(idempotency_key),
            gives_way=False,  # a reminder is due now: it takes its turn like a question
        )

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

    async def say(
        self,
        channel: str,
        mrkdwn: str,
        *,
        thread_ts: str,
        metadata: Mapping[str, Any] | None = None,
        gives_way: bool = True,
    ) -> str | None:
        """Post ready-made mrkdwn (already escaped) in a thread; returns its ts. ``metadata``
        (:func:`~adapters.slack.render.notice_metadata`) lets a repeat find it. ``gives_way``: a
        note (who answered) takes only a turn of the channel's one post a second that none of
        its questions and reminders wants (:meth:`~adapters.slack.api.pacing.Pacer.send`)."""
        extra: dict[str, Any] = {"metadata": dict(metadata)} if metadata is not None else {}
        response = await self._call(
            "chat.postMessage",
            channel,
            lambda: self.client.chat_postMessage(
                channel=channel,
                text=clip(mrkdwn, NOTICE_TEXT),
                thread_ts=thread_ts,
                unfurl_links=False,
                unfurl_media=False,
                **extra,
            ),
            gives_way=gives_way,
        )
        return text_of(response.get("ts"))

    async def open_view(self, trigger_id: str, view: Mapping[str, Any]) -> OpenedView:
        """``views.open`` (a modal); the trigger id is good for 3 seconds, once."""
        return await self._view_call(
            "views.open", lambda: self.client.views_open(trigger_id=trigger_id, view=dict(view))
        )

    async def push_view(self, trigger_id: str, view: Mapping[str, Any]) -> OpenedView:
        """``views.push``: a modal on top of the one the trigger came from (at most three)."""
        return await self._view_call(
            "views.push", lambda: self.client.views_push(trigger_id=trigger_id, view=dict(view))
        )

    async def seed(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        """Nothing to seed: a Slack copy carries its buttons (:attr:`seeds`)."""

    async def update_view(
        self, view_id: str, view: Mapping[str, Any], *, view_hash: str | None = None
    ) -> OpenedView:
        """``views.update`` of an open modal. ``view_hash``: the hash the update is based on; a
        modal changed since answers ``hash_conflict`` (:func:`view_conflict`), so two quick
        clicks cannot each rewrite it."""
        return await self._view_call(
            "views.update",
            lambda: self.client.views_update(view_id=view_id, hash=view_hash, view=dict(view)),
        )

    async def upload_snippet(
        self, channel: str, thread_ts: str, *, filename: str, title: str, content: str
    ) -> str | None:
        """Share ``content`` as a text file in a thread (slack_sdk's ``files_upload_v2``); returns
        the file id. Needs the ``files:write`` scope."""
        response = await self._call(
            "files.completeUploadExternal",
            channel,
            lambda: self.client.files_upload_v2(
                channel=channel,
                thread_ts=thread_ts,
                filename=filename,
                title=title,
                content=content,
                snippet_type="text",
            ),
        )
        shared = response.get("file")
        return text_of(shared.get("id")) if isinstance(shared, Mapping) else None

    async def thread_has_file(self, channel: str, thread_ts: str, filename: str) -> bool:
        """A file named ``filename`` was shared in the thread by this bot (False: unreadable)."""
        query: dict[str, Any] = {"channel": channel, "ts": thread_ts, "limit": self.page_size}
        return await lookup.thread_has_file(
            self._reader("conversations.replies"),
            self.client.conversations_replies,
            query,
            filename,
            (self.bot_user_id, self.bot_id),
        )

    async def _call(
        self,
        method: str,
        scope: str,
        call: Callable[[], Awaitable[AsyncSlackResponse]],
        *,
        item: Hashable | None = None,
        gives_way: bool = False,
    ) -> AsyncSlackResponse:
        """One Web API call, paced on (method, scope) when there is a pacer; ``item`` names the
        message an update rewrites, so a newer update of it replaces one still waiting;
        ``gives_way``: every other call on the key goes first."""
        try:
            if self.pacer is None:
                return await call()
            if item is not None:
                return await self.pacer.send_latest((method, scope), item, call)
            return await self.pacer.send((method, scope), call, gives_way=gives_way)
        except DeliveryError:
            raise
        except Exception as exc:  # mapped: every failure is a Transient/PermanentDeliveryError
            raise from_slack(method, exc) from exc

    async def _channel(self, destination: Destination) -> str:
        target = destination.target
        if destination.platform != "slack" or not target:
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

    async def _view_call(
        self, method: str, call: Callable[[], Awaitable[AsyncSlackResponse]]
    ) -> OpenedView:
        """A ``views.*`` call: the view's id and hash, for a later ``views.update``."""
        view = (await self._call(method, self.workspace, call)).get("view")
        if not isinstance(view, Mapping):
            return OpenedView(None, None)
        return OpenedView(text_of(view.get("id")), text_of(view.get("hash")))

    def _reader(self, method: str) -> lookup.Read:
        return functools.partial(self._call, method, self.workspace)

    async def _find(
        self,
        channel: str,
        idempotency_key: str,
        since: datetime,
        *,
        thread_ts: str | None = None,
    ) -> str | None:
        """The ts of the message an earlier attempt posted with this key since ``since`` (less the
        margin) in the channel, or with ``thread_ts`` that thread."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        fetch = (
            functools.partial(self.client.conversations_replies, ts=thread_ts)
            if thread_ts
            else self.client.conversations_history
        )
        query: dict[str, Any] = {
            "channel": channel,
            "oldest": lookup.slack_ts(since - self.lookup_margin),
            "include_all_metadata": True,
            "limit": self.page_size,
        }
        return await lookup.find_posted(self._reader(method), fetch, query, idempotency_key)

    async def _rewrite(self, channel: str, ts: str, text: str, blocks: list[Any]) -> None:
        await self._call(
            "chat.update",
            self.workspace,
            lambda: self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks),
            item=(channel, ts),
        )

    async def _refresh(self, channel: str, ts: str, text: str, blocks: list[Any]) -> None:
        """Bring an adopted message to the current view (it may show an older one)."""
        try:
            await self._rewrite(channel, ts, text, blocks)
        except PermanentDeliveryError as exc:
            log.warning("slack.adopted_not_updated", channel=channel, ts=ts, error=str(exc))


@dataclass(frozen=True)
class OpenedView:
    """A modal as Slack holds it: what ``views.update`` names it by."""

    id: str | None
    hash: str | None


def view_conflict(exc: DeliveryError) -> bool:
    """The modal changed (or closed) since the update was prepared: ``hash_conflict`` or
    ``not_found``; nothing to retry."""
    cause = exc.__cause__
    return isinstance(cause, SlackApiError) and api_error(cause)[1] in VIEW_GONE


VIEW_GONE = frozenset({"hash_conflict", "not_found", "view_not_found"})


def _thread_ts(notice: Notice) -> str | None:
    thread = notice.thread
    return thread.ts if isinstance(thread, SlackRef) and thread.ts else None

"""The uncertain-post lookup: ``chat.postMessage`` has no idempotency key, so each post carries
metadata naming its outbox key and an uncertain one first pages through the channel's history (a
notice: its thread) from :data:`LOOKUP_MARGIN` before the first attempt (Slack's clock may be
behind ours). History that cannot be read finds nothing: a possible duplicate, never a loss.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.errors import api_error
from adapters.slack.render import EVENT_TYPE, NOTICE_EVENT_TYPE
from bot.domain.errors import DeliveryError, PermanentDeliveryError

log = structlog.get_logger("elicitbot.slack")

PAGE_SIZE = 200
"""Messages per history page: Slack's advice ("no more than 200"; the most is 999)."""
LOOKUP_MARGIN = timedelta(seconds=60)
"""How far before the first attempt a lookup starts: room for our clock running ahead of
Slack's. A minute of a busy channel is at most one page more."""
OUR_EVENT_TYPES = frozenset({EVENT_TYPE, NOTICE_EVENT_TYPE})
NO_LOOKUP = frozenset({"thread_not_found"})
"""Codes that mean "nothing to find there" for a lookup (not a reason to stop the post)."""

Fetch = Callable[..., Awaitable[AsyncSlackResponse]]  # conversations.history or .replies
Read = Callable[[Callable[[], Awaitable[AsyncSlackResponse]]], Awaitable[AsyncSlackResponse]]
"""One paced, error-mapped call for one method (``SlackChat._call``)."""


async def pages(read: Read, fetch: Fetch, query: dict[str, Any]) -> AsyncGenerator[list[Any]]:
    """The messages of each page of ``fetch(**query)``, following ``next_cursor`` until it runs
    out or repeats. A failed read raises its DeliveryError (see :func:`cannot_look`)."""
    seen: set[str] = set()
    while True:
        response = await read(functools.partial(fetch, **query))
        messages = response.get("messages")
        yield messages if isinstance(messages, list) else []
        meta = response.get("response_metadata")
        cursor = meta.get("next_cursor") if isinstance(meta, Mapping) else None
        if not isinstance(cursor, str) or not cursor or cursor in seen:
            return
        seen.add(cursor)
        query["cursor"] = cursor


async def find_posted(
    read: Read, fetch: Fetch, query: dict[str, Any], idempotency_key: str
) -> str | None:
    """The ts of the message posted with ``idempotency_key`` among the pages of ``query``."""
    channel = query.get("channel")
    count = 0
    try:
        async with aclosing(pages(read, fetch, query)) as paged:
            async for messages in paged:
                count += 1
                found = next(filter(None, (_posted_ts(m, idempotency_key) for m in messages)), None)
                if found is not None:
                    log.info(
                        "slack.lookup_found", channel=channel, key=idempotency_key, pages=count
                    )
                    return found
    except DeliveryError as exc:
        if not cannot_look(exc):
            raise
        # Posting again risks a duplicate; not posting would lose it.
        log.warning("slack.history_unavailable", channel=channel, error=str(exc))
        return None
    log.info("slack.lookup_not_found", channel=channel, key=idempotency_key, pages=count)
    return None


async def thread_has_file(
    read: Read,
    fetch: Fetch,
    query: dict[str, Any],
    filename: str,
    bot: tuple[str | None, str | None],
) -> bool:
    """``bot`` (its user id and bot id) shared a file named ``filename`` in the thread of
    ``query``. False when the thread cannot be read."""
    try:
        async with aclosing(pages(read, fetch, query)) as paged:
            async for messages in paged:
                if any(_shares(message, filename, *bot) for message in messages):
                    return True
    except DeliveryError as exc:
        if not cannot_look(exc):
            raise
    return False


def slack_ts(moment: datetime) -> str:
    """A moment as a Slack timestamp (``<epoch seconds>.<microseconds>``); naive means UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    micros = round(moment.timestamp() * 1_000_000)
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def cannot_look(exc: DeliveryError) -> bool:
    """A lookup failure after which posting is the better bet: the history cannot be read
    (permanent: a missing scope, a token type) or the thread is gone."""
    if isinstance(exc, PermanentDeliveryError):
        return True
    cause = exc.__cause__
    if isinstance(cause, SlackApiError):
        return api_error(cause)[1] in NO_LOOKUP
    return False


def _posted_ts(message: Any, idempotency_key: str) -> str | None:
    if not isinstance(message, Mapping):
        return None
    meta = message.get("metadata")
    if not isinstance(meta, Mapping) or meta.get("event_type") not in OUR_EVENT_TYPES:
        return None
    payload = meta.get("event_payload")
    if not isinstance(payload, Mapping) or payload.get("post") != idempotency_key:
        return None
    ts = message.get("ts")
    return ts if isinstance(ts, str) and ts else None


def _shares(message: Any, filename: str, bot_user_id: str | None, bot_id: str | None) -> bool:
    if not isinstance(message, Mapping):
        return False
    ours = (bot_user_id is not None and message.get("user") == bot_user_id) or (
        bot_id is not None and message.get("bot_id") == bot_id
    )
    files = message.get("files")
    return (
        ours
        and isinstance(files, list)
        and any(
            isinstance(f, Mapping) and filename in (f.get("name"), f.get("title")) for f in files
        )
    )

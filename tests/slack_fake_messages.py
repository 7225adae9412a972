"""The fake Slack API's messages: posts, updates, ephemerals, DMs, and a channel's timeline as
``conversations.history`` and ``conversations.replies`` page through it (:mod:`tests.slack_fake`
says how)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tests.slack_blocks import MAX_TOTAL_TEXT, block_kit_problems, block_text_length
from tests.slack_fake_base import BOT_ID, BOT_USER, FakeState

HISTORY_LIMIT = 100
MAX_HISTORY_LIMIT = 999


class Messages(FakeState):
    def messages(self, channel: str) -> list[dict[str, Any]]:
        """The channel's stored messages, oldest first."""
        with self._lock:
            return [dict(m) for m in self._messages.get(channel, [])]

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages(channel) if m["ts"] == ts), None)

    def add_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U0SOMEONE",
        thread_ts: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Somebody else says ``text`` in ``channel`` (or in a thread): stored as a post would
        be, with no call recorded; returns its ts."""
        with self._lock:
            message: dict[str, Any] = {
                "type": "message",
                "ts": self._stamp(),
                "user": user,
                "text": text,
                "blocks": [],
            }
            if thread_ts:
                message["thread_ts"] = thread_ts
            if metadata is not None:
                message["metadata"] = dict(metadata)
            self._messages.setdefault(channel, []).append(message)
            return str(message["ts"])

    def ephemerals(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._ephemerals]

    def _content_error(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        blocks, text = params.get("blocks"), params.get("text")
        if not blocks and not text:
            return {"ok": False, "error": "no_text"}
        problems = block_kit_problems(blocks, text)
        if problems:
            return {
                "ok": False,
                "error": "invalid_blocks",
                "response_metadata": {"messages": [f"[ERROR] {p}" for p in problems]},
            }
        if block_text_length(blocks) > MAX_TOTAL_TEXT:
            return {"ok": False, "error": "msg_blocks_too_long"}
        return None

    def _post(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if (problem := self._content_error(params)) is not None:
            return problem
        message = {
            "type": "message",
            "ts": self._next_ts(),
            "user": BOT_USER,
            "bot_id": BOT_ID,
            "text": params.get("text", ""),
            "blocks": params.get("blocks") or [],
        }
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        if isinstance(params.get("metadata"), Mapping):
            message["metadata"] = dict(params["metadata"])
        with self._lock:
            self._messages.setdefault(str(channel), []).append(message)
        shown = {k: v for k, v in message.items() if k != "metadata"}
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": shown}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), params.get("ts")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if (problem := self._content_error(params)) is not None:
            return problem
        with self._lock:
            stored = next((m for m in self._messages.get(str(channel), []) if m["ts"] == ts), None)
            if stored is None:
                return {"ok": False, "error": "message_not_found"}
            stored["text"] = params.get("text", "")
            stored["blocks"] = params.get("blocks") or []
            stored["edited"] = {"user": BOT_USER, "ts": self._stamp()}
            if isinstance(params.get("metadata"), Mapping):
                stored["metadata"] = dict(params["metadata"])
        return {"ok": True, "channel": channel, "ts": ts, "text": params.get("text", "")}

    def _ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, user = params.get("channel"), params.get("user")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if not isinstance(user, str) or not user:
            return {"ok": False, "error": "user_not_found"}
        if (problem := self._content_error(params)) is not None:
            return problem
        ts = self._next_ts()
        with self._lock:
            self._ephemerals.append({**params, "message_ts": ts})
        return {"ok": True, "message_ts": ts}

    def _open_dm(self, params: dict[str, Any]) -> dict[str, Any]:
        users = str(params.get("users") or "")
        if not users or "," in users:
            return {"ok": False, "error": "user_not_found" if not users else "not_implemented"}
        return {"ok": True, "channel": {"id": f"D{users}"}}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        with self._lock:
            stored = [dict(m) for m in self._messages.get(str(channel), []) if not _is_reply(m)]
        return _timeline(stored, params, newest_first=True)

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), params.get("ts")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        with self._lock:
            stored = self._messages.get(str(channel), [])
            thread = [dict(m) for m in stored if m["ts"] == ts or m.get("thread_ts") == ts]
        if not ts or not any(m["ts"] == ts for m in thread):
            return {"ok": False, "error": "thread_not_found"}
        return _timeline(thread, params, newest_first=False)


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _ts_value(value: Any) -> Decimal | None:
    """A ``ts``-like parameter as an exact number (None: not given); ValueError if malformed."""
    if value is None or value == "":
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise ValueError(value) from exc
    if not number.is_finite():
        raise ValueError(value)
    return number


def _cursor(ts: str) -> str:
    """An opaque cursor, as Slack's look (``next_ts:<ts>`` in base64)."""
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _from_cursor(cursor: str) -> Decimal:
    try:
        text = base64.b64decode(cursor.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(cursor) from exc
    prefix, _, ts = text.partition(":")
    value = _ts_value(ts) if prefix == "next_ts" else None
    if value is None:
        raise ValueError(cursor)
    return value


def _is_reply(message: Mapping[str, Any]) -> bool:
    """In a thread and not its parent (a broadcast reply shows in the channel too)."""
    thread = message.get("thread_ts")
    return bool(thread) and thread != message["ts"] and message.get("subtype") != "thread_broadcast"


def _timeline(
    messages: list[dict[str, Any]], params: Mapping[str, Any], *, newest_first: bool
) -> dict[str, Any]:
    """One page of ``messages`` as conversations.history/replies answer it: the range
    ``oldest``..``latest`` (bounds excluded unless ``inclusive``), ordered, from ``cursor`` on,
    ``limit`` long; ``next_cursor`` and ``has_more`` when more remain."""
    bounds: dict[str, Decimal | None] = {}
    for name in ("oldest", "latest"):
        try:
            bounds[name] = _ts_value(params.get(name))
        except ValueError:
            return {"ok": False, "error": f"invalid_ts_{name}"}
    try:
        limit = int(params.get("limit") or HISTORY_LIMIT)
    except ValueError:
        return {"ok": False, "error": "invalid_limit"}
    limit = max(1, min(limit, MAX_HISTORY_LIMIT))
    inclusive = _truthy(params.get("inclusive"))
    oldest, latest = bounds["oldest"], bounds["latest"]

    def inside(ts: Decimal) -> bool:
        if oldest is not None and (ts < oldest or (ts == oldest and not inclusive)):
            return False
        return latest is None or ts < latest or (ts == latest and inclusive)

    ordered = sorted(
        (m for m in messages if inside(Decimal(m["ts"]))),
        key=lambda m: Decimal(m["ts"]),
        reverse=newest_first,
    )
    if params.get("cursor"):
        try:
            start = _from_cursor(str(params["cursor"]))
        except ValueError:
            return {"ok": False, "error": "invalid_cursor"}
        ordered = [
            m
            for m in ordered
            if (Decimal(m["ts"]) <= start if newest_first else Decimal(m["ts"]) >= start)
        ]
    page, rest = ordered[:limit], ordered[limit:]
    with_metadata = _truthy(params.get("include_all_metadata"))
    body: dict[str, Any] = {
        "ok": True,
        "messages": [
            {k: v for k, v in m.items() if with_metadata or k != "metadata"} for m in page
        ],
        "has_more": bool(rest),
    }
    if rest:
        body["response_metadata"] = {"next_cursor": _cursor(rest[0]["ts"])}
    return body

"""What is kept of an interaction before its ack (rule 4): its dedupe key and its body trimmed to
what its handling reads, never a secret, blocks, the legacy token or a ``response_url``. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from adapters.slack.modals.reply import SECRET_BLOCK
from adapters.slack.translate import first_action, mapping_of, parse_submission, text_of
from bot.domain.refs import SlackRef

RAW_CHANNEL = "slack"
"""``record_raw`` channel of the interactions recorded before their ack (see :func:`raw_key`)."""
MAX_RAW_KEY = 400
"""The ``raw_event.dedupe_key`` column's width."""


def raw_key(body: Mapping[str, Any]) -> str:
    """What makes one interaction unique, for recording it once before its ack.

    - a click (``block_actions``): its ``trigger_id``, which Slack issues afresh for every click
      (a double click is two clicks, judged twice; the same payload delivered twice is one);
      without one, the user, action and ``action_ts``;
    - a modal submission: the view's ``id`` and ``hash`` (the hash changes whenever the view does,
      so a double press on *Send* is one submission);
    - a message event: the message's ``<channel>/<ts>``, not the ``event_id``: Slack retries an
      event under its ``event_id`` but can also send one message under several event ids;
    - anything else: the ``event_id``, else a digest of the body (an identical redelivery).
    """
    kind = body.get("type")
    if kind == "block_actions":
        trigger = text_of(body.get("trigger_id"))
        action = first_action(body)
        user = text_of(mapping_of(body.get("user")).get("id"))
        key = (
            f"action:{trigger}"
            if trigger
            else f"action:{user}:{action.get('action_id')}:{action.get('action_ts')}"
        )
    elif kind == "view_submission":
        view = mapping_of(body.get("view"))
        key = f"view:{view.get('id')}:{view.get('hash') or body.get('trigger_id')}"
    elif kind == "event_callback":
        event = mapping_of(body.get("event"))
        channel, ts = text_of(event.get("channel")), text_of(event.get("ts"))
        if event.get("type") == "message" and channel and ts:
            key = f"message:{SlackRef(channel, ts).key}"
        else:
            key = f"event:{body.get('event_id')}"
    else:
        key = "body:" + _digest(body)
    return key if len(key) <= MAX_RAW_KEY else f"{key[:8]}sha256:{_digest(key)}"


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _pick(value: Any, *keys: str) -> dict[str, Any]:
    source = mapping_of(value)
    return {k: source[k] for k in keys if k in source}


def durable_click(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a click's handling reads, and nothing else (no blocks, no legacy ``token``, no
    ``response_url``: a capability to post in the channel)."""
    kept = {
        **_pick(body, "type", "trigger_id", "actions"),
        "team": _pick(body.get("team"), "id"),
        "user": _pick(body.get("user"), "id", "team_id", "name"),
        "channel": _pick(body.get("channel"), "id"),
        "container": _pick(body.get("container"), "type", "channel_id", "message_ts", "view_id"),
        "message": _pick(body.get("message"), "ts", "thread_ts", "metadata"),
        "state": _pick(body.get("state"), "values"),
    }
    if isinstance(body.get("view"), Mapping):
        kept["view"] = {
            **_pick(body.get("view"), "id", "hash", "callback_id", "private_metadata", "type"),
            "state": _pick(mapping_of(body.get("view")).get("state"), "values"),
        }
    return kept


def durable_submission(body: Mapping[str, Any]) -> dict[str, Any]:
    """A modal submission as kept: who, the view's metadata and state, never the secret box's
    value (so a replay cannot deliver a secret: :func:`kept_submission`)."""
    view = mapping_of(body.get("view"))
    values = {
        block: value
        for block, value in mapping_of(mapping_of(view.get("state")).get("values")).items()
        if block != SECRET_BLOCK
    }
    return {
        **_pick(body, "type", "trigger_id"),
        "team": _pick(body.get("team"), "id"),
        "user": _pick(body.get("user"), "id", "team_id", "name"),
        "view": {
            **_pick(view, "id", "hash", "callback_id", "private_metadata"),
            "state": {"values": values},
        },
    }


def kept_submission(
    body: Mapping[str, Any],
) -> tuple[dict[str, Any], str | None, list[dict[str, Any]], bool]:
    """A kept submission read back, and whether it was a secret's (never kept)."""
    meta, text, chosen = parse_submission(mapping_of(body.get("view")))
    return meta, text, chosen, bool(meta.get("s"))


def kept_event(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping_of(body.get("event"))


def durable_reply(body: Mapping[str, Any], *, secret: bool) -> dict[str, Any]:
    """A thread reply as kept: what :func:`read_reply` reads; under a secret question no text
    (a secret typed in the thread is refused whatever it says, and never stored)."""
    event = _pick(
        body.get("event"),
        "type",
        "subtype",
        "channel",
        "ts",
        "thread_ts",
        "user",
        "bot_id",
        "team",
        "user_team",
        *(() if secret else ("text",)),
    )
    return {**_pick(body, "type", "team_id", "event_id", "event_time"), "event": event}

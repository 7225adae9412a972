"""Block Kit pieces: mrkdwn escaping, cutting to Block Kit's limits (in code points), text objects,
buttons and selects. Pure. Every mrkdwn object is ``verbatim`` so Slack neither parses
``<!channel>``/``<@U…>``/``<url|label>`` nor expands a bare ``@here``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bot.domain.rules import OfferedOption

Block = dict[str, Any]

# Block Kit's published limits.
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_FIELDS = 10
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ID = 255
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_SELECT_OPTIONS = 100
BUTTONS_PER_BLOCK = 5

SELECT_BUDGET = 2400
"""The labels of one select share this many code points."""

_UNSAFE_URL = re.compile(r"[\s<>|\"]")


def escape(text: str) -> str:
    """Slack mrkdwn escaping: ``&``, ``<``, ``>``; nothing else is a control character."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` code points, ending with ``…`` when cut (plain text)."""
    if len(text) <= limit:
        return text
    return safe_head(text, limit - 1) + "…"


def safe_head(text: str, n: int) -> str:
    """The first ``n`` code points, not ending inside an ``&…;`` entity or on a joiner."""
    head = text[: max(n, 0)]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head.rstrip("\u200d\ufe0f")


def link(url: str) -> str:
    """A URL as mrkdwn: ``<url>`` (shown as itself, never a label) when it is a plain http(s)
    URL, else the escaped text, which cannot form a link."""
    if url.startswith(("https://", "http://")) and not _UNSAFE_URL.search(url):
        return f"<{url.replace('&', '&amp;')}>"
    return escape(url)


def cut(text: str, limit: int, full_text: str) -> str:
    """Escaped mrkdwn ``text`` in at most ``limit`` code points; when cut it ends with
    ``… (full text: <link>)``."""
    if len(text) <= limit:
        return text
    note = f"… (full text: {link(full_text)})" if full_text else "… (cut; full text in the inbox)"
    if len(note) > limit // 2:
        return safe_head(text, limit - 1) + "…"
    return safe_head(text, limit - len(note)) + note


def mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def section_block(text: str) -> Block:
    return {"type": "section", "text": mrkdwn(text)}


def context_block(text: str) -> Block:
    return {"type": "context", "elements": [mrkdwn(text)]}


def value_json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def fitting(limit: int, *candidates: dict[str, Any]) -> str:
    """The first candidate value within ``limit`` (the last one otherwise); a ``"d"`` (the
    subject digest shown) of None is left out."""
    values = [
        value_json({k: v for k, v in c.items() if k != "d" or v is not None}) for c in candidates
    ]
    return next((v for v in values if len(v) <= limit), values[-1])


def select_value(
    option_id: str, index: int, revision: int | None, digest: str | None = None
) -> str:
    """A select option's value (``≤ 150``): option id or index, revision and digest (dropped
    only when even the index form does not fit)."""
    o, i = {"o": option_id, "r": revision}, {"i": index, "r": revision}
    return fitting(MAX_OPTION_VALUE, {**o, "d": digest}, {**i, "d": digest}, o, i)


def button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    element: dict[str, Any] = {
        "type": "button",
        "text": plain(clip(text, MAX_BUTTON_TEXT)),
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        element["style"] = style
    return element


def actions_block(block_id: str, elements: list[dict[str, Any]]) -> Block:
    return {"type": "actions", "block_id": block_id, "elements": elements}


def button_rows(prefix: str, buttons: list[dict[str, Any]]) -> list[Block]:
    """``buttons`` in actions blocks of :data:`BUTTONS_PER_BLOCK`, ids ``<prefix>.0``, ``.1``…"""
    return [
        actions_block(f"{prefix}.{n}", buttons[start : start + BUTTONS_PER_BLOCK])
        for n, start in enumerate(range(0, len(buttons), BUTTONS_PER_BLOCK))
    ]


def option_text(label: str, admin_only: bool, limit: int) -> str:
    label = " ".join(label.split()) or "(no label)"
    if not admin_only:
        return clip(label, limit)
    mark = " (admin)"
    return clip(label, limit - len(mark)) + mark


def static_select(
    kind: str,
    action_id: str,
    placeholder: str,
    offered: Sequence[tuple[int, OfferedOption]],
    revision: int | None,
    digest: str | None = None,
) -> dict[str, Any]:
    """A (multi) static select of the first 100 offered options; labels share a text budget."""
    shown = offered[:MAX_SELECT_OPTIONS]
    limit = max(20, min(MAX_OPTION_TEXT, SELECT_BUDGET // max(len(shown), 1)))
    return {
        "type": kind,
        "action_id": action_id,
        "placeholder": plain(placeholder),
        "options": [
            {
                "text": plain(option_text(o.option.label, o.admin_only, limit)),
                "value": select_value(o.option.id, i, revision, digest),
            }
            for i, o in shown
        ],
    }


def text_length(blocks: Sequence[Block]) -> int:
    """All the blocks' text in code points: what Slack's cumulative limit counts."""
    return sum(_length(b) for b in blocks)


def _length(node: Any) -> int:
    if isinstance(node, dict):
        if node.get("type") in ("plain_text", "mrkdwn") and isinstance(node.get("text"), str):
            return len(node["text"])
        return sum(_length(v) for v in node.values())
    if isinstance(node, list):
        return sum(_length(v) for v in node)
    return 0

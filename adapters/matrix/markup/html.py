"""Pure pieces of every Matrix event elicitbot sends: safe text and HTML (the only links are built
here, and show their own address), mentions, sizes and the digests in transaction ids.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

WORD_JOINER = "\u2060"
REMEMBERED = 4096
"""Entries a process-local memory (:func:`remember`) keeps."""

K = TypeVar("K")
V = TypeVar("V")

_ROOM_PING = re.compile(r"@(room)\b", re.IGNORECASE)


def neutralise(text: str) -> str:
    """``@room`` cannot notify the room: a word joiner goes between ``@`` and ``room``."""
    return _ROOM_PING.sub(lambda m: f"@{WORD_JOINER}{m.group(1)}", text)


def clip(text: str, limit: int) -> str:
    """At most ``limit`` code points, ``…`` marking a cut."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return "…"[:limit]
    return text[: limit - 1] + "…"


def esc(text: str) -> str:
    """Agent text as HTML: escaped, ``@room`` neutralised."""
    return html.escape(neutralise(text), quote=True)


def esc_lines(text: str) -> str:
    return "<br/>".join(esc(line) for line in text.split("\n"))


def safe_url(url: str | None) -> str | None:
    """An ``http(s)`` URL with a host, or None (``javascript:``, ``data:``, relative...)."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return url.strip()


def anchor(url: str, limit: int | None = 500) -> str:
    """A link whose text is its own address: what it shows is where it goes (``limit``: code
    points of the text; None shows all of it)."""
    text = url if limit is None else clip(url, limit)
    return f'<a href="{html.escape(url, quote=True)}">{esc(text)}</a>'


def pill(user: str) -> str:
    """A Matrix ID as the link clients show as a mention pill."""
    href = f"https://matrix.to/#/{quote(user, safe='@:')}"
    return f'<a href="{html.escape(href, quote=True)}">{esc(user)}</a>'


def matrix_users(identities: Iterable[str]) -> list[str]:
    """The Matrix IDs among identity keys (``matrix:@…``), in order, once each."""
    users: list[str] = []
    for identity in identities:
        platform, _, user = str(identity).partition(":")
        if platform == "matrix" and user.startswith("@") and user not in users:
            users.append(user)
    return users


def content_bytes(content: dict[str, Any]) -> int:
    """The content's size as the homeserver counts it (UTF-8 JSON, not ``\\u`` escapes)."""
    return len(json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode())


def txn_digest(*parts: str) -> str:
    """A short stable hex name for ids in transaction ids (event ids hold ``$``, ``/``, ``+``)."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def remember(items: OrderedDict[K, V], key: K, value: V) -> None:
    """``items[key] = value`` as the newest entry; the oldest go past :data:`REMEMBERED`."""
    items[key] = value
    items.move_to_end(key)
    while len(items) > REMEMBERED:
        items.popitem(last=False)

"""Agent Markdown as Matrix HTML, and the one HTML allowlist every formatted body passes. Pure.

:func:`markdown_html` parses CommonMark with raw HTML off, breaks ``@room`` in all text, turns
images into links and shows a link's address after a text that is not it. :func:`sanitise` is nh3
held to the Matrix spec's suggested tags that elicitbot needs, without ``img`` (it needs an
``mxc://`` URI), ``details``/``summary`` and spoilers (they hide what a person approves) and
``mx-reply`` (a forged quote). Both are cached: fitting a view to the budget renders it again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import urlsplit

import nh3
from markdown_it.token import Token

from adapters.matrix.markup.html import neutralise
from adapters.shared.markdown import commonmark

TAGS = frozenset(
    {
        "font",
        "del",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "blockquote",
        "p",
        "a",
        "ul",
        "ol",
        "sup",
        "sub",
        "li",
        "b",
        "i",
        "u",
        "strong",
        "em",
        "s",
        "strike",
        "code",
        "hr",
        "br",
        "div",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "caption",
        "pre",
        "span",
    }
)
"""The Matrix spec's suggested tags, less ``img``, ``details`` and ``summary``."""

ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href"},
    "font": {"data-mx-color", "data-mx-bg-color"},
    "span": {"data-mx-color", "data-mx-bg-color"},
    "ol": {"start"},
    "code": {"class"},
}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
REMOVED_WITH_CONTENT = frozenset({"script", "style", "mx-reply", "textarea", "noscript"})

_COLOUR = re.compile(r"#[0-9A-Fa-f]{6}")
_LANGUAGE = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")
_START = re.compile(r"-?[0-9]{1,9}")


def _attribute_filter(tag: str, attribute: str, value: str) -> str | None:
    if attribute in ("data-mx-color", "data-mx-bg-color"):
        return value if _COLOUR.fullmatch(value) else None
    if attribute == "class":
        classes = value.split()
        return value if classes and all(_LANGUAGE.fullmatch(c) for c in classes) else None
    if attribute == "start":
        return value if _START.fullmatch(value) else None
    return value


@lru_cache(maxsize=512)
def sanitise(markup: str) -> str:
    """``markup`` held to the Matrix allowlist (see the module docstring)."""
    return nh3.clean(
        markup,
        tags=set(TAGS),
        clean_content_tags=set(REMOVED_WITH_CONTENT),
        attributes=ATTRIBUTES,
        attribute_filter=_attribute_filter,
        url_schemes=set(URL_SCHEMES),
        link_rel=None,
        strip_comments=True,
    )


_MD = commonmark()
_TEXT_TOKENS = frozenset({"text", "code_inline", "code_block", "fence"})


def _web_or_mail(href: str) -> bool:
    try:
        parts = urlsplit(href)
    except ValueError:
        return False
    return parts.scheme.lower() in URL_SCHEMES and (bool(parts.netloc) or parts.scheme == "mailto")


def _same_place(text: str, href: str) -> bool:
    """The link's text says where it goes (``https://a.example`` for ``https://a.example/``,
    ``bob@example.org`` for ``mailto:bob@example.org``)."""
    shown = text.strip().rstrip("/")
    target = href.strip().rstrip("/")
    return shown in (target, target.removeprefix("mailto:"))


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


def _inline(children: Sequence[Token]) -> list[Token]:
    """Neutralise text, turn images into links, and show a link's address when its text does
    not."""
    flat: list[Token] = []
    for token in children:
        if token.type == "image":
            link = Token("link_open", "a", 1)
            link.attrSet("href", str(token.attrGet("src") or ""))
            flat.append(link)
            flat.extend(token.children or [_text(token.content)])
            flat.append(Token("link_close", "a", -1))
        else:
            flat.append(token)
    out: list[Token] = []
    opened: list[tuple[str, int, str]] = []
    for token in flat:
        if token.type in _TEXT_TOKENS:
            token.content = neutralise(token.content)
        out.append(token)
        if token.type == "link_open":
            opened.append((str(token.attrGet("href") or ""), len(out), token.markup))
        elif token.type == "link_close" and opened:
            href, start, markup = opened.pop()
            shown = "".join(t.content for t in out[start:-1] if t.type in _TEXT_TOKENS)
            if markup != "autolink" and _web_or_mail(href) and not _same_place(shown, href):
                out.append(_text(f" ({href})"))
    return out


@lru_cache(maxsize=512)
def markdown_html(text: str) -> str:
    """Agent Markdown as sanitised Matrix HTML (see the module docstring)."""
    env: dict[str, object] = {}
    tokens = _MD.parse(text, env)
    for token in tokens:
        if token.type in _TEXT_TOKENS:
            token.content = neutralise(token.content)
        if token.type == "inline" and token.children is not None:
            token.children = _inline(token.children)
    return sanitise(_MD.renderer.render(tokens, _MD.options, env).strip())

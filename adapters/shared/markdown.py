"""Markdown (CommonMark) from an agent as safe HTML: parsed by ``markdown-it-py``, sanitised by
``nh3``. No raw HTML, ``javascript:`` links, images (no remote fetch) or decoded character
references; a link whose text is not its address shows the address after it, so
``[https://good.example](https://evil.example)`` cannot pass for the good one."""

from __future__ import annotations

from collections.abc import Mapping, Set
from functools import cache

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

BASE_TAGS = frozenset(
    {
        "p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li",
        "h1", "h2", "h3", "h4", "h5", "h6", "hr", "a", "table", "thead", "tbody", "tr", "th",
        "td",
    }
)  # fmt: skip
BASE_ATTRIBUTES: Mapping[str, Set[str]] = {"a": {"href"}, "code": {"class"}, "ol": {"start"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})


def commonmark(*, breaks: bool = True, images: bool = True) -> MarkdownIt:
    """The parser every surface renders from (CommonMark, tables, strikethrough). ``breaks``: a
    single newline is a line break, as agents write it; ``images`` off: ``![alt](url)`` stays
    text (for a renderer that does not turn image tokens into visible links itself)."""
    md = MarkdownIt("commonmark", {"html": False, "breaks": breaks}).enable(
        ["table", "strikethrough"]
    )
    if not images:
        md.disable("image")
    # An entity (``&lt;``, ``&#x202E;``) stays as typed: decoded, it could turn into markup-like
    # text or an invisible or right-to-left control that disguises what is approved.
    md.disable("entity")
    return md


@cache
def _parser() -> MarkdownIt:
    md = commonmark(images=False)
    md.core.ruler.push("visible_links", _visible_links)
    return md


def _visible_links(state: object) -> None:
    """After each link whose text is not its address, the address in brackets."""
    tokens: list[Token] = getattr(state, "tokens", [])
    for block in tokens:
        children = block.children
        if not children:
            continue
        out: list[Token] = []
        href: str | None = None
        text: list[str] = []
        for token in children:
            out.append(token)
            if token.type == "link_open":
                href = str(token.attrGet("href") or "")
                text = []
            elif token.type == "link_close" and href is not None:
                shown = "".join(text).strip()
                if href not in (shown, f"mailto:{shown}"):
                    after = Token("text", "", 0)
                    after.content = f" ({href})"
                    out.append(after)
                href = None
            elif href is not None and token.type in ("text", "code_inline"):
                text.append(token.content)
        block.children = out


def to_html(text: str) -> str:
    html = _parser().render(text)
    return nh3.clean(
        html,
        tags=set(BASE_TAGS),
        attributes={tag: set(names) for tag, names in BASE_ATTRIBUTES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    ).strip()

"""Markdown as Slack mrkdwn over markdown-it-py's token stream: prose (escaped) and code parts.
Pure. A link shows its URL (a label never hides it); non-http(s) links are text. Nothing is
dropped: past markdown-it's nesting limit the whole source is one code part. Not Block Kit's
``markdown`` block: its links hide URLs, its mention escaping is undocumented, one block may become
several (breaking the 50-block budget) and its limit is separate from the message's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from markdown_it.token import Token

from adapters.shared.markdown import commonmark
from adapters.slack.markup.blocks import escape, link

ZWJ = "\u200d"
"""Put between two backticks of shown text so it cannot open or close a code block."""

_MD = commonmark(breaks=False)
_LEAVES = frozenset({"inline", "fence", "code_block", "html_block", "hr", "heading_open"})
_NO_CONTENT = re.compile(r"^[\s>]*(?:[-+*]|\d{1,9}[.)])?\s*$")
_INDENT = "    "


@dataclass(frozen=True)
class Part:
    """A run of prose (``code=False``: mrkdwn, escaped) or code (``code=True``: raw text)."""

    text: str
    code: bool = False
    language: str | None = None


def neutralise(text: str) -> str:
    """Break every run of backticks with a zero-width joiner: ```` `` ```` → ``"`\u200d`"``."""
    return text.replace("``", "`" + ZWJ + "`").replace("``", "`" + ZWJ + "`")


def text(raw: str) -> str:
    """Plain text as mrkdwn: escaped, backtick runs broken."""
    return neutralise(escape(raw))


def fence(code: str) -> str:
    """Code as a mrkdwn code block whose content cannot close it early (escaped, backtick runs
    broken, the fences on lines of their own)."""
    return "```\n" + neutralise(escape(code.rstrip("\n"))) + "\n```"


def to_mrkdwn(markdown: str) -> str:
    return "\n".join(fence(p.text) if p.code else p.text for p in parts(markdown))


@lru_cache(maxsize=512)
def parts(markdown: str) -> tuple[Part, ...]:
    """Cached: the message, its disclosure and its review render the same text."""
    env: dict[str, Any] = {}
    tokens = _MD.parse(markdown, env)
    references: dict[str, dict[str, Any]] = env.get("references", {})
    if not _covers(markdown, tokens, references):
        return (Part(markdown, code=True),) if markdown.strip() else ()
    writer = _Writer()
    writer.blocks(tokens)
    lines = markdown.splitlines()
    unused = [
        _definition(lines, ref)
        for ref in references.values()
        if ref.get("href") not in writer.hrefs
    ]
    if unused:
        writer.prose([line for lines in unused for line in lines])
    return writer.done()


def _definition(lines: Sequence[str], ref: dict[str, Any]) -> list[str]:
    """An unused link reference definition as written (escaped: it shows, it is no link)."""
    span = ref.get("map")
    if span:
        return [text(line.strip()) for line in lines[span[0] : span[1]]]
    return [link(str(ref.get("href", "")))]


def plain_text(markdown: str) -> str:
    """Markdown's words without its markup, on one line (a notification's text; unescaped)."""
    out: list[str] = []
    for t in _MD.parse(markdown):
        if t.type in ("fence", "code_block", "html_block"):
            out.append(t.content)
        for c in t.children or []:
            if c.type in ("text", "code_inline", "html_inline", "image"):
                out.append(c.content)
            elif c.type in ("softbreak", "hardbreak"):
                out.append(" ")
        out.append(" ")
    return " ".join("".join(out).split())


def _covers(source: str, tokens: Sequence[Token], references: dict[str, dict[str, Any]]) -> bool:
    """Every source line with content is inside a leaf token or a reference definition."""
    covered: set[int] = set()
    maps = [t.map for t in tokens if t.type in _LEAVES]
    maps += [ref.get("map") for ref in references.values()]
    for span in maps:
        if span:
            covered.update(range(span[0], span[1]))
    return all(
        n in covered or _NO_CONTENT.match(line) for n, line in enumerate(source.splitlines())
    )


@dataclass
class _List:
    ordered: bool
    number: int


@dataclass
class _Writer:
    out: list[Part] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    quote: int = 0
    lists: list[_List] = field(default_factory=list)
    marker: str | None = None
    """The bullet of a list item whose first line is not written yet."""
    hrefs: set[str] = field(default_factory=set)

    def _prefix(self, first: bool) -> str:
        quote = "> " if self.quote else ""
        if not self.lists:
            return quote
        indent = _INDENT * (len(self.lists) - 1)
        if first and self.marker is not None:
            bullet, self.marker = self.marker, None
            return quote + indent + bullet
        return quote + indent + "   "

    def prose(self, lines: Sequence[str]) -> None:
        for n, line in enumerate(lines):
            self.lines.append(self._prefix(n == 0) + line)

    def blank(self) -> None:
        if self.lines and self.lines[-1].strip():
            self.lines.append("")

    def _flush(self) -> None:
        while self.lines and not self.lines[-1].strip():
            self.lines.pop()
        if self.lines:
            self.out.append(Part("\n".join(self.lines)))
        self.lines = []

    def code(self, raw: str, language: str | None = None) -> None:
        if self.marker is not None:
            self.prose([""])
        self._flush()
        self.out.append(Part(raw.rstrip("\n"), code=True, language=language or None))

    def done(self) -> tuple[Part, ...]:
        self._flush()
        return tuple(p for p in self.out if p.text.strip())

    def blocks(self, tokens: Sequence[Token]) -> None:
        heading = False
        for t in tokens:
            kind = t.type
            if kind == "inline":
                rendered = inline(t.children or [], self.hrefs)
                if heading:
                    rendered = f"*{rendered}*" if rendered.strip() else rendered
                self.prose(rendered.split("\n"))
            elif kind == "heading_open":
                heading = True
            elif kind == "heading_close":
                heading = False
                self.blank()
            elif kind == "paragraph_close" and not t.hidden:
                self.blank()
            elif kind == "blockquote_open":
                self.quote += 1
            elif kind == "blockquote_close":
                self.quote -= 1
                self.blank()
            elif kind in ("bullet_list_open", "ordered_list_open"):
                start = int(t.attrGet("start") or 1)
                self.lists.append(_List(kind == "ordered_list_open", start))
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
                if not self.lists:
                    self.blank()
            elif kind == "list_item_open" and self.lists:
                current = self.lists[-1]
                self.marker = f"{current.number}. " if current.ordered else "•  "
                current.number += 1
            elif kind in ("fence", "code_block"):
                self.code(t.content, t.info.strip().split(" ")[0] if t.info else None)
            elif kind == "html_block":
                self.code(t.content, "html")
            elif kind == "hr":
                self.prose(["———"])
                self.blank()


def _code_span(content: str) -> str:
    if "`" in content or not content.strip():
        return text(content)
    return f"`{escape(content)}`"


def _plain_of(children: Sequence[Token]) -> str:
    return "".join(c.content for c in children if c.type in ("text", "code_inline"))


def _link(label: str, plain: str, href: str, title: str | None, auto: bool) -> str:
    shown = link(href)
    if auto or plain.strip() == href:
        return shown if href.startswith(("http://", "https://")) else text(plain or href)
    about = f"{shown} “{text(title)}”" if title else shown
    return f"{label} ({about})" if label.strip() else about


def inline(children: Sequence[Token], hrefs: set[str] | None = None) -> str:
    out: list[str] = []
    opened: list[tuple[int, int, Token]] = []
    seen = hrefs if hrefs is not None else set()
    for n, t in enumerate(children):
        kind = t.type
        if kind in ("text", "html_inline"):
            out.append(text(t.content))
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind in ("strong_open", "strong_close"):
            out.append("*")
        elif kind in ("em_open", "em_close"):
            out.append("_")
        elif kind in ("s_open", "s_close"):
            out.append("~")
        elif kind == "code_inline":
            out.append(_code_span(t.content))
        elif kind == "link_open":
            opened.append((len(out), n, t))
        elif kind == "link_close" and opened:
            start, first, at = opened.pop()
            inner = children[first + 1 : n]
            href = str(at.attrGet("href") or "")
            seen.add(href)
            title = at.attrGet("title")
            label = "".join(out[start:])
            del out[start:]
            auto = at.markup == "autolink"
            out.append(_link(label, _plain_of(inner), href, str(title) if title else None, auto))
        elif kind == "image":
            src = str(t.attrGet("src") or "")
            seen.add(src)
            alt = text(t.content)
            out.append(f"🖼 {alt} ({link(src)})" if alt.strip() else f"🖼 {link(src)}")
        else:
            out.append(text(t.content))
    return neutralise("".join(out))

"""The whole content of an elicitation for the **Review…** modal, in pages, nothing cut: every
string :func:`bot.domain.disclosure.decisive` names is in them. Pure.
"""

from __future__ import annotations

from adapters.slack.markup.blocks import (
    MAX_HEADER_TEXT,
    Block,
    clip,
    plain,
    section_block,
    text_length,
)
from adapters.slack.markup.layout import pack_whole
from adapters.slack.markup.previews import groups, metadata_blocks, options_line
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.ports import PromptView
from bot.domain.rules import offered_options
from bot.domain.wording import title_of

PAGE_BLOCKS = 90
"""Blocks of content on one page (a modal holds 100)."""
PAGE_TEXT = 12_000
"""Code points of text on one page (as much as a message holds: Slack documents no
cumulative limit for views)."""
MAX_PAGES = 10
"""More pages than this is too much to page through: attach the full text as a file."""


def _content(view: PromptView) -> list[Block]:
    e = view.elicitation
    blocks: list[Block] = [{"type": "header", "text": plain(clip(title_of(e), MAX_HEADER_TEXT))}]
    blocks.extend(b for g in groups(e) for b in pack_whole(g))
    blocks.extend(metadata_blocks(e))
    described = options_line(offered_options(e, view.now, shown=SHOWN_WHOLE))
    if described:
        blocks.append(section_block(described))
    return blocks


def review_blocks(view: PromptView) -> list[list[Block]]:
    """The whole content in pages (see the module docstring); never empty."""
    pages: list[list[Block]] = [[]]
    for block in _content(view):
        page = pages[-1]
        if page and (
            len(page) >= PAGE_BLOCKS or text_length(page) + text_length([block]) > PAGE_TEXT
        ):
            pages.append([])
        pages[-1].append(block)
    return pages


def review_fits(view: PromptView) -> bool:
    """The review pages are few enough to page through (at most :data:`MAX_PAGES`)."""
    return len(review_blocks(view)) <= MAX_PAGES


def full_text(view: PromptView) -> str:
    """Title, question and every preview item (label, text, value, URL) as plain text."""
    e = view.elicitation
    parts = [title_of(e), e.question.strip()]
    if e.subject is not None:
        for item in e.subject.preview:
            lines = [f"## {item.label}" if item.label else f"## ({item.type})"]
            lines += [t for t in (item.text, item.value, item.url) if t and t.strip()]
            parts.append("\n".join(lines))
        parts.append(f"Subject {e.subject.id} · revision {e.subject.revision} · {e.subject.digest}")
    return "\n\n".join(p for p in parts if p) + "\n"

"""The whole request in a long copy's thread (answer rule 2). Pure: no I/O.

:func:`part_contents` writes all of it, uncut, as ``m.notice`` events in the prompt's thread, each
under :data:`PART_BUDGET` bytes (a text too big for one is split, labelled "(part i of n)"). Text
events, not an upload: they render in every client's thread, need no media repository, and are
idempotent by transaction id. A part's content depends only on the elicitation and its id on the
root and content (:func:`part_txn`), so a retry gets back the parts it made, and a changed
rendering posts a complete new set rather than mixing two splits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from adapters.matrix.markup.html import clip, content_bytes, esc, neutralise, txn_digest
from adapters.matrix.markup.markdown import sanitise
from adapters.matrix.markup.previews import (
    WHOLE,
    Block,
    Cutter,
    field_line,
    field_piece,
    field_runs,
    item_block,
)
from adapters.matrix.render import question_block
from bot.domain.model import Elicitation, PreviewItem
from bot.domain.wording import title_of

PART_MARKER = "org.elicitbot.part"
"""Content key of a thread part: ``{"key": <elicitation key>, "part": i, "of": n}``."""
PART_BUDGET = 24_000
"""Bytes of content JSON per part."""
_ENVELOPE = 1_500
"""Room in a part for its header, footer, relation and marker."""
END = (
    "That is all of it. Decide on the message this thread belongs to: react with an option's "
    "number, or reply here with its number, id or label."
)
END_TEXT = "That is all of it. Answer on the message this thread belongs to, or reply here."


def _size(block: Block) -> int:
    return content_bytes({"body": block.plain, "formatted_body": block.html})


def _chunks(text: str, target: int) -> list[str]:
    """``text`` in pieces of about ``target`` UTF-8 bytes, cut at line ends where possible."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for whole_line in text.split("\n"):
        line = whole_line
        while len(line.encode()) > target:
            if current:
                chunks.append("\n".join(current))
                current, size = [], 0
            head = line.encode()[:target].decode("utf-8", errors="ignore")
            chunks.append(head)
            line = line[len(head) :]
        if current and size + len(line.encode()) + 1 > target:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line.encode()) + 1
    if current:
        chunks.append("\n".join(current))
    return chunks


def _split(text: str, make: Callable[[str, str], Block], budget: int) -> list[Block]:
    """``make(text, "")`` when it fits ``budget``; else ``make(chunk, " (part i of n)")`` for
    chunks small enough."""
    block = make(text, "")
    size = _size(block)
    if size <= budget:
        return [block]
    target = max(64, len(text.encode()) * budget // size * 9 // 10)
    while True:
        chunks = _chunks(text, target)
        blocks = [make(c, f" (part {i} of {len(chunks)})") for i, c in enumerate(chunks, 1)]
        if all(_size(b) <= budget for b in blocks) or target <= 64:  # noqa: PLR2004
            return blocks
        target //= 2


def _item_blocks(item: PreviewItem, budget: int) -> list[Block]:
    cutter = Cutter()
    text = "\n".join(t for t in (item.value, item.text) if t)
    if item.type == "field":
        item = item.model_copy(update={"type": "text"})
    if not text:
        return [item_block(item, WHOLE, cutter)]
    label = item.label or ""

    def make(chunk: str, suffix: str) -> Block:
        piece = item.model_copy(update={"text": chunk, "value": None, "label": label + suffix})
        return item_block(piece, WHOLE, cutter)

    return _split(text, make, budget)


def blocks_of(e: Elicitation, budget: int) -> list[Block]:
    """Everything decisive, uncut, as blocks of at most ``budget`` bytes each."""
    blocks: list[Block] = []
    cutter = Cutter()
    if e.question.strip():

        def question(text: str, suffix: str) -> Block:
            block = question_block(text, None, cutter)
            assert block is not None  # noqa: S101 - only non-empty text is split
            return Block(f"Question{suffix}:\n{block.plain}", block.html)

        blocks.extend(_split(e.question.strip(), question, budget))
    if e.subject is None:
        return blocks
    for item, run in field_runs(e.subject.preview):
        if item is not None:
            blocks.extend(_item_blocks(item, budget))
            continue
        line = field_line([field_piece(field, WHOLE, cutter) for field in run])
        if _size(line) <= budget:
            blocks.append(line)
        else:
            for field in run:
                blocks.extend(_item_blocks(field, budget))
    return blocks


def _pack(blocks: Sequence[Block], budget: int) -> list[list[Block]]:
    parts: list[list[Block]] = []
    current: list[Block] = []
    size = 0
    for block in blocks:
        block_size = _size(block)
        if current and size + block_size > budget:
            parts.append(current)
            current, size = [], 0
        current.append(block)
        size += block_size
    if current:
        parts.append(current)
    return parts


def part_contents(e: Elicitation, root: str) -> list[dict[str, Any]]:
    """The thread parts of a copy of ``e`` whose prompt is event ``root``, in order."""
    budget = PART_BUDGET - _ENVELOPE
    parts = _pack(blocks_of(e, budget), budget)
    title = clip(title_of(e), 200)
    contents = []
    for number, blocks in enumerate(parts, start=1):
        header = f"📄 The whole request: {title} — part {number} of {len(parts)}"
        plain = [neutralise(header), *(b.plain for b in blocks)]
        markup = [f"<p><b>{esc(header)}</b></p>", *(b.html for b in blocks)]
        if number == len(parts):
            end = END if e.options else END_TEXT
            plain.append(end)
            markup.append(f"<p><i>{esc(end)}</i></p>")
        contents.append(
            {
                "msgtype": "m.notice",
                "body": "\n".join(plain),
                "format": "org.matrix.custom.html",
                "formatted_body": sanitise("".join(markup)),
                "m.mentions": {},
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": root,
                    "is_falling_back": True,
                    "m.in_reply_to": {"event_id": root},
                },
                PART_MARKER: {"key": e.key, "part": number, "of": len(parts)},
            }
        )
    return contents


def part_txn(root: str, content: dict[str, Any]) -> str:
    """The transaction id of a part: the same root and content, the same event."""
    return f"elicitbot-part-{txn_digest(root, json.dumps(content, sort_keys=True))}"

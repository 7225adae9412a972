"""Groups laid out as Block Kit sections: whole (split, never cut), cut to one section, or a whole
body cut to fit (question first, metadata kept, previews sharing the rest max-min fair). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from adapters.slack.markup import mrkdwn
from adapters.slack.markup.blocks import (
    MAX_FIELD_TEXT,
    MAX_FIELDS,
    MAX_SECTION_TEXT,
    Block,
    safe_head,
    section_block,
)
from adapters.slack.markup.blocks import mrkdwn as mrkdwn_text
from adapters.slack.markup.mrkdwn import Part
from adapters.slack.markup.previews import FieldPart, Group, label_text

FIELD_CUT = 200
"""A field's value when the message is cut."""
CUT_MIN = 60
"""Less room than this for a cut piece: leave it out."""
MORE_NOTE = 200
"""Room kept for the line that counts the preview items left out."""
PER_ITEM_MIN = 150
"""Fewer code points than this per preview item: leave items out instead."""

_FENCE = len("```\n\n```")


@dataclass(frozen=True)
class Packed:
    blocks: list[Block]
    whole: bool


def _split_at(text: str, limit: int) -> int:
    """Where to split ``text`` to keep at most ``limit`` code points before it: at a line end
    or a space if one is near, never inside an ``&…;`` entity or a ``<…>`` link."""
    head = text[:limit]
    for sep in ("\n", " "):
        at = head.rfind(sep)
        if at > limit // 2:
            return at + 1
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    angle = head.rfind("<")
    if angle > 0 and ">" not in head[angle:]:
        head = head[:angle]
    return max(len(head), 1)


def split(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` code points; joined with ``\\n`` at line ends
    (the line end is the split) or directly elsewhere they make ``text`` again."""
    out: list[str] = []
    rest = text
    while len(rest) > limit:
        at = _split_at(rest, limit)
        piece, rest = rest[:at], rest[at:]
        out.append(piece[:-1] if piece.endswith("\n") else piece)
    out.append(rest)
    return out


def field_text(part: FieldPart, limit: int | None = None) -> tuple[str, bool]:
    """A field as mrkdwn (``*Label*`` and the value on the next line); cut to ``limit``."""
    label = label_text(part.label)
    value = mrkdwn.text(part.value) if part.value.strip() else ""
    whole = True
    if limit is not None and len(value) > limit:
        value, whole = safe_head(value, limit - 1) + "…", False
    if label and value:
        return f"*{label}*\n{value}", whole
    return (f"*{label}*" if label else value), whole


def _atoms(part: Part, width: int) -> list[str]:
    if part.code:
        body = mrkdwn.text(part.text.rstrip("\n"))
        return ["```\n" + chunk + "\n```" for chunk in split(body, width - _FENCE)]
    return split(part.text, width)


def _sections(texts: Iterable[str], width: int = MAX_SECTION_TEXT) -> list[Block]:
    """Atoms joined into as few sections as fit, each at most ``width``."""
    blocks: list[Block] = []
    current = ""
    for atom in texts:
        if not atom.strip():
            continue
        if current and len(current) + 1 + len(atom) > width:
            blocks.append(section_block(current))
            current = ""
        current = f"{current}\n{atom}" if current else atom
    if current:
        blocks.append(section_block(current))
    return blocks


def _fields_block(texts: Sequence[str]) -> Block:
    return {"type": "section", "fields": [mrkdwn_text(t) for t in texts]}


def pack_whole(group: Group) -> list[Block]:
    blocks: list[Block] = []
    atoms: list[str] = []
    fields: list[str] = []

    def flush_fields() -> None:
        for start in range(0, len(fields), MAX_FIELDS):
            blocks.append(_fields_block(fields[start : start + MAX_FIELDS]))
        fields.clear()

    for piece in group.pieces:
        if isinstance(piece, FieldPart):
            text, _ = field_text(piece)
            if len(text) <= MAX_FIELD_TEXT:
                blocks.extend(_sections(atoms))
                atoms = []
                fields.append(text)
                continue
            flush_fields()
            atoms.extend(split(text, MAX_SECTION_TEXT))
            continue
        flush_fields()
        atoms.extend(_atoms(piece, MAX_SECTION_TEXT))
    flush_fields()
    blocks.extend(_sections(atoms))
    return blocks


def _cut_atom(part: Part, room: int, note: str) -> str | None:
    """The start of ``part`` in at most ``room`` code points, ending with ``note``."""
    if part.code:
        body = mrkdwn.text(part.text.rstrip("\n"))
        keep = room - _FENCE - len(note) - 3
        if keep < CUT_MIN:
            return None
        head = safe_head(body, keep)
        line_end = head.rfind("\n")
        head = head[:line_end] if line_end > keep // 2 else head
        return "```\n" + head + "\n…\n```" + note
    keep = room - len(note) - 1
    if keep < CUT_MIN:
        return None
    return safe_head(part.text, keep) + "…" + note


def pack_cut(group: Group, budget: int, note: str) -> Packed:
    """At most one section (or one fields section) of the group, in ``budget`` code points;
    ``whole`` when nothing had to be cut or left out."""
    budget = min(budget, MAX_SECTION_TEXT)
    if group.fields_only:
        return _pack_fields_cut(group, budget)
    text = ""
    whole = True
    for piece in group.pieces:
        room = budget - len(text) - (1 if text else 0)
        if isinstance(piece, FieldPart):
            rendered, complete = field_text(piece, FIELD_CUT)
            whole = whole and complete
            piece = Part(rendered)  # noqa: PLW2901 - shown as prose here
        whole_text = "\n".join(_atoms(piece, 10**9))
        if len(whole_text) <= room:
            text = f"{text}\n{whole_text}" if text else whole_text
            continue
        return _done(text, _cut_atom(piece, room, note), whole=False)
    return _done(text, None, whole=whole)


def _done(text: str, cut: str | None, *, whole: bool) -> Packed:
    if cut is not None:
        text = f"{text}\n{cut}" if text else cut
    return Packed([section_block(text)] if text else [], whole=whole)


def _pack_fields_cut(group: Group, budget: int) -> Packed:
    texts: list[str] = []
    used = 0
    whole = True
    for piece in group.pieces:
        assert isinstance(piece, FieldPart)  # noqa: S101 - fields_only
        text, complete = field_text(piece, FIELD_CUT)
        if len(texts) == MAX_FIELDS or used + len(text) > budget:
            whole = False
            break
        texts.append(text)
        used += len(text)
        whole = whole and complete
    return Packed([_fields_block(texts)] if texts else [], whole=whole and bool(texts))


def block_text(block: Block) -> int:
    total = len(block["text"]["text"]) if "text" in block else 0
    return total + sum(len(f["text"]) for f in block.get("fields", []))


def size(group: Group) -> int:
    """Code points of the group's text when shown whole."""
    return sum(block_text(b) for b in pack_whole(group))


def _cap(sizes: Sequence[int], budget: int) -> int:
    """The largest share ``c`` with ``sum(min(s, c)) <= budget`` (max-min fair)."""
    left = budget
    ordered = sorted(sizes)
    for n, s in enumerate(ordered):
        others = len(ordered) - n
        if s * others > left:
            return left // others
        left -= s
    return max(ordered, default=0)


@dataclass(frozen=True)
class Cut:
    """A body cut to fit, the preview items left out, and where the line saying so goes."""

    blocks: list[Block]
    dropped: int
    at: int


def pack_within(groups: Sequence[Group], *, text: int, blocks: int, note: str) -> Cut:
    """The groups cut to fit: the question (up to half the room), the trailing fields (a
    quarter), the previews sharing the rest fairly, those beyond it left out and counted;
    room is kept for a one-line "more" note (``MORE_NOTE`` code points, one block)."""
    text -= MORE_NOTE
    blocks -= 1
    first = groups[0] if groups and groups[0].items == 0 else None
    rest = groups[1:] if first is not None else groups
    last = rest[-1] if rest and rest[-1].fields_only else None
    between = rest[:-1] if last is not None else rest
    middle = list(between)
    head: list[Block] = []
    tail: list[Block] = []
    if first is not None and blocks > 0:
        head = pack_cut(first, min(text // 2, MAX_SECTION_TEXT), note).blocks[:1]
    if last is not None and blocks - len(head) > 0:
        tail = pack_cut(last, min(text // 4, MAX_SECTION_TEXT), note).blocks[:1]
    room = text - sum(block_text(b) for b in head + tail)
    slots = blocks - len(head) - len(tail)
    while middle and (len(middle) > slots or _cap([size(g) for g in middle], room) < PER_ITEM_MIN):
        middle.pop()
    kept: list[Block] = []
    shown = 0
    if middle:
        share = _cap([size(g) for g in middle], room)
        for group in middle:
            packed = pack_cut(group, max(share, CUT_MIN), note)
            if sum(block_text(b) for b in kept + packed.blocks) > room:
                break
            kept.extend(packed.blocks[:1])
            shown += 1
    dropped = sum(g.items for g in between) - sum(g.items for g in middle[:shown])
    return Cut(head + kept + tail, dropped, at=len(head) + len(kept))

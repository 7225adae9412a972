"""The question and preview items as groups of pieces (prose, code, fields), the metadata line and
the options' descriptions. Pure. Code is a mrkdwn ``` block, not ``rich_text_preformatted``: mrkdwn
sections have documented limits and count toward the cumulative one, so "holds everything" is
measured in one unit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from adapters.slack.markup import mrkdwn
from adapters.slack.markup.blocks import (
    MAX_BUTTON_TEXT,
    Block,
    clip,
    escape,
    link,
)
from adapters.slack.markup.blocks import mrkdwn as mrkdwn_text
from adapters.slack.markup.mrkdwn import Part
from bot.domain.model import ApprovalSubject, Elicitation, PreviewItem
from bot.domain.rules import OfferedOption, format_time
from bot.domain.wording import shorten_digest

CONTEXT_PART = 150
CONTEXT_TEXT = 600
DESCRIPTION_TEXT = 300
OPTIONS_TEXT = 2000
_PREFORMATTED = frozenset({"code", "diff", "command", "json", "files"})
_EMAIL_HEADER = re.compile(r"^(From|To|Cc|Bcc|Reply-To|Date|Subject): (.*)$")


@dataclass(frozen=True)
class FieldPart:
    """A label and its value (raw text)."""

    label: str
    value: str


Piece = Part | FieldPart


@dataclass(frozen=True)
class Group:
    """What one preview item, one run of fields, or the question shows."""

    pieces: tuple[Piece, ...]
    items: int = 1
    """How many preview items it holds (0: the question)."""

    @property
    def fields_only(self) -> bool:
        return all(isinstance(p, FieldPart) for p in self.pieces)


def label_text(raw: str | None) -> str:
    return mrkdwn.text(" ".join(raw.split())) if raw and raw.strip() else ""


def _heading(item: PreviewItem, about: str, icon: str = "") -> Part | None:
    label = label_text(item.label)
    parts = [f"*{label}*" if label else "", mrkdwn.text(about) if about else ""]
    line = " · ".join(p for p in parts if p)
    return Part(f"{icon}{line}") if line else None


def _diff_about(diff: str) -> str:
    lines = diff.splitlines()
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    return f"diff: {added} added, {removed} removed"


def _about(item: PreviewItem, body: str) -> str:
    if item.type == "diff":
        return _diff_about(body)
    if item.type == "json":
        return "JSON"
    if item.type == "command":
        return "command"
    if item.type == "files":
        return f"{len(body.splitlines())} files"
    return item.language or ""


def _email(body: str) -> list[Piece]:
    head, _, rest = body.partition("\n\n")
    headers = [_EMAIL_HEADER.match(line) for line in head.split("\n")]
    if not head.strip() or not all(headers):
        return list(mrkdwn.parts(body))
    pieces: list[Piece] = [FieldPart(m.group(1), m.group(2)) for m in headers if m]
    return [*pieces, *mrkdwn.parts(rest)]


def item_pieces(item: PreviewItem) -> list[Piece]:
    """Everything a preview item says (label, text, value, URL), as pieces, nothing left out."""
    kind = item.type
    body = item.text or ""
    pieces: list[Piece] = []
    value_used = False
    if kind == "field":
        if (item.label or "").strip() or (item.value or body).strip():
            pieces.append(FieldPart(item.label or "", item.value or body))
        value_used = True
        if item.value and body.strip():
            pieces.append(Part(mrkdwn.text(body)))
    elif kind == "link":
        about = " ".join(body.split())
        heading = _heading(item, about, "📎 ")
        pieces.extend([heading] if heading else [])
    elif kind in _PREFORMATTED:
        heading = _heading(item, _about(item, body))
        pieces.extend([heading] if heading else [])
        if body.strip():
            pieces.append(Part(body, code=True, language=item.language))
    elif kind == "email":
        heading = _heading(item, "email draft", "✉️ ")
        pieces.extend([heading] if heading else [])
        pieces.extend(_email(body))
    else:
        heading = _heading(item, "")
        pieces.extend([heading] if heading else [])
        pieces.extend(mrkdwn.parts(body))
    if item.value and item.value.strip() and not value_used:
        pieces.append(Part(mrkdwn.text(item.value)))
    if item.url and item.url.strip():
        pieces.append(Part(f"🔗 {link(item.url)}" if kind != "link" else link(item.url)))
    return pieces


def question_group(question: str) -> Group | None:
    pieces = tuple(mrkdwn.parts(question.strip()))
    return Group(pieces, items=0) if pieces else None


def _is_plain_field(item: PreviewItem) -> bool:
    return item.type == "field" and not item.url and not (item.value and item.text)


def preview_groups(subject: ApprovalSubject) -> list[Group]:
    """The preview items as groups, in order; consecutive plain fields share one group."""
    out: list[Group] = []
    run: list[Piece] = []
    count = 0

    def close() -> None:
        nonlocal run, count
        if run:
            out.append(Group(tuple(run), items=count))
        run, count = [], 0

    for item in subject.preview:
        pieces = item_pieces(item)
        if not pieces:
            continue
        if _is_plain_field(item):
            run.extend(pieces)
            count += 1
            continue
        close()
        out.append(Group(tuple(pieces)))
    close()
    return out


def _context_line(e: Elicitation) -> str:
    line = " · ".join(
        f"{name}: {clip(escape(' '.join(value.split())), CONTEXT_PART)}"
        for name, value in e.context_parts(workspace=False)
    )
    return clip(line, CONTEXT_TEXT)


def _subject_line(s: ApprovalSubject) -> str:
    parts = [
        f"Subject `{clip(escape(s.id), 80)}`",
        f"revision {s.revision}",
        f"digest `{clip(escape(shorten_digest(s.digest)), 40)}`",
    ]
    if s.expires_at is not None:
        parts.append(f"expires {format_time(s.expires_at)}")
    if not s.preview_complete:
        parts.append("preview incomplete")
    return " · ".join(parts)


def metadata_blocks(e: Elicitation) -> list[Block]:
    """Where it comes from and what subject it binds to: one compact context block."""
    elements = [
        mrkdwn_text(line)
        for line in (_context_line(e), e.subject and _subject_line(e.subject))
        if line
    ]
    return [{"type": "context", "elements": elements}] if elements else []


def groups(e: Elicitation) -> list[Group]:
    question = question_group(e.question)
    previews = preview_groups(e.subject) if e.subject is not None else []
    return ([question] if question else []) + previews


def options_line(options: Sequence[OfferedOption]) -> str | None:
    """The options with a description or the recommended mark, one per line."""
    lines = []
    for o in options:
        option = o.option
        description = " ".join((option.description or "").split())
        if not description and not option.recommended:
            continue
        label = clip(escape(" ".join(option.label.split())), MAX_BUTTON_TEXT)
        line = f"• *{label}*" + (" ⭐ Recommended" if option.recommended else "")
        if description:
            line += f" — {clip(escape(description), DESCRIPTION_TEXT)}"
        lines.append(line)
    return clip("\n".join(lines), OPTIONS_TEXT) if lines else None

"""An approval subject's preview items as Matrix text and HTML, one block each. Pure: no I/O.

A run of ``field`` items is one compact line; the run that ends the previews goes to the metadata
line instead. Every cut is recorded on the :class:`Cutter`, so the renderer knows whether the
message shows the whole decisive content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from adapters.matrix.markup.html import anchor, clip, esc, esc_lines, neutralise, safe_url
from adapters.matrix.markup.markdown import markdown_html
from bot.domain.model import PreviewItem
from bot.domain.wording import one_line

ADDED, REMOVED, HUNK = "#1a7f37", "#cf222e", "#0969da"
"""Diff line colours (GitHub's green, red and blue)."""
CODE_TYPES = frozenset({"code", "diff", "command", "json"})
_BLOCK_TYPES = CODE_TYPES | {"markdown", "email", "files"}
_DEFAULT_LANGUAGE = {"diff": "diff", "command": "shell", "json": "json"}
_LANGUAGE_CHARS = re.compile(r"[^A-Za-z0-9_+#.-]")


@dataclass(frozen=True)
class Block:
    plain: str
    html: str


@dataclass(frozen=True)
class ItemLimits:
    """Code points shown of an item's text, label and address (None: all of it)."""

    text: int | None = None
    label: int | None = None
    url: int | None = None


WHOLE = ItemLimits()


@dataclass
class Cutter:
    """Cuts text to a limit and remembers that it did; ``note`` says where the rest is."""

    note_plain: str = ""
    note_html: str = ""
    cut: bool = False

    def take(self, text: str, limit: int | None) -> tuple[str, bool]:
        if limit is None or len(text) <= limit:
            return text, False
        self.cut = True
        return text[: max(1, limit - 1)] + "…", True

    def note(self, was_cut: bool) -> tuple[str, str]:
        return (self.note_plain, self.note_html) if was_cut else ("", "")


def language_of(item: PreviewItem) -> str | None:
    raw = item.language or _DEFAULT_LANGUAGE.get(item.type)
    name = _LANGUAGE_CHARS.sub("", raw or "")[:40]
    return name or None


def diff_html(text: str) -> str:
    """Diff lines, escaped, each ``+``/``-``/``@@`` line in its colour; the ``---``/``+++``
    file header before the first hunk stays plain."""
    lines: list[str] = []
    in_hunk = False
    for line in text.split("\n"):
        escaped = esc(line)
        if line.startswith("@@"):
            in_hunk = True
            colour: str | None = HUNK
        elif not in_hunk and line.startswith(("--- ", "+++ ")):
            colour = None
        elif line.startswith("+"):
            colour = ADDED
        elif line.startswith("-"):
            colour = REMOVED
        else:
            colour = None
        lines.append(f'<font data-mx-color="{colour}">{escaped}</font>' if colour else escaped)
    return "\n".join(lines)


def code_html(text: str, language: str | None) -> str:
    attribute = f' class="language-{language}"' if language else ""
    inner = diff_html(text) if language == "diff" else esc(text)
    return f"<pre><code{attribute}>{inner}</code></pre>"


def _email_html(text: str) -> str:
    """The draft's headers (``To: …``) bold-named, then its body as Markdown."""
    head, _, rest = text.partition("\n\n")
    rows = []
    for line in head.split("\n"):
        name, sep, value = line.partition(": ")
        if sep and name and " " not in name.strip("-"):
            rows.append(f"<b>{esc(name)}:</b> {esc(value)}")
        else:
            rows.append(esc(line))
    markup = "<p>" + "<br>".join(rows) + "</p>"
    return markup + (markdown_html(rest) if rest.strip() else "")


def _files_html(text: str) -> str:
    items = "".join(f"<li>{esc(line)}</li>" for line in text.split("\n") if line.strip())
    return f"<ul>{items}</ul>"


def _body_html(item: PreviewItem, text: str) -> str:
    kind = item.type
    if kind in CODE_TYPES:
        return code_html(text, language_of(item))
    if kind == "markdown":
        return markdown_html(text)
    if kind == "email":
        return _email_html(text)
    if kind == "files":
        return _files_html(text)
    return esc_lines(text)


def _address(item: PreviewItem, limits: ItemLimits, cutter: Cutter) -> tuple[str, str] | None:
    if not item.url:
        return None
    url = safe_url(item.url)
    if url is not None:
        shown, _ = cutter.take(url, limits.url)
        return shown, anchor(url, limits.url)
    shown, _ = cutter.take(item.url, limits.url)
    return f"{neutralise(shown)} (not a web link)", f"<code>{esc(shown)}</code> (not a web link)"


def _label(item: PreviewItem, limits: ItemLimits, cutter: Cutter) -> str:
    label, _ = cutter.take(one_line(item.label or ""), limits.label)
    return label


def item_block(item: PreviewItem, limits: ItemLimits, cutter: Cutter) -> Block:
    """One preview item (not a field) as a block."""
    label = _label(item, limits, cutter)
    raw = "\n".join(t for t in (item.text, item.value) if t)
    text, was_cut = cutter.take(raw, limits.text) if raw else ("", False)
    note_plain, note_html = cutter.note(was_cut)
    address = _address(item, limits, cutter)
    if item.type in _BLOCK_TYPES and text:
        plain = (f"{neutralise(label)}:\n" if label else "") + neutralise(text) + note_plain
        markup = (f"<p><b>{esc(label)}</b></p>" if label else "") + _body_html(item, text)
        if note_html:
            markup += f"<p>{note_html.strip()}</p>"
        if address is not None:
            plain += "\n" + address[0]
            markup += f"<p>{address[1]}</p>"
        return Block(plain, markup)
    parts_plain = [neutralise(text) + note_plain] if text else []
    parts_html = [esc_lines(text) + note_html] if text else []
    if address is not None:
        parts_plain.append(address[0])
        parts_html.append(address[1])
    head_plain = f"{neutralise(label)}: " if label else ""
    head_html = f"<b>{esc(label)}:</b> " if label else ""
    return Block(
        "• " + head_plain + " ".join(parts_plain), f"<p>{head_html}{' '.join(parts_html)}</p>"
    )


def field_piece(item: PreviewItem, limits: ItemLimits, cutter: Cutter) -> Block:
    """One field as ``Label: value`` for a compact line."""
    label = _label(item, limits, cutter)
    raw = one_line(" — ".join(t for t in (item.value, item.text) if t))
    value, _ = cutter.take(raw, limits.text)
    address = _address(item, limits, cutter)
    plain = f"{neutralise(label)}: {neutralise(value)}" if label else neutralise(value)
    markup = f"<b>{esc(label)}:</b> {esc(value)}" if label else esc(value)
    if address is not None:
        plain += f" {address[0]}"
        markup += f" {address[1]}"
    return Block(plain, markup)


def field_line(pieces: Sequence[Block]) -> Block:
    return Block(
        " · ".join(p.plain for p in pieces), "<p>" + " · ".join(p.html for p in pieces) + "</p>"
    )


def field_runs(items: Sequence[PreviewItem]) -> list[tuple[PreviewItem | None, list[PreviewItem]]]:
    """Items in order, consecutive fields grouped: ``(item, [])`` or ``(None, fields)``."""
    out: list[tuple[PreviewItem | None, list[PreviewItem]]] = []
    for item in items:
        if item.type == "field":
            if out and out[-1][0] is None:
                out[-1][1].append(item)
            else:
                out.append((None, [item]))
        else:
            out.append((item, []))
    return out


def preview_blocks(
    items: Sequence[PreviewItem], limits: ItemLimits, cutter: Cutter
) -> tuple[list[Block], list[Block]]:
    """Every item in order, consecutive fields as one line; apart, one piece per field, the run
    of fields that ends the previews (for the metadata line)."""
    groups = field_runs(items)
    last = groups.pop()[1] if groups and groups[-1][0] is None else []
    blocks = [
        item_block(item, limits, cutter)
        if item is not None
        else field_line([field_piece(f, limits, cutter) for f in fields])
        for item, fields in groups
    ]
    return blocks, [field_piece(f, limits, cutter) for f in last]


def context_piece(name: str, value: str, limit: int) -> Block:
    """One of the elicitation's context parts (board, card, asker…) for the metadata line."""
    shown = clip(one_line(value), limit)
    return Block(f"{name}: {neutralise(shown)}", f"<b>{esc(name)}:</b> {esc(shown)}")

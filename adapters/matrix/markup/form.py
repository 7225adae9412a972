"""A form (several questions answered at once, handup ``input.questions``) in a Matrix prompt.
Pure: no I/O.

Keycaps cannot answer several questions, so a form is answered by one thread reply
(``1: beta; 2: linux, macos``) that the core reads; nothing is seeded on it. A paragraph of the
question that only restates form question *n* (handup writes them for surfaces that show no
form) is left out: the listing shows the same, numbered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from adapters.matrix.markup.html import clip, esc, neutralise
from adapters.matrix.markup.previews import Block
from bot.domain.forms import is_form
from bot.domain.model import Elicitation, FormQuestion
from bot.domain.wording import one_line

NOTE_LIMIT = 80
"""Code points of a ``(…)`` line a restated question may carry (handup's "(choose one or
more)")."""

_PARAGRAPHS = re.compile(r"\n[ \t]*\n")
_MARKDOWN = re.compile(r"[*_`]")


def _plain(text: str) -> str:
    return " ".join(_MARKDOWN.sub("", text).split()).casefold()


def _restates(paragraph: str, number: int, q: FormQuestion) -> bool:
    lines = [line.strip() for line in paragraph.strip().split("\n") if line.strip()]
    if not lines or not re.match(rf"{number}[.)]\s", lines[0]):
        return False
    if _plain(q.question) not in _plain(lines[0]):
        return False
    labels = [_plain(o.label) for o in q.options]
    for line in lines[1:]:
        if line.startswith("(") and line.endswith(")") and len(line) <= NOTE_LIMIT:
            continue
        if line.startswith(("-", "*")):
            said = _plain(line[1:])
            if any(said == label or said.startswith(f"{label} ") for label in labels):
                continue
        return False
    return True


def own_text(e: Elicitation) -> str:
    """The question text of a form without the paragraphs that restate its questions."""
    if not is_form(e):
        return e.question
    kept = []
    for paragraph in _PARAGRAPHS.split(e.question):
        match = re.match(r"\s*([0-9]{1,2})[.)]\s", paragraph)
        n = int(match.group(1)) if match is not None else 0
        if 1 <= n <= len(e.form) and _restates(paragraph, n, e.form[n - 1]):
            continue
        kept.append(paragraph)
    return "\n\n".join(kept).strip()


def _marks(q: FormQuestion) -> list[str]:
    if not q.options:
        return ["type your answer"]
    marks = ["choose one or more" if q.multi else "choose one"]
    if q.allow_free_text:
        marks.append("or type your own answer")
    return marks


def form_block(form: Sequence[FormQuestion], *, label: int, description: int) -> Block:
    """Each question numbered with its options numbered within it (``label``, ``description``:
    code points shown of each option's label and description)."""
    plain: list[str] = []
    items: list[str] = []
    for number, q in enumerate(form, start=1):
        head = clip(one_line(q.question), 600)
        header = clip(one_line(q.header or ""), 120)
        marks = ", ".join(_marks(q))
        title_plain = f"{number}. " + (f"{header} — " if header else "") + head + f" ({marks})"
        title_html = (f"<b>{esc(header)}</b> — " if header else "") + esc(head)
        title_html += f" <i>({esc(marks)})</i>"
        plain.append(neutralise(title_plain))
        options_html = []
        for index, o in enumerate(q.options, start=1):
            name = clip(one_line(o.label), label)
            line_plain, line_html = f"   {index}) {name}", esc(name)
            if o.recommended:
                line_plain += " (recommended)"
                line_html += " <i>(recommended)</i>"
            if o.description and description > 0:
                about = clip(one_line(o.description), description)
                line_plain += f" — {about}"
                line_html += f" — {esc(about)}"
            plain.append(neutralise(line_plain))
            options_html.append(f"<li>{line_html}</li>")
        inner = f"<ol>{''.join(options_html)}</ol>" if options_html else ""
        items.append(f"<li>{title_html}{inner}</li>")
    return Block("\n".join(plain), f"<ol>{''.join(items)}</ol>")


def example(form: Sequence[FormQuestion]) -> str:
    """An answer to the form as a thread reply: the recommended (else first) option of a
    single choice, the first two of a multiple choice, words for a typed answer."""
    parts = []
    for number, q in enumerate(form, start=1):
        if q.options and q.multi:
            said = ", ".join(o.label for o in q.options[:2])
        elif q.options:
            said = next((o.label for o in q.options if o.recommended), q.options[0].label)
        else:
            said = "your own words"
        parts.append(f"{number}: {one_line(said)}")
    return "; ".join(parts)


def how_to_answer(form: Sequence[FormQuestion]) -> str:
    """How to answer the form in the thread (the core explains again on a reply it cannot
    read: :func:`bot.domain.forms.form_help`)."""
    return (
        "To answer, reply in this message's thread with each question's number and your answer, "
        "one per line or separated by semicolons: an option's number or label (several "
        "separated by commas where several may be chosen), or your own words where a typed "
        f"answer works. For example: {clip(example(form), 300)}"
    )

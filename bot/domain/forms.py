"""Forms: several questions answered at once (handup ``input.questions``), as pure functions.

An answer is ``{question id: {"selected": [option labels], "text": str | None}}``, carried in
``Attempt.fields["answers"]``. :func:`parse_form_reply` reads a thread reply ``1: a; 2: b, c;
3: some words`` (or one answer per line), so a thread answers a form at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from bot.domain.model import Elicitation, FormQuestion, Option, TypedAnswer

TEXT_LIMIT = 32_768
"""A typed answer's bound, in code points, when the source gives none."""

_ENTRY = re.compile(r"^\s*#?\s*([0-9]{1,2})\s*[:.)]\s*(.*)$", re.DOTALL)


@dataclass(frozen=True)
class FormProblem:
    """Why a form's answers are refused: one sentence naming the question."""

    message: str
    empty: bool = False
    """Nothing (or not every question) was answered, as opposed to a wrong answer."""


def is_form(e: Elicitation) -> bool:
    """Several questions answered at once (one question is answered like any other). In Matrix
    a form is answered by one thread reply, never by reactions."""
    return len(e.form) > 1


def _name(number: int, q: FormQuestion) -> str:
    return f"question {number} ({q.header or q.question[:60]})"


def _label(q: FormQuestion, given: str) -> str | None:
    """The option label ``given`` names: its label (case-insensitively) or its 1-based number."""
    wanted = " ".join(given.split()).casefold()
    for option in q.options:
        if " ".join(option.label.split()).casefold() == wanted:
            return option.label
    if wanted.isdigit() and 1 <= int(wanted) <= len(q.options):
        return q.options[int(wanted) - 1].label
    return None


def check_answers(
    form: Sequence[FormQuestion], answers: Any, *, text_limit: int = TEXT_LIMIT
) -> dict[str, dict[str, Any]] | FormProblem:
    """The answers in the spec's shape (labels as the options have them, empty texts as null),
    or the problem with them."""
    if not isinstance(answers, Mapping):
        return FormProblem("Answer each question of the form.", empty=True)
    known = {q.id for q in form}
    unknown = sorted(str(k) for k in answers if k not in known)
    if unknown:
        return FormProblem(f"The form has no question {unknown[0]!r}.")
    out: dict[str, dict[str, Any]] = {}
    for number, q in enumerate(form, start=1):
        given = answers.get(q.id)
        if given is None:
            return FormProblem(f"Answer {_name(number, q)}.", empty=True)
        if not isinstance(given, Mapping):
            return FormProblem(f"The answer to {_name(number, q)} is not readable.")
        raw = given.get("selected") or []
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            return FormProblem(f"The choices for {_name(number, q)} are not readable.")
        selected: list[str] = []
        for item in raw:
            label = _label(q, item)
            if label is None:
                return FormProblem(f"“{item[:80]}” is not an option of {_name(number, q)}.")
            if label in selected:
                return FormProblem(f"“{label}” is chosen twice in {_name(number, q)}.")
            selected.append(label)
        if len(selected) > 1 and not q.multi:
            return FormProblem(f"Choose only one option in {_name(number, q)}.")
        text = given.get("text")
        if text is not None and not isinstance(text, str):
            return FormProblem(f"The text for {_name(number, q)} is not readable.")
        text = text if text is not None and text.strip() else None
        if text is not None and not q.takes_text:
            return FormProblem(f"{_name(number, q).capitalize()} takes one of its options only.")
        if text is not None and len(text) > text_limit:
            return FormProblem(
                f"The answer to {_name(number, q)} is {len(text):,} characters; "
                f"the limit is {text_limit:,}."
            )
        if not selected and text is None:
            return FormProblem(f"Answer {_name(number, q)}.", empty=True)
        why = None if text is None or q.typed is None else typed_problem(q.typed, text)
        if why is not None:
            return FormProblem(f"The answer to {_name(number, q)} {why}.")
        out[q.id] = {"selected": selected, "text": text}
    return out


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def typed_problem(rule: TypedAnswer, text: str) -> str | None:
    """Why a typed answer breaks its question's rule, as the end of a sentence ("must be a
    whole number"), or None. A number is read as typed, with thousands separators allowed."""
    if rule.kind in ("number", "integer"):
        raw = text.strip().replace(",", "")
        try:
            value = float(int(raw)) if rule.kind == "integer" else float(raw)
        except ValueError:
            return "must be a whole number" if rule.kind == "integer" else "must be a number"
        if not math.isfinite(value):
            return "must be a number"
        if rule.minimum is not None and value < rule.minimum:
            return f"must be at least {rule.minimum:g}"
        if rule.maximum is not None and value > rule.maximum:
            return f"must be at most {rule.maximum:g}"
        return None
    if rule.min_length is not None and len(text) < rule.min_length:
        return f"must be at least {rule.min_length:,} characters"
    if rule.max_length is not None and len(text) > rule.max_length:
        return f"must be at most {rule.max_length:,} characters"
    if rule.pattern is not None:
        try:
            matched = re.search(rule.pattern, text) is not None
        except re.error:
            matched = False
        if not matched:
            return f"must match the pattern {rule.pattern}"
    return None if rule.format is None else _format_problem(rule.format, text)


def _format_problem(format_: str, text: str) -> str | None:
    value = text.strip()
    if format_ == "email":
        ok = _EMAIL.match(value) is not None
        what = "an email address"
    elif format_ == "uri":
        parts = urlsplit(value)
        ok = bool(parts.scheme) and bool(parts.netloc or parts.path)
        what = "an address with its scheme (https://…)"
    elif format_ == "date":
        ok = _parses(date.fromisoformat, value) and len(value) == len("2026-12-02")
        what = "a date (2026-12-02)"
    else:
        ok = "T" in value.upper() and _parses(datetime.fromisoformat, value.replace("Z", "+00:00"))
        what = "a date and time (2026-12-02T09:30:00Z)"
    return None if ok else f"must be {what}"


def _parses(parse: Any, value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


def _entries(body: str) -> dict[int, str] | None:
    """``1: a; 2: b`` or one ``n: …`` per line, by question number; None when not that shape."""
    parts = [p for p in re.split(r";|\n", body) if p.strip()]
    entries: dict[int, str] = {}
    current: int | None = None
    for part in parts:
        match = _ENTRY.match(part)
        if match is not None:
            current = int(match.group(1))
            if current in entries:
                return None
            entries[current] = match.group(2).strip()
        elif current is not None:  # a typed answer that goes on over several lines
            entries[current] = f"{entries[current]}\n{part.strip()}"
        else:
            return None
    return entries or None


def _answer_of(q: FormQuestion, said: str) -> dict[str, Any] | None:
    """One entry as an answer: the options it names (comma-separated), else its text where the
    question takes one; None when it names nothing the question takes."""
    if q.options:
        labels = [_label(q, part) for part in said.split(",") if part.strip()]
        if labels and all(label is not None for label in labels):
            return {"selected": [label for label in labels if label is not None], "text": None}
    if q.takes_text and said.strip():
        return {"selected": [], "text": said.strip()}
    return None


def parse_form_reply(form: Sequence[FormQuestion], body: str) -> dict[str, Any] | None:
    """A thread reply's answers to the form (before :func:`check_answers`), or None when the
    reply is not ``n: answer`` entries for the form's questions."""
    entries = _entries(body)
    if entries is None or any(not 1 <= n <= len(form) for n in entries):
        return None
    answers: dict[str, Any] = {}
    for n, said in entries.items():
        q = form[n - 1]
        answer = _answer_of(q, said)
        if answer is None:
            return None
        answers[q.id] = answer
    return answers


def _option_list(options: Sequence[Option]) -> str:
    return ", ".join(f"{n}. {o.label}" for n, o in enumerate(options, start=1))


def form_help(form: Sequence[FormQuestion]) -> str:
    """How to answer a form in a thread reply."""
    lines = [
        "To answer, reply with one line per question, its number and your answer "
        "(for example: 1: " + _example(form) + "):"
    ]
    for number, q in enumerate(form, start=1):
        how = []
        if q.options:
            how.append(("one or more of " if q.multi else "one of ") + _option_list(q.options))
        if q.takes_text:
            how.append("your own words")
        lines.append(f"{number}. {q.header or q.question[:80]}: {' or '.join(how)}")
    return "\n".join(lines)


def _example(form: Sequence[FormQuestion]) -> str:
    said = [q.options[0].label if q.options else "…" for q in form[:3]]
    return "; ".join(s if n == 1 else f"{n}: {s}" for n, s in enumerate(said, start=1))

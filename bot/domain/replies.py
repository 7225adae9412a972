"""Thread replies as answers (answer rule 6): a reply names one option by 1-based number (``2``,
``#2``, ``2.``), id or label (case and whitespace ignored); on a free-text question it is the
answer. Parsing never raises or judges: an over-long text is returned whole for the rules to refuse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeAlias

from bot.domain import forms
from bot.domain.model import AnswerMode, Attempt, Elicitation, Identity, Option
from bot.domain.rules import MAX_FREE_TEXT, USE_PRIVATE_FORM


@dataclass(frozen=True)
class ChoiceReply:
    option_id: str


@dataclass(frozen=True)
class MultiChoiceReply:
    """Several options named on a multiple-choice question, in the order written; ``note``: the
    lines after the first, on a question that takes a note with its options."""

    option_ids: tuple[str, ...]
    note: str | None = None


@dataclass(frozen=True)
class TextReply:
    text: str


@dataclass(frozen=True)
class FormReply:
    """A form answered in one reply (``1: a; 2: b, c; 3: words``): answers by question id."""

    answers: dict[str, Any]


@dataclass(frozen=True)
class HelpReply:
    message: str
    """How to answer: the numbered options and whether a written answer works."""


Reply: TypeAlias = ChoiceReply | MultiChoiceReply | TextReply | FormReply | HelpReply

_NUMBER = re.compile(r"#?\s*([0-9]{1,9})\s*[.)]?")
_EDGE_PUNCTUATION = "`'\"*_\u2018\u2019\u201c\u201d"
_TRAILING_PUNCTUATION = ".!"


def strip_reply_fallback(body: str) -> str:
    """Drop a Matrix rich-reply fallback (the leading ``>`` lines and one blank line after them):
    quoted text is someone else's words (rule 8), never the reply."""
    lines = body.replace("\r\n", "\n").split("\n")
    if not lines[0].startswith(">"):
        return body
    start = 0
    while start < len(lines) and lines[start].startswith(">"):
        start += 1
    if start < len(lines) and not lines[start].strip():
        start += 1
    return "\n".join(lines[start:])


def _normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def _forms(part: str) -> set[str]:
    """The normalised ways a part may name an option: as written, and without decoration."""
    plain = _normalise(part)
    bare = plain.strip(_EDGE_PUNCTUATION).rstrip(_TRAILING_PUNCTUATION).strip(_EDGE_PUNCTUATION)
    return {form for form in (plain, bare.strip()) if form}


def _named(options: tuple[Option, ...], part: str) -> str | None:
    """The id of the one option ``part`` names, or None (none or several)."""
    forms = _forms(part)
    if not forms:
        return None
    found: set[str] = set()
    number = _NUMBER.fullmatch(_normalise(part))
    if number is not None:
        index = int(number.group(1))
        if 1 <= index <= len(options):
            found.add(options[index - 1].id)
    for option in options:
        if forms & (_forms(option.id) | _forms(option.label)):
            found.add(option.id)
    return found.pop() if len(found) == 1 else None


def _named_several(options: tuple[Option, ...], text: str) -> tuple[str, ...] | None:
    """Comma-separated names, each naming one option; None when any part names none."""
    parts = [p for p in text.split(",") if p.strip()]
    ids: list[str] = []
    for part in parts:
        option_id = _named(options, part)
        if option_id is None:
            return None
        ids.append(option_id)
    return tuple(ids) or None


def _option_lines(options: tuple[Option, ...]) -> list[str]:
    lines = []
    for number, option in enumerate(options, start=1):
        line = f"{number}. {option.label} ({option.id})"
        if option.admin_only:
            line += " (workspace admins only)"
        if option.requires_text:
            line += " (needs a comment: use the form on the message)"
        lines.append(line)
    return lines


def _limit(e: Elicitation) -> str:
    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    return f"at most {limit:,} characters"


def help_message(e: Elicitation) -> str:
    """How to answer ``e`` in a thread reply."""
    if len(e.form) > 1:
        return forms.form_help(e.form)
    mode = e.answer_mode
    if mode is AnswerMode.SECRET:
        return USE_PRIVATE_FORM
    if mode is AnswerMode.FREE_TEXT or (mode is AnswerMode.CHOICE_OR_TEXT and not e.options):
        return f"To answer, reply in this thread with your answer ({_limit(e)})."
    if mode is AnswerMode.ACKNOWLEDGE and not e.options:
        return "To acknowledge, reply in this thread or use the button on the message."
    if not e.options:
        return "This question offers no options to choose from; answer it in the web inbox."
    if mode is AnswerMode.MULTI_CHOICE:
        intro = (
            "To answer, reply with the numbers, ids or labels of one or more options, "
            "separated by commas (for example: 1, 3)"
            + (", and a note on the next lines if you like:" if e.takes_note else ":")
        )
    else:
        intro = "To answer, reply with the number, id or label of one option:"
    lines = [intro, *_option_lines(e.options)]
    if mode is AnswerMode.CHOICE_OR_TEXT:
        lines.append(f"Or reply with your own answer as text ({_limit(e)}).")
    return "\n".join(lines)


def _with_note(options: tuple[Option, ...], text: str) -> MultiChoiceReply | None:
    """Options named on the first line, a note on the lines after it."""
    first, _, rest = text.partition("\n")
    note = rest.strip()
    if not note:
        return None
    named = _named(options, first)
    several = (named,) if named is not None else _named_several(options, first)
    return None if several is None else MultiChoiceReply(several, note)


def parse_reply(e: Elicitation, body: str) -> Reply:
    """What a thread reply on ``e`` means: an option, several, a text, or help. Never raises."""
    mode = e.answer_mode
    if mode is AnswerMode.SECRET:
        # Never echo or keep a secret typed in chat; point to the private form.
        return HelpReply(USE_PRIVATE_FORM)
    text = strip_reply_fallback(body).strip()
    if not text:
        return HelpReply(help_message(e))
    if len(e.form) > 1:
        answers = forms.parse_form_reply(e.form, text)
        return FormReply(answers) if answers is not None else HelpReply(forms.form_help(e.form))
    if mode is AnswerMode.FREE_TEXT:
        return TextReply(text)
    if e.options:
        option_id = _named(e.options, text)
        if option_id is not None:
            return ChoiceReply(option_id)
        if mode is AnswerMode.MULTI_CHOICE:
            several = _named_several(e.options, text)
            if several is not None:
                if len(several) == 1:
                    return ChoiceReply(several[0])
                return MultiChoiceReply(several)
            if e.takes_note:
                noted = _with_note(e.options, text)
                if noted is not None:
                    return noted
    if mode in (AnswerMode.CHOICE_OR_TEXT, AnswerMode.ACKNOWLEDGE):
        return TextReply(text)
    return HelpReply(help_message(e))


def reply_attempt(e: Elicitation, body: str, who: Identity, via: str) -> Attempt | HelpReply:
    """A thread reply's attempt, or how to answer when it names nothing."""
    parsed = parse_reply(e, body)
    if isinstance(parsed, ChoiceReply):
        return Attempt(respondent=who, option_ids=(parsed.option_id,), via=via)
    if isinstance(parsed, MultiChoiceReply):
        return Attempt(respondent=who, option_ids=parsed.option_ids, text=parsed.note, via=via)
    if isinstance(parsed, TextReply):
        return Attempt(respondent=who, text=parsed.text, via=via)
    if isinstance(parsed, FormReply):
        return Attempt(respondent=who, fields={"answers": parsed.answers}, via=via)
    return parsed

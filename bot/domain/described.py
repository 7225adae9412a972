"""What an answer said, in words for people: option labels, the quoted text (cut), a form's
answers question by question. Pure."""

from __future__ import annotations

from typing import Any

from bot.domain.model import Answer, Elicitation

DESCRIBE_TEXT_LIMIT = 200
"""Code points of an answer's text shown in "already answered" and result messages."""
SURFACE_NAMES = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


def describe_answer(e: Elicitation, answer: Answer) -> str:
    """What was answered, for people: option labels, the quoted text (cut), or ``(secret)``."""
    if answer.secret:
        return "(secret)"
    answers = answer.fields.get("answers")
    if e.form and isinstance(answers, dict) and answers:
        return _describe_form(e, answers, answer.text)
    labels = ", ".join(
        option.label if (option := e.option(i)) is not None else i for i in answer.option_ids
    )
    quoted = f"“{_flat(answer.text)}”" if answer.text is not None and answer.text.strip() else ""
    if labels and quoted:
        return f"{labels}: {quoted}"
    return labels or quoted or "Acknowledged"


def clip(text: str) -> str:
    """At most :data:`DESCRIBE_TEXT_LIMIT` code points, ``…`` marking a cut."""
    return text if len(text) <= DESCRIBE_TEXT_LIMIT else text[: DESCRIBE_TEXT_LIMIT - 1] + "…"


def _flat(text: str) -> str:
    return clip(" ".join(text.split()))


def _describe_form(e: Elicitation, answers: dict[str, Any], comment: str | None) -> str:
    """A form's answers, question by question: ``Channel: beta · Targets: linux, macos``."""
    parts = []
    for q in e.form:
        given = answers.get(q.id)
        if not isinstance(given, dict):
            continue
        said = [str(label) for label in given.get("selected") or ()]
        text = given.get("text")
        if isinstance(text, str) and text.strip():
            said.append(f"“{_flat(text)}”")
        if said:
            parts.append(f"{q.header or _flat(q.question)}: {', '.join(said)}")
    if comment is not None and comment.strip():
        parts.append(f"comment: “{_flat(comment)}”")
    return " · ".join(parts) or "Answered"


def platform_name(via: str) -> str:
    platform = via.split(":", 1)[0]
    return SURFACE_NAMES.get(platform, platform)

"""What an answer said, in words for people: option labels, the quoted text (cut), a form's
answers question by question. Pure."""

from __future__ import annotations

from typing import Any

from bot.domain.model import Answer, Elicitation

DESCRIBE_TEXT_LIMIT = 200
"""Code points of an answer's text shown in "already answered" and result messages."""


def describe_answer(e: Elicitation, answer: Answer) -> str:
    """What was answered, for people: option labels, the quoted text (cut), or ``(secret)``."""
    if answer.secret:
        return "(secret)"
    answers = answer.fields.get("answers")
    if e.form and isinstance(answers, dict) and answers:
        return _describe_form(e, answers, answer.text)
    parts: list[str] = []
    for option_id in answer.option_ids:
        option = e.option(option_id)
        parts.append(option.label if option is not None else option_id)
    labels = ", ".join(parts)
    quoted = ""
    if answer.text is not None and answer.text.strip():
        flat = " ".join(answer.text.split())
        if len(flat) > DESCRIBE_TEXT_LIMIT:
            flat = flat[: DESCRIBE_TEXT_LIMIT - 1] + "…"
        quoted = f"“{flat}”"
    if labels and quoted:
        return f"{labels}: {quoted}"
    return labels or quoted or "Acknowledged"


def _flat(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= DESCRIBE_TEXT_LIMIT else flat[: DESCRIBE_TEXT_LIMIT - 1] + "…"


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
    return {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}.get(platform, platform)

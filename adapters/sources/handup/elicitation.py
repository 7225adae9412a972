"""A checked handup Request in, an Elicitation out. elicitbot stands in for the handup daemon,
assigning what it assigns; times in a Request are Unix milliseconds.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.sources.common import digest
from adapters.sources.handup.duration import parse_timeout
from adapters.sources.handup.previews import context_items, preview_items
from adapters.sources.handup.validation import CheckedRequest
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Context,
    Deadlines,
    Elicitation,
    ElicitationKey,
    FormQuestion,
    Kind,
    Meaning,
    Option,
)

SOURCE = "handup"
SUBJECT_SCHEMA = "handup.request"
CONTENT_FIELDS = (
    *("kind", "title", "summary", "tool", "risk"),
    *("source", "previews", "options", "input"),
)
"""What a person decides on: ``content_hash`` is the SHA-256 of these, canonical JSON."""


def new_request_id() -> str:
    return f"hr_{uuid.uuid4().hex}"


def dedupe_request_id(dedupe_key: str, generation: int) -> str:
    """Retries of a pending id-less request land on its id; once decided, a new generation."""
    digest = hashlib.sha256(f"{generation}:{dedupe_key}".encode()).hexdigest()
    return f"hr_{digest[:32]}"


def key_of(request_id: str) -> ElicitationKey:
    return ElicitationKey(f"{SOURCE}:{request_id}")


def to_elicitation(
    checked: CheckedRequest,
    *,
    request_id: str,
    now: datetime,
    default_timeout: timedelta | None = None,
) -> Elicitation:
    """Expiry: ``timeout`` when present (``none``/null: never); else ``expires_at`` as given; else
    ``default_timeout`` (the config's, "absent uses config"), if any."""
    # ``integration`` is server-verified in handup; elicitbot verifies none.
    source = {**(checked.document["source"] or {}), "integration": None}
    document = {**checked.document, "source": source, "id": request_id, "status": "pending"}
    document["created_at"] = to_millis(now)
    expires = _expiry(checked, now, default_timeout)
    document["expires_at"] = to_millis(expires) if expires is not None else None
    document["content_hash"] = content_hash(document)
    kind = document["kind"]
    questions = _questions(document)
    mode, options = _answers_offered(document, questions)
    summary = document["summary"] or ""
    return Elicitation(
        source=SOURCE,
        source_id=request_id,
        context=Context(conversation_id=source.get("session")),
        asker=source.get("agent") or f"{SOURCE}:agent",
        kind=Kind.QUESTION if kind == "question" else Kind.APPROVAL,
        title=document["title"],
        question=_question_text(summary, questions),
        answer_mode=mode,
        options=options,
        form=_form(questions),
        subject=ApprovalSubject(
            id=request_id,
            digest=document["content_hash"],
            schema_=SUBJECT_SCHEMA,
            revision=0,
            # What it does first, then where it comes from (risk, tool, agent, host…): the
            # surfaces show the context as one compact section after the previews.
            preview=tuple(item for p in document["previews"] for item in preview_items(p))
            + tuple(context_items(document)),
        ),
        deadlines=Deadlines(
            expires_at=expires, on_timeout=document["on_timeout"] if expires else None
        ),
        created_at=now,
        extra={"request": document, **({"form": questions} if questions is not None else {})},
    )


def to_millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _expiry(
    checked: CheckedRequest, now: datetime, default_timeout: timedelta | None
) -> datetime | None:
    document = checked.document
    if checked.has_timeout:
        timeout = document["timeout"]
        duration = parse_timeout(timeout) if timeout is not None else None
        return now + duration if duration is not None else None
    if given := document["expires_at"]:
        return datetime.fromtimestamp(given / 1000, UTC)
    return now + default_timeout if default_timeout is not None else None


def content_hash(document: Mapping[str, Any]) -> str:
    return digest({name: document.get(name) for name in CONTENT_FIELDS})


def _questions(document: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A question request's questions, each with its defaults; None for other kinds."""
    if document["kind"] != "question":
        return None
    return [
        {
            "id": question["id"],
            "header": question.get("header"),
            "question": question["question"],
            "multi": bool(question.get("multi", False)),
            "allow_free_text": bool(question.get("allow_free_text", False)),
            "recommended": question.get("recommended"),
            "options": [
                {
                    "label": o["label"],
                    "description": o.get("description"),
                    "preview": o.get("preview"),
                }
                for o in question.get("options") or []
            ],
        }
        for question in (document["input"] or {}).get("questions") or []
    ]


def _form(questions: list[dict[str, Any]] | None) -> tuple[FormQuestion, ...]:
    """The questions as the domain checks their answers (option ids are the labels)."""
    return tuple(
        FormQuestion(
            id=q["id"],
            question=q["question"],
            header=q["header"],
            multi=q["multi"],
            allow_free_text=q["allow_free_text"],
            options=_options(q),
        )
        for q in questions or ()
    )


def _options(question: Mapping[str, Any]) -> tuple[Option, ...]:
    """A question's options: ids are the labels."""
    return tuple(
        Option(
            id=o["label"],
            label=o["label"],
            description=o["description"],
            recommended=index == question["recommended"],
        )
        for index, o in enumerate(question["options"])
    )


def _answers_offered(
    document: Mapping[str, Any], questions: list[dict[str, Any]] | None
) -> tuple[AnswerMode, tuple[Option, ...]]:
    """An approval: one of its options. One question: its options (ids are the labels), or a
    text. Several questions: a form (``extra["form"]``); in chat, a written answer."""
    if questions is None:
        required = ((document["input"] or {}).get("feedback")) == "required_on_deny"
        return AnswerMode.SINGLE_CHOICE, tuple(
            Option(
                id=o["id"],
                label=o["label"],
                meaning=Meaning.APPROVE if o["outcome"] == "approve" else Meaning.REJECT,
                outcome=o["outcome"],
                style=o.get("style"),
                requires_text=required and o["outcome"] == "deny",
            )
            for o in document["options"]
        )
    if len(questions) != 1 or not questions[0]["options"]:
        return AnswerMode.FREE_TEXT, ()
    only = questions[0]
    options = _options(only)
    if only["multi"]:
        return AnswerMode.MULTI_CHOICE, options
    if only["allow_free_text"]:
        return AnswerMode.CHOICE_OR_TEXT, options
    return AnswerMode.SINGLE_CHOICE, options


def _question_text(summary: str, questions: list[dict[str, Any]] | None) -> str:
    parts = [summary.strip()] if summary.strip() else []
    if questions is None:
        return "\n\n".join(parts)
    if len(questions) == 1:
        only = questions[0]
        head = f"**{only['header']}** — " if only["header"] else ""
        parts.append(head + only["question"])
        return "\n\n".join(parts)
    for number, q in enumerate(questions, start=1):
        head = f"{number}. **{q['header']}** — " if q["header"] else f"{number}. "
        lines = [head + q["question"]]
        for index, o in enumerate(q["options"]):
            line = f"   - {o['label']}"
            if index == q["recommended"]:
                line += " (recommended)"
            if o["description"]:
                line += f" — {o['description']}"
            lines.append(line)
        if q["multi"]:
            lines.append("   (choose one or more)")
        if q["allow_free_text"] or not q["options"]:
            lines.append("   (a written answer works)")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)

"""Pinework questions in and answers out, as pure functions."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from adapters.shared.timestamps import parse_rfc3339
from adapters.sources.common import loc_path, repeats
from adapters.sources.pinework import models as upstream
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import Answer, AnswerMode, Context, Elicitation, Kind, Option, Status
from bot.domain.ports import PromptView

SOURCE = "pinework"
UPSTREAM_VIA = "pinework"  # ``Answer.via`` of an answer given in Pinework (never written back)
SYSTEM_CLOSE = "[system]"  # shown for a system close without ``[system:<reason>]`` text
QUESTIONS_PATH = "/api/v1/questions"
PAGE_LIMIT = 100  # the most a list page holds (spec: 25 by default, 100 at most)
SECRET_MAX = 10_000  # characters of a secret value

_MODES = {
    # In Pinework's own threads a reply is answer.text with selected null, but the answer route
    # requires one key for single_select and one or more for multi_select, so a reply in our
    # threads must name its options (:mod:`bot.domain.replies`).
    "free_text": AnswerMode.FREE_TEXT,
    "single_select": AnswerMode.SINGLE_CHOICE,
    "multi_select": AnswerMode.MULTI_CHOICE,
    "secret_input": AnswerMode.SECRET,
}


def base_of(base_url: str) -> str:
    return base_url.rstrip("/")


def channel_of(base_url: str) -> str:
    return f"{SOURCE}:{base_of(base_url)}"


def question_url(base_url: str, question_id: str) -> str:
    """The id is path-escaped: it comes from upstream."""
    return f"{base_of(base_url)}{QUESTIONS_PATH}/{quote(question_id, safe='')}"


def account_key(base_url: str, workspace: str) -> str:
    """Which configured ``[[sources.pinework]]`` entry (and so which token) a question came from."""
    return f"{base_of(base_url)}#{workspace}"


def parse_question(data: Any) -> upstream.Question:
    """One question, read liberally; PayloadRejected names what makes it unusable."""
    try:
        question = upstream.Question.model_validate(data)
    except ValidationError as exc:
        raise PayloadRejected(
            [FieldProblem(loc_path(e["loc"]), e["msg"]) for e in exc.errors()]
        ) from None
    problems: list[FieldProblem] = []
    if not question.id.strip():
        problems.append(FieldProblem("id", "must not be empty"))
    if question.answer_mode not in _MODES:
        modes = ", ".join(upstream.ANSWER_MODES)
        problems.append(FieldProblem("answerMode", "must be one of " + modes))
    elif question.answer_mode in upstream.SELECT_MODES:
        problems.extend(_option_problems(question.options or []))
    if problems:
        raise PayloadRejected(problems)
    return question


def unwrap_question(body: Any) -> Any:
    """``GET /questions/{id}`` may wrap the question (``{"question": …}`` or ``{"data": …}``)."""
    if isinstance(body, Mapping):
        for wrapper in ("question", "data"):
            if isinstance(inner := body.get(wrapper), Mapping):
                return inner
    return body


def _option_problems(options: list[upstream.QuestionOption]) -> list[FieldProblem]:
    if not options:
        return [FieldProblem("options", "a select question needs at least one option")]
    return [
        FieldProblem(f"options[{index}].key", "duplicates another key")
        for index, _ in repeats(option.key for option in options)
    ]


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 / RFC 3339 time as aware UTC (no offset: UTC); None when absent or unreadable."""
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return parse_rfc3339(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def to_elicitation(
    question: upstream.Question, *, base_url: str, workspace: str, now: datetime
) -> Elicitation:
    mode = _MODES[question.answer_mode]
    asked_by = question.asked_by or upstream.Principal()
    options: tuple[Option, ...] = ()
    if question.answer_mode in upstream.SELECT_MODES:
        options = tuple(Option(id=o.key, label=o.label) for o in question.options or [])
    return Elicitation(
        source=SOURCE,
        source_id=question.id,
        workspace=question.workspace_id or workspace,
        context=Context(
            task_id=question.task_id,
            conversation_id=question.conversation_id,
            run_id=question.run_id,
        ),
        asker=asked_by.id or f"{SOURCE}:{asked_by.type or 'unknown'}",
        kind=Kind.QUESTION,
        title="Pinework question",
        question=_text(question),
        answer_mode=mode,
        options=options,
        max_length=SECRET_MAX if mode is AnswerMode.SECRET else None,
        takes_note=question.answer_mode == "multi_select",
        created_at=parse_time(question.created_at) or now,
        extra={
            "account": account_key(base_url, workspace),
            "baseUrl": base_of(base_url),
            "questionId": question.id,
            "answerMode": question.answer_mode,
            "sessionId": question.session_id,
        },
    )


def _text(question: upstream.Question) -> str:
    """The Markdown shown: the question, and for a secret what is asked (names, never values)."""
    text = question.question_text
    secret = question.secret_request
    if question.answer_mode != "secret_input" or secret is None:
        return text
    lines = [text.rstrip(), ""] if text.strip() else []
    lines.append("**Secret requested**")
    for label, value in (
        ("Name", secret.name),
        ("Provider", secret.provider),
        ("Given to the agent as", secret.env),
        ("Reason", secret.reason),
    ):
        if value:
            lines.append(f"- {label}: {value}")
    lines.append("Answer through the private form; the value goes straight to Pinework.")
    return "\n".join(lines)


def inbound_id(e: Elicitation) -> str:
    """``<question id>:<digest>``: changes only when what we took from the question changes
    (not ``created_at``, which falls back to the poll's time when Pinework's is unreadable)."""
    taken = e.model_dump(mode="json", exclude={"created_at"})
    canonical = json.dumps(taken, sort_keys=True, separators=(",", ":"))
    return f"{e.source_id}:{hashlib.sha256(canonical.encode()).hexdigest()[:20]}"


@dataclass(frozen=True)
class Page:
    questions: list[Any]
    starting_after: str | None


def read_page(body: Any, *, limit: int = PAGE_LIMIT) -> Page:
    """A list page: items from ``data`` (or ``items``, or a bare list); the next cursor from
    ``nextCursor``, else (``hasMore`` or a full page) the last id, passed as ``startingAfter``."""
    page: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
    items: Any = body if isinstance(body, list) else page.get("data")
    if not isinstance(items, list):
        items = page.get("items")
    if not isinstance(items, list):
        msg = "a question list must carry its questions in 'data' or 'items'"
        raise ValueError(msg)  # noqa: TRY004 - a malformed reply, not a wrong argument type
    last = items[-1].get("id") if items and isinstance(items[-1], Mapping) else None
    last_id = last if isinstance(last, str) and last else None
    if "nextCursor" in page:
        cursor = page["nextCursor"]
        return Page(items, cursor if isinstance(cursor, str) and cursor else None)
    if "hasMore" in page:
        return Page(items, last_id if page["hasMore"] is True else None)
    return Page(items, last_id if len(items) >= limit else None)


def upstream_close(
    question: upstream.Question, e: Elicitation, now: datetime
) -> tuple[Status, Answer] | None:
    """How a question no longer open in Pinework closes our copy (None while open): answered by
    a person there (never written back), or cancelled carrying ``[system:<reason>]`` to show."""
    if question.status == upstream.OPEN:
        return None
    given = question.answer or upstream.UpstreamAnswer()
    at = parse_time(question.answered_at) or parse_time(question.updated_at) or now
    person = question.answered_by
    if person is not None and person.id:
        secret = e.answer_mode is AnswerMode.SECRET
        return Status.ANSWERED, Answer(
            option_ids=tuple(given.selected or ()),
            text=None if secret else given.text,
            secret=secret,
            respondent=f"{SOURCE}:{person.id}",
            principal=person.id,
            display_name=person.id,
            via=UPSTREAM_VIA,
            at=at,
        )
    return Status.CANCELLED, Answer(
        text=given.text or SYSTEM_CLOSE, respondent="system", via=UPSTREAM_VIA, at=at
    )


def answer_body(view: PromptView) -> dict[str, Any] | None:
    """The answer route's body; None unless answered here, and not a secret (sent already)."""
    answer = view.answer
    if view.status is not Status.ANSWERED or answer is None:
        return None
    if answer.secret or answer.via == UPSTREAM_VIA:
        return None
    return {"answer": {"text": answer.text, "selected": list(answer.option_ids) or None}}


def error_code(body: Any) -> str | None:
    """The code of an error reply, in any of the four shapes an error takes."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("code"), str):
        return str(error["code"])
    if isinstance(body.get("code"), str):
        return str(body["code"])
    if isinstance(error, str):
        return error
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        code = errors[0].get("code")
        return code if isinstance(code, str) else None
    return None

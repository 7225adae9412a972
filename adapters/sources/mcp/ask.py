"""The ``ask`` tool's arguments as an elicitation, and its state as the tools' result. The
subject's digest covers question, options, form and previews: approved is exactly what was shown.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from adapters.sources.common import digest, repeats, utc_text
from adapters.sources.mcp import form as forms
from bot.domain.bounds import check_elicitation, id_problem
from bot.domain.errors import FieldProblem
from bot.domain.model import (
    Answer,
    AnswerMode,
    ApprovalSubject,
    Context,
    Deadlines,
    Elicitation,
    ElicitationKey,
    Kind,
    Meaning,
    Option,
    PreviewItem,
    Route,
    RouteMatch,
    Status,
)
from bot.domain.ports import PromptView

SOURCE = "mcp"
SUBJECT_SCHEMA = "mcp.ask"
TIMEOUT_MAX = 90 * 24 * 3600  # 90 days, the engine's longest expiry
FREE_TEXT_MAX = 1_048_576

NAMES: dict[str, str] = {
    "source_id": "id",
    "workspace": "workspace",
    "context.board_id": "board",
    "asker": "agent",
    "question": "question",
    "title": "question",
    "options": "options",
    "subject.preview": "previews",
    "deadlines.on_timeout": "on_timeout",
}
"""The tool's argument names of the normalised fields, for ``check_elicitation``."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AskOption(_Args):
    id: str = Field(min_length=1, description="Stable id, returned in answer.option_ids")
    label: str = Field(min_length=1, description="What the person sees on the button")
    description: str | None = None
    meaning: Literal["approve", "reject"] | None = Field(
        default=None, description="approve: shown and checked as an approval (rule 2)"
    )
    recommended: bool = False


class FreeText(_Args):
    max_length: int | None = Field(default=None, ge=1, le=FREE_TEXT_MAX)


class AskPreview(_Args):
    type: Literal["text", "markdown", "code", "diff", "command", "link"]
    label: str | None = None
    text: str | None = None
    url: str | None = None
    language: str | None = None


class AskError(forms.SchemaError):
    """The ``ask`` arguments' problems, each naming its argument."""


def asker_of(agent: str) -> str:
    return f"{SOURCE}:{agent}"


def key_of(question_id: str) -> ElicitationKey:
    """The elicitation key of a tool's ``id`` (the bare id, or already ``mcp:<id>``)."""
    own = question_id.startswith(f"{SOURCE}:")
    return ElicitationKey(question_id if own else f"{SOURCE}:{question_id}")


def keyed_id(agent: str, idempotency_key: str) -> str:
    """The same for the same agent and key, never the same as another agent's."""
    return "k" + hashlib.sha256(f"{agent}\0{idempotency_key}".encode()).hexdigest()[:40]


_MEANINGS = {"approve": Meaning.APPROVE, "reject": Meaning.REJECT}


def _options(options: Sequence[AskOption], on_timeout: str | None) -> tuple[Option, ...]:
    """Only the ``on_timeout`` option has an outcome: deadlines.timeout_option matches it."""
    return tuple(
        Option(
            id=o.id,
            label=o.label,
            description=o.description,
            meaning=_MEANINGS.get(o.meaning or "", Meaning.CHOOSE),
            recommended=o.recommended,
            style={"approve": "primary", "reject": "danger"}.get(o.meaning or ""),
            outcome=("approve" if o.meaning == "approve" else "deny")
            if o.id == on_timeout
            else None,
        )
        for o in options
    )


def _shape_problems(
    options: Sequence[AskOption],
    free_text: FreeText | None,
    form: Any,
    timeout_seconds: int | None,
    on_timeout: str | None,
    url: str | None,
) -> list[FieldProblem]:
    problems: list[FieldProblem] = []
    if form is not None and (options or free_text is not None):
        problems.append(FieldProblem("form", "cannot be given with options or free_text"))
    if url is None and form is None and not options and free_text is None:
        problems.append(FieldProblem("options", "give options, free_text or a form to answer"))
    ids = [o.id for o in options]
    problems += [FieldProblem(f"options[{i}].id", "must be distinct") for i, _ in repeats(ids)]
    if timeout_seconds is not None and not 1 <= timeout_seconds <= TIMEOUT_MAX:
        problems.append(FieldProblem("timeout_seconds", f"must be between 1 and {TIMEOUT_MAX}"))
    if on_timeout is not None:
        if on_timeout not in ids:
            problems.append(FieldProblem("on_timeout", "must be the id of one of the options"))
        elif timeout_seconds is None:
            problems.append(FieldProblem("on_timeout", "needs timeout_seconds"))
    return problems


def _form_answers(form: forms.Form) -> tuple[tuple[Option, ...], AnswerMode]:
    """One question: by its options or text (so a reply or a button answers it); more: the form."""
    if len(form.questions) > 1:
        return (), AnswerMode.FREE_TEXT
    only = form.questions[0]
    if only.multi:
        return only.options, AnswerMode.MULTI_CHOICE
    if only.options and only.takes_text:
        return only.options, AnswerMode.CHOICE_OR_TEXT
    if only.options:
        return only.options, AnswerMode.SINGLE_CHOICE
    return (), AnswerMode.FREE_TEXT


def form_content(schema: Any, answer: Answer) -> dict[str, Any] | list[FieldProblem]:
    """A form's answers, or a one-question form's option or text as that question's answer."""
    form = forms.parse_form(schema)
    answers = answer.fields.get("answers")
    if not isinstance(answers, dict) and len(form.fields) == 1:
        text = None if answer.secret else answer.text
        answers = {form.fields[0].name: {"selected": list(answer.option_ids), "text": text}}
    return forms.content_of(form, answers if isinstance(answers, dict) else {})


def route_for(
    *,
    workspace: str | None,
    board: str | None,
    destinations: Sequence[str] | None,
    allowed: Sequence[str],
) -> Route | None:
    """The named ``destinations`` (each one the agent's config lists); else the config's routes
    (None) for a workspace or board; else the agent's own destinations, if any."""
    if destinations:
        problems = [
            FieldProblem(f"destinations[{i}]", f"{d!r} is not one of this agent's destinations")
            for i, d in enumerate(destinations)
            if d not in allowed
        ]
        if problems:
            raise AskError(problems)
        return Route(
            match=RouteMatch(source=SOURCE),
            destinations=tuple(dict.fromkeys(destinations)),
            origin="request",
        )
    if workspace is not None or board is not None or not allowed:
        return None
    return Route(match=RouteMatch(source=SOURCE), destinations=tuple(allowed), origin="request")


_PERSON = re.compile(r"^(slack:[UW][A-Z0-9]+|matrix:@[^:\s]+:\S+)$")
URL_MAX = 8_192  # longer is no address anyone types


def url_route(url: str, destinations: Sequence[str] | None, allowed: Sequence[str]) -> Route:
    """URL mode: a direct message to the one person named (never a sign-in link in a channel)."""
    problems: list[FieldProblem] = []
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or len(url) > URL_MAX:
        problems.append(FieldProblem("url", f"must be an http(s) address of at most {URL_MAX:,}"))
    named = route_for(workspace=None, board=None, destinations=destinations, allowed=allowed)
    people = [d for d in (named.destinations if named else ()) if _PERSON.match(d)]
    if len(people) != 1:
        problems.append(
            FieldProblem(
                "url",
                "goes to one person only, as a direct message: the destinations must name "
                f"exactly one person (slack:U…, matrix:@…), not {len(people)}",
            )
        )
    if problems:
        raise AskError(problems)
    return Route(match=RouteMatch(source=SOURCE), destinations=(people[0],), origin="request")


def to_elicitation(
    *,
    question_id: str,
    agent: str,
    question: str,
    options: Sequence[AskOption] = (),
    free_text: FreeText | None = None,
    form: Any = None,
    previews: Sequence[AskPreview] = (),
    workspace: str | None = None,
    board: str | None = None,
    timeout_seconds: int | None = None,
    on_timeout: str | None = None,
    url: str | None = None,
    now: datetime,
) -> Elicitation:
    problems = _shape_problems(options, free_text, form, timeout_seconds, on_timeout, url)
    if url is not None and (options or free_text is not None or form is not None or previews):
        problems.append(FieldProblem("url", "takes no options, free_text, form or previews"))
    if not question.strip():
        problems.append(FieldProblem("question", "must not be empty"))
    parsed_form: forms.Form | None = None
    if form is not None:
        try:
            parsed_form = forms.parse_form(form)
        except forms.SchemaError as exc:
            problems.extend(exc.problems)
        else:
            problems.extend(
                FieldProblem(f"form.properties.{q.id}", bad)
                for q in parsed_form.questions
                if (bad := id_problem(q.id, required=True)) is not None
            )
    if problems:
        raise AskError(problems)
    option_values = _options(options, on_timeout)
    approving = any(o.approving for o in option_values)
    if url is not None:
        question = (
            f"{question}\n\nThe tool asks you to open this address yourself (elicitbot has not "
            f"opened it and shows no preview of it):\n\n{url}"
        )
        mode = AnswerMode.ACKNOWLEDGE
    elif parsed_form is not None:
        option_values, mode = _form_answers(parsed_form)
    elif options and free_text is not None:
        mode = AnswerMode.CHOICE_OR_TEXT
    elif options:
        mode = AnswerMode.SINGLE_CHOICE
    else:
        mode = AnswerMode.FREE_TEXT
    preview = tuple(
        PreviewItem(type=p.type, label=p.label, text=p.text, url=p.url, language=p.language)
        for p in previews
    )
    subject = None
    if preview or approving:
        decisive = {
            "question": question,
            "options": [o.model_dump(mode="json") for o in options],
            "form": form,
            "previews": [p.model_dump(mode="json") for p in previews],
        }
        subject = ApprovalSubject(
            id=question_id,
            digest=digest(decisive),
            schema_=SUBJECT_SCHEMA,
            revision=0,
            preview=preview,
        )
    expires = None if timeout_seconds is None else now + timedelta(seconds=timeout_seconds)
    e = Elicitation(
        source=SOURCE,
        source_id=question_id,
        workspace=workspace,
        context=Context(board_id=board),
        asker=asker_of(agent),
        kind=Kind.APPROVAL if approving else Kind.QUESTION,
        title=f"Question from {agent}",
        question=question,
        answer_mode=mode,
        options=option_values,
        max_length=None if free_text is None else free_text.max_length,
        form=() if parsed_form is None else parsed_form.questions,
        subject=subject,
        deadlines=Deadlines(
            expires_at=expires,
            on_timeout=None
            if on_timeout is None
            else next(o.outcome for o in option_values if o.id == on_timeout),
        ),
        created_at=now,
        extra={"agent": agent}
        | ({} if form is None else {"form": form})
        | ({} if url is None else {"url": url}),
    )
    if bounds := check_elicitation(e, names=NAMES):
        raise AskError(bounds)
    return e


def result_of(view: PromptView, delivered: bool | None = None) -> dict[str, Any]:
    """``answer.fields`` is a form's content as the schema types it (a value it refuses is left
    out and named in ``problems``); ``answer`` is null while pending or closed unanswered."""
    e = view.elicitation
    status = view.status
    answer = view.answer
    body: dict[str, Any] = {"id": e.source_id, "status": status.value, "answer": None}
    if delivered is not None:  # a URL elicitation: whether its direct message is there
        body["delivered"] = delivered
    if answer is None or status is Status.PENDING:
        return body
    schema = e.extra.get("form")
    content = dict(answer.fields) if schema is None else form_content(schema, answer)
    problems = content if isinstance(content, list) else []
    body["answer"] = {
        "option_ids": list(answer.option_ids),
        "text": None if answer.secret else answer.text,
        "fields": {} if isinstance(content, list) else content,
        "by": answer.respondent,
        "at": utc_text(answer.at),
    }
    if problems:
        body["answer"]["problems"] = [{"field": p.loc, "message": p.message} for p in problems]
    return body

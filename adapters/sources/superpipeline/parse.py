"""SuperPipeline ``elicitation.pending`` v1: a CloudEvent in, a normalised ``Elicitation`` out."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from adapters.shared.cloudevents import CloudEvent
from adapters.sources.common import join_loc, loc_path, repeats
from adapters.sources.superpipeline import models as upstream
from bot.domain.bounds import FIELD_NAMES, check_cloudevent, check_elicitation
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import AnswerMode, Elicitation, Kind, Meaning, Scope

SOURCE = "superpipeline"
CE_TYPE = "com.superjackfruit.superpipeline.elicitation.pending.v1"
SUBJECT_RE = re.compile(r"evt\.(?P<workspace>[^.*>\s]+)\.superpipeline\.elicitation\.pending")
"""The NATS subject the relay files the event under; ``<workspace>`` is one NATS token."""

_SUBJECT_SHAPE = "must be evt.<workspace>.superpipeline.elicitation.pending"
APPROVAL_EMPTY = ("cardId", "runId", "stageKey")
"""What a broker approval request (``approvalRequestId``) leaves empty (spec 000)."""
_TYPE_MESSAGES = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
}
_EVENT_NAMES = FIELD_NAMES[SOURCE]
"""Bounds problems named relative to the event (``data.boardId``, ``subject``)."""
_BODY_NAMES = {
    **{
        field: name.removeprefix("data.")
        for field, name in _EVENT_NAMES.items()
        if isinstance(name, str)
    },
    "workspace": "workspace",
    "extra": "",
}
"""... and relative to the body (``boardId``), for :func:`parse_body`."""


def workspace_from_subject(subject: str | None) -> str | None:
    """The workspace named by the subject; None without a subject (only workspace-less routes)."""
    if subject is None:
        return None
    if (match := SUBJECT_RE.fullmatch(subject)) is None:
        raise PayloadRejected([FieldProblem("subject", _SUBJECT_SHAPE)])
    return match["workspace"]


def to_elicitation(event: CloudEvent) -> Elicitation:
    """Envelope, body and intake bounds, every problem at once (HTTP and NATS both come here)."""
    problems = check_cloudevent(event.id, event.source, None, event.subject)
    if event.type != CE_TYPE:
        problems.append(FieldProblem("type", f'must be "{CE_TYPE}"'))
    workspace: str | None = None
    if not any(p.loc == "subject" for p in problems):
        try:
            workspace = workspace_from_subject(event.subject)
        except PayloadRejected as exc:
            problems.extend(exc.problems)
    body, body_problems = _validate(event.data, prefix="data")
    problems.extend(body_problems)
    if body is None or body_problems:
        raise PayloadRejected(problems)
    e = _elicitation(body, workspace)
    if problems := problems + check_elicitation(e, names=_EVENT_NAMES):
        raise PayloadRejected(problems)
    return e


def parse_body(data: Any, *, workspace: str | None) -> Elicitation:
    """The strict body parser, with problems named relative to the body (``options[2].scope``)."""
    body, problems = _validate(data, prefix="")
    if body is None or problems:
        raise PayloadRejected(problems)
    e = _elicitation(body, workspace)
    if problems := check_elicitation(e, names=_BODY_NAMES):
        raise PayloadRejected(problems)
    return e


def _validate(
    data: Any, *, prefix: str
) -> tuple[upstream.ElicitationPending | None, list[FieldProblem]]:
    if data is None:
        return None, [FieldProblem(prefix, "is required: the elicitation body")]
    problems = _consistency_problems(data)
    try:
        body = upstream.ElicitationPending.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(error) for error in exc.errors()] + problems
        body = None
    return body, [FieldProblem(join_loc(prefix, p.loc), p.message) for p in problems]


def _consistency_problems(data: Any) -> list[FieldProblem]:
    """Rules across fields, checked on the raw body so they are reported with the others."""
    if not isinstance(data, dict):
        return []
    options = data.get("options")
    listed = options if isinstance(options, list) else []
    ids = [o.get("id") if isinstance(o, dict) else None for o in listed]
    problems = [
        FieldProblem(
            f"options[{index}].id", f"duplicates options[{first}].id: option ids must be distinct"
        )
        for index, first in repeats(i if isinstance(i, str) else None for i in ids)
    ]
    if isinstance(request_id := data.get("approvalRequestId"), str):
        elicitation_id = data.get("elicitationId")
        if isinstance(elicitation_id, str) and elicitation_id != request_id:
            problems.append(FieldProblem("approvalRequestId", "must equal elicitationId"))
        problems += [
            FieldProblem(key, 'must be "" on a broker approval request (approvalRequestId)')
            for key in APPROVAL_EMPTY
            if isinstance(value := data.get(key), str) and value
        ]
    return problems


def _problem(error: ErrorDetails) -> FieldProblem:
    loc = _location(error["loc"])
    kind = error["type"]
    value = error.get("input")
    if kind == upstream.PREVIEW_TAG_ERROR:
        if not isinstance(value, dict):
            return FieldProblem(loc, "must be an object")
        if value.get("type") is None:
            return FieldProblem(f"{loc}.type", "is required")
        return FieldProblem(f"{loc}.type", "must be one of " + ", ".join(upstream.PREVIEW_TYPES))
    if kind != "missing" and value is None:
        return FieldProblem(loc, "must not be null")
    if kind == "greater_than_equal":
        return FieldProblem(loc, f"must be at least {(error.get('ctx') or {}).get('ge')}")
    return FieldProblem(loc, _TYPE_MESSAGES.get(kind, error["msg"]))


def _location(loc: tuple[int | str, ...]) -> str:
    """``options[2].scope``, without the preview union's tag."""
    return loc_path(part for position, part in enumerate(loc) if not _is_preview_tag(loc, position))


def _is_preview_tag(loc: tuple[int | str, ...], position: int) -> bool:
    return (
        position >= 2  # noqa: PLR2004 - ('preview', index, tag, field)
        and position + 1 < len(loc)
        and loc[position - 2] == "preview"
        and isinstance(loc[position - 1], int)
        and loc[position] in upstream.PREVIEW_TYPES
    )


def _elicitation(body: upstream.ElicitationPending, workspace: str | None) -> Elicitation:
    """Validated once as a whole (one pydantic call, not one per nested model: 11 -> 7 µs)."""
    subject = body.approval_subject
    approval = body.approval_request_id is not None or subject is not None
    deadline = body.deadline or upstream.Deadline()
    return Elicitation.model_validate(
        {
            "source": SOURCE,
            "source_id": body.elicitation_id,
            "workspace": workspace,
            "context": {
                "board_id": body.board_id,
                "board_name": body.board_name,
                "card_id": body.card_id or None,
                "card_title": body.card_title or None,
                "run_id": body.run_id or None,
                "stage_key": body.stage_key or None,
            },
            "asker": body.agent_id,
            "kind": Kind.APPROVAL if approval else Kind.QUESTION,
            "title": body.card_title or body.board_name,
            "question": body.question,
            "answer_mode": _answer_mode(body),
            "options": [_option(option) for option in body.options],
            "max_length": body.free_text.max_length if body.free_text is not None else None,
            "subject": _subject(subject) if subject is not None else None,
            "deadlines": {"remind_at": deadline.remind_at, "escalate_at": deadline.escalate_at},
            "approval_request_id": body.approval_request_id,
            "created_at": body.ts,
            "extra": {
                "boardId": body.board_id,
                "cardId": body.card_id,
                "runId": body.run_id,
                "stageKey": body.stage_key,
                "elicitationId": body.elicitation_id,
            },
        }
    )


def _answer_mode(body: upstream.ElicitationPending) -> AnswerMode:
    """Options and freeText: both offered. Neither: a thread reply answers, as free text."""
    if body.options and body.free_text is not None:
        return AnswerMode.CHOICE_OR_TEXT
    if body.options:
        return AnswerMode.SINGLE_CHOICE
    return AnswerMode.FREE_TEXT


def _option(option: upstream.Option) -> dict[str, Any]:
    return {
        "id": option.id,
        "label": option.label,
        "meaning": Meaning(option.meaning),
        "scope": Scope(option.scope) if option.scope is not None else None,
        "admin_only": option.requires == "workspace-admin",
    }


def _subject(subject: upstream.ApprovalSubject) -> dict[str, Any]:
    return {
        "id": subject.id,
        "digest": subject.digest,
        "schema": subject.schema_,
        "revision": subject.revision,
        "expires_at": subject.expires_at,
        "preview": [_preview(item) for item in subject.preview],
        "preview_complete": subject.preview_complete,
    }


def _preview(
    item: upstream.TextPreview | upstream.FieldPreview | upstream.LinkPreview,
) -> dict[str, Any]:
    if isinstance(item, upstream.TextPreview):
        return {"type": item.type, "label": item.label, "text": item.text}
    if isinstance(item, upstream.FieldPreview):
        return {"type": item.type, "label": item.label, "value": item.value}
    return {"type": item.type, "label": item.label, "url": item.url}

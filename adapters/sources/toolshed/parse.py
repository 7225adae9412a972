"""Toolshed (spec 002): requests in, the runtime's poll and resolve shapes out. Unknown properties
are ignored, as zod's default object parsing does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from adapters.sources.common import APPROVE, approve_deny, canonical, digest, json_object
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import (
    Answer,
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    ElicitationKey,
    Identity,
    Kind,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView

SOURCE = "toolshed"
ASKER = "toolshed:runtime"  # the runtime has no agent id of its own in the request
RESOLVER = Identity(platform="toolshed", user="api", display_name="Toolshed API")
"""Who answers through the resolve route (the intake token's holder); ``toolshed:api`` in
``people.agents`` turns that route's answers off (refused, 403)."""
VIA = "toolshed"
TYPES = ("approval", "form")
SUBJECT_SCHEMA = "toolshed.tool-call"
TEXT_KEY = "text"  # a form answered in writing carries it as ``data.text``

_OPTIONS = {"approval": approve_deny(), "form": approve_deny("Submit", "Decline")}


@dataclass(frozen=True)
class ElicitationRequest:
    """A valid ``ElicitationRequestSchema`` body."""

    execution_id: str
    tool_path: str
    message: str
    args: dict[str, Any] | None
    type: str


@dataclass(frozen=True)
class Resolution:
    """A valid ``ElicitationResponseSchema`` body."""

    approved: bool
    data: dict[str, Any] | None = None


RESOLVE_SUFFIX = "/resolve"  # ``<id>/resolve`` is the resolve route's, never polled as an id


def key_of(execution_id: str) -> ElicitationKey:
    return ElicitationKey(f"{SOURCE}:{execution_id}")


def _required_text(
    data: dict[str, Any], name: str, problems: list[FieldProblem], *, non_empty: bool
) -> str:
    if name not in data:
        problems.append(FieldProblem(name, "is required"))
        return ""
    value: object = data[name]
    if not isinstance(value, str):
        problems.append(FieldProblem(name, "must be a string"))
        return ""
    if non_empty and not value:
        problems.append(FieldProblem(name, "must not be empty"))
    return value


def _optional_object(
    data: dict[str, Any], name: str, problems: list[FieldProblem]
) -> dict[str, Any] | None:
    if name not in data:
        return None
    value = data[name]
    if not isinstance(value, dict):
        problems.append(FieldProblem(name, "must be an object"))
        return None
    return value


def parse_request(data: Any) -> ElicitationRequest:
    body = json_object(data)
    problems: list[FieldProblem] = []
    execution_id = _required_text(body, "executionId", problems, non_empty=True)
    if execution_id.endswith(RESOLVE_SUFFIX):
        problems.append(FieldProblem("executionId", f"must not end in {RESOLVE_SUFFIX}"))
    tool_path = _required_text(body, "toolPath", problems, non_empty=True)
    message = _required_text(body, "message", problems, non_empty=False)
    args = _optional_object(body, "args", problems)
    kind = body.get("type", "approval")
    if kind not in TYPES:
        problems.append(FieldProblem("type", 'must be "approval" or "form"'))
    if problems:
        raise PayloadRejected(problems)
    return ElicitationRequest(execution_id, tool_path, message, args, str(kind))


def parse_resolution(data: Any) -> Resolution:
    body = json_object(data)
    problems: list[FieldProblem] = []
    approved = body.get("approved")
    if "approved" not in body:
        problems.append(FieldProblem("approved", "is required"))
    elif not isinstance(approved, bool):
        problems.append(FieldProblem("approved", "must be a boolean"))
    extra = _optional_object(body, "data", problems)
    if problems:
        raise PayloadRejected(problems)
    return Resolution(approved=bool(approved), data=extra)


def request_digest(request: ElicitationRequest) -> str:
    """What is approved: the tool and its exact arguments."""
    return digest({"toolPath": request.tool_path, "args": request.args})


def inbound_id(request: ElicitationRequest) -> str:
    """Dedupes a re-sent identical request; a changed one is a revision of the same elicitation."""
    whole = {
        "toolPath": request.tool_path,
        "message": request.message,
        "args": request.args,
        "type": request.type,
    }
    return f"{request.execution_id}:{hashlib.sha256(canonical(whole).encode()).hexdigest()[:32]}"


def to_elicitation(request: ElicitationRequest, *, now: datetime) -> Elicitation:
    preview = [PreviewItem(type="field", label="Tool", value=request.tool_path)]
    if request.args is not None:
        shown = json.dumps(request.args, indent=2, ensure_ascii=False)
        preview.append(PreviewItem(type="json", label="Arguments", text=shown))
    form = request.type == "form"
    return Elicitation(
        source=SOURCE,
        source_id=request.execution_id,
        asker=ASKER,
        kind=Kind.QUESTION if form else Kind.APPROVAL,
        title=f"Input for {request.tool_path}" if form else f"Run {request.tool_path}?",
        question=request.message,
        answer_mode=AnswerMode.CHOICE_OR_TEXT if form else AnswerMode.SINGLE_CHOICE,
        options=_OPTIONS[request.type],
        subject=ApprovalSubject(
            id=request.execution_id,
            digest=request_digest(request),
            schema_=SUBJECT_SCHEMA,
            revision=0,
            preview=tuple(preview),
        ),
        created_at=now,
        extra={"executionId": request.execution_id, "type": request.type},
    )


def approved(answer: Answer | None) -> bool:
    """Approve / Submit chosen, or a form answered in writing; anything else is not approved."""
    if answer is None:
        return False
    if answer.option_ids:
        return APPROVE in answer.option_ids
    return answer.text is not None or bool(answer.fields)


def result_data(view: PromptView) -> dict[str, Any] | None:
    """``data`` of the resolved shape: always an object for a form, else only when given."""
    answer = view.answer
    form = view.elicitation.extra.get("type") == "form"
    data: dict[str, Any] = dict(answer.fields) if answer is not None else {}
    if answer is not None and answer.text is not None and not answer.secret:
        data.setdefault(TEXT_KEY, answer.text)
    return data if form or data else None


def poll_body(view: PromptView) -> dict[str, Any]:
    """``GET /api/elicitation/:id``; closed without an answer reads as not approved."""
    execution_id = view.elicitation.source_id
    if view.status is Status.PENDING:
        return {"executionId": execution_id, "status": "pending"}
    body: dict[str, Any] = {"executionId": execution_id, "approved": approved(view.answer)}
    if (data := result_data(view)) is not None:
        body["data"] = data
    return body


def resolve_body(execution_id: str, is_approved: bool) -> dict[str, Any]:
    return {"executionId": execution_id, "approved": is_approved, "resolved": True}

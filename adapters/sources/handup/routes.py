"""handup Request intake: the stored Request comes back, 202 when new, 200 when already there
(same ``id``, or a pending request with the same ``dedupe_key``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response

from adapters.shared.openapi import (
    JSON_WITHOUT_NUL,
    SECURED,
    id_schema,
    inline,
    json_response,
    problems,
    request_body,
    text_schema,
)
from adapters.sources.handup.document import request_document
from adapters.sources.handup.duration import TIMEOUT_PATTERN, parse_timeout
from adapters.sources.handup.elicitation import (
    SOURCE,
    dedupe_request_id,
    key_of,
    new_request_id,
    to_elicitation,
)
from adapters.sources.handup.validation import (
    FEEDBACK_VALUES,
    ID_RE,
    MAX_EXPIRES_AT,
    MAX_QUESTIONS,
    check,
    schema,
)
from bot.clock import SystemClock
from bot.domain.bounds import ID_MAX, check_elicitation, id_problem
from bot.domain.errors import FieldProblem, PayloadRejected, UnsupportedMediaType
from bot.domain.model import Status
from bot.domain.ports import Clock, Elicitations, Inbound, PromptView
from bot.domain.records import IntakeResult

Authorise = Callable[[Request], Response | None]  # None, or the response to send (401)


def handup_router(
    elicitations: Elicitations,
    authorise: Authorise,
    allowlist: Sequence[str],
    *,
    clock: Clock | None = None,
    new_id: Callable[[], str] = new_request_id,
    default_timeout: timedelta | str | None = None,
) -> APIRouter:
    """``default_timeout``: the expiry of a Request naming neither ``timeout`` nor ``expires_at``
    (``sources.handup.default_timeout``); None or ``"none"``: it never expires."""
    router = APIRouter(tags=["handup"])
    fallback = (
        parse_timeout(default_timeout) if isinstance(default_timeout, str) else default_timeout
    )
    allowed = tuple(str(entry) for entry in allowlist)
    time: Clock = clock or SystemClock()

    @router.post(
        "/v1/handup/requests",
        status_code=202,
        summary="handup Request intake (spec 004): the stored Request comes back",
        dependencies=SECURED,
        responses={
            200: json_response("The same pending Request (its id or dedupe_key was seen)"),
            202: json_response("The stored Request, with its id, status and content_hash"),
            **problems(400, 401, 413, 415, 503),
        },
        openapi_extra=request_body(
            _without_callbacks(_REQUEST_SCHEMA) if not allowed else _REQUEST_SCHEMA,
            examples={"minimal": {"title": "Deploy to staging?"}},
        ),
    )
    async def post_request(request: Request) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        checked = check(_json_body(request, await request.body()), allowed)
        derived: str | None = None
        if checked.dedupe_key is not None:
            pending, derived = await _dedupe(elicitations, checked.dedupe_key)
            if pending is not None:
                return JSONResponse(request_document(pending), status_code=200)
        request_id = checked.id or derived or new_id()
        e = to_elicitation(checked, request_id=request_id, now=time.now(), default_timeout=fallback)
        if problems := check_elicitation(e):  # the intake bounds, named as the Request names them
            raise PayloadRejected(problems)
        audit = {"handup": request_id, "dedupe_key": checked.dedupe_key}
        [outcome] = await elicitations.intake([Inbound(SOURCE, request_id, e, audit)])
        if (view := await elicitations.view(outcome.key)) is None:
            msg = f"{outcome.key} was taken in but cannot be read back"
            raise RuntimeError(msg)
        status = 200 if outcome.result == IntakeResult.DUPLICATE else 202
        return JSONResponse(request_document(view), status_code=status)

    @router.get(
        "/v1/handup/requests/{request_id}",
        summary="A handup Request as it stands: status and decision",
        dependencies=SECURED,
        responses=problems(400, 401, 404),
    )
    async def get_request(
        request: Request, request_id: Annotated[str, Path(json_schema_extra=id_schema())]
    ) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        if request.scope["path"].endswith("\n"):  # the route's `$` matched before it
            request_id += "\n"
        if (found := id_problem(request_id, required=True)) is not None:
            raise PayloadRejected([FieldProblem("id", found)])  # no Request was stored so
        if (view := await elicitations.view(key_of(request_id))) is None:
            raise HTTPException(status_code=404, detail=f"No handup request {request_id!r}.")
        return JSONResponse(request_document(view))

    return router


def _request_schema() -> dict[str, Any]:
    """The spec's Request schema, plus the rules of ``validation`` that a schema can say."""
    document = inline(schema())
    properties = document["properties"]
    properties["id"] = {**properties["id"], "pattern": f"^(?:{ID_RE.pattern})?$"}
    properties["status"] = {"const": "pending", "default": "pending"}
    for managed in ("decision", "run"):
        properties[managed] = {
            "type": "null",
            "description": "set by the daemon: send null or leave it out",
        }
    properties["expires_at"] = {**properties["expires_at"], "maximum": MAX_EXPIRES_AT}
    properties["timeout"] = {
        **properties["timeout"],
        "pattern": TIMEOUT_PATTERN,
        "description": properties["timeout"]["description"]
        + " The grammar of humantime (`90s`, `1h 30m`, `2days`); not zero.",
    }
    # Other keys of `input` pass through, kept: JSON without NUL, keys included.
    properties["input"]["anyOf"][0].update(
        {"propertyNames": text_schema(), "additionalProperties": JSON_WITHOUT_NUL}
    )
    request_input = properties["input"]["anyOf"][0]["properties"]
    request_input["fields"]["items"] = JSON_WITHOUT_NUL  # kept too
    request_input["feedback"] = {
        "enum": list(FEEDBACK_VALUES),
        "description": request_input["feedback"]["description"],
    }
    # A question request asks 1 to 10 questions, any other offers an option. A lone question is
    # answered by its options, whose labels are then their ids: identifiers (or empty).
    lone_question = {
        "items": {
            "properties": {
                "options": {"items": {"properties": {"label": id_schema(required=False)}}}
            }
        }
    }
    document["if"] = {"required": ["kind"], "properties": {"kind": {"const": "question"}}}
    document["then"] = {
        "required": ["input"],
        "properties": {
            "input": {
                "type": "object",
                "required": ["questions"],
                "properties": {
                    "questions": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_QUESTIONS,
                        "if": {"maxItems": 1},
                        "then": lone_question,
                    }
                },
            }
        },
    }
    document["else"] = {"properties": {"options": {"minItems": 1}}}
    # The intake bounds (bot.domain.bounds): an option's id and style, the agent and the session
    # are identifiers; every other string (the whole Request is kept) a text, without NUL.
    option = properties["options"]["items"]["properties"]
    source = properties["source"]["properties"]
    for node in (option["id"], option["style"], source["agent"], source["session"]):
        node.update({"pattern": id_schema(required=False)["pattern"], "maxLength": ID_MAX})
    # A text kind's `lang` becomes the shown preview's language: an identifier (or empty).
    properties["previews"]["items"]["if"] = {
        "required": ["type"],
        "properties": {"type": {"enum": ["text", "markdown", "diff", "code"]}},
    }
    properties["previews"]["items"]["then"] = {"properties": {"lang": id_schema(required=False)}}
    _texts(document)
    # Values the daemon sets: what a caller sends there is dropped, so any string is taken.
    for dropped in (properties["content_hash"], source["integration"]):
        del dropped["pattern"]
        dropped["description"] = "Set by the daemon: a value sent is dropped."
    return document


def _texts(node: Any) -> None:
    """Every string schema under ``node`` without a pattern, const or enum of its own: a text."""
    if isinstance(node, list):
        for item in node:
            _texts(item)
        return
    if not isinstance(node, dict):
        return
    kinds = node.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
    if is_string and not {"pattern", "const", "enum"} & node.keys():
        node["pattern"] = text_schema()["pattern"]
    for value in node.values():
        _texts(value)


def _json_body(request: Request, raw: bytes) -> object:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType("a handup Request is sent as application/json")
    try:
        return json.loads(raw)
    except ValueError:
        raise PayloadRejected([FieldProblem("(body)", "is not valid JSON")]) from None


async def _dedupe(elicitations: Elicitations, dedupe_key: str) -> tuple[PromptView | None, str]:
    """The pending request of ``dedupe_key`` (if any) and the id a new id-less one takes.

    Generations 0, 1, 2… are taken in turn, each once the one before is decided, so those that
    exist are a prefix: a galloping then binary search finds the last in O(log n) reads."""

    async def at(generation: int) -> PromptView | None:
        return await elicitations.view(key_of(dedupe_request_id(dedupe_key, generation)))

    if (last := await at(0)) is None:
        return None, dedupe_request_id(dedupe_key, 0)
    low, high = 0, 1
    while (found := await at(high)) is not None:
        low, last, high = high, found, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if (found := await at(middle)) is None:
            high = middle
        else:
            low, last = middle, found
    if last.status is Status.PENDING:
        return last, dedupe_request_id(dedupe_key, low)
    return None, dedupe_request_id(dedupe_key, low + 1)


_REQUEST_SCHEMA = _request_schema()


def _without_callbacks(document: dict[str, Any]) -> dict[str, Any]:
    """With no callback allowlist every ``callback_url`` but null is refused, so it says null."""
    callback = {
        "type": "null",
        "description": "null: this deployment has no callback allowlist "
        "(sources.handup.callback_allowlist), so it takes no callback_url",
    }
    return {**document, "properties": {**document["properties"], "callback_url": callback}}

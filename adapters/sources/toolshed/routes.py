"""The three Toolshed elicitation routes (spec 002). A resolve answers as ``toolshed:api`` under
the answer rules: the same decision again is 200, another one 409.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from adapters.shared.jsonbody import read_json, rejected
from adapters.shared.openapi import SECURED, id_schema, problems, request_body, text_schema
from adapters.shared.problem import problem
from adapters.sources.common import APPROVE, DENY
from adapters.sources.toolshed import parse
from bot.clock import SystemClock
from bot.domain.bounds import check_elicitation, id_problem
from bot.domain.disclosure import UPSTREAM_DECIDED
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import Attempt, Refusal, RefusalCode
from bot.domain.ports import Clock, Elicitations, Inbound

_FORBIDDEN = frozenset(
    {RefusalCode.ASKER, RefusalCode.AGENT, RefusalCode.BOT, RefusalCode.NOT_ADMIN}
)
_CLOSED = frozenset(
    {
        RefusalCode.ALREADY_ANSWERED,
        RefusalCode.EXPIRED,
        RefusalCode.CLOSED,
        RefusalCode.SUBJECT_EXPIRED,
    }
)

ExecutionId = Annotated[str, Path(json_schema_extra=id_schema())]
_EXAMPLE: dict[str, Any] = {
    "executionId": "abc-123",
    "toolPath": "github.issues.create",
    "message": 'Create issue "Fix login bug" in my-org/my-repo?',
    "args": {"owner": "my-org", "repo": "my-repo", "title": "Fix login bug"},
    "type": "approval",
}
_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["executionId", "toolPath", "message"],
    "properties": {
        "executionId": {**id_schema(), "not": {"pattern": f"{parse.RESOLVE_SUFFIX}$"}},
        "toolPath": {**text_schema(), "minLength": 1},
        "message": text_schema(),
        "args": {"type": "object"},
        "type": {"type": "string", "enum": list(parse.TYPES), "default": "approval"},
    },
}
_RESOLVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "data": {"type": "object"}},
}


def toolshed_router(
    elicitations: Elicitations,
    authorise: Callable[[Request], Response | None],
    *,
    clock: Clock | None = None,
) -> APIRouter:
    router = APIRouter(tags=["toolshed"])
    clock_ = clock or SystemClock()

    @router.post(
        "/api/elicitation",
        status_code=201,
        summary="Toolshed: store a pending elicitation",
        dependencies=SECURED,
        responses=problems(400, 401, 413, 415, 503),
        openapi_extra=request_body(_REQUEST_SCHEMA, examples={"the spec's approval": _EXAMPLE}),
    )
    async def create(request: Request) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        req = await read_json(request, parse.parse_request)
        if isinstance(req, JSONResponse):
            return req
        e = parse.to_elicitation(req, now=clock_.now())
        if problems := check_elicitation(e):  # the intake bounds, named as the request names them
            return rejected(PayloadRejected(problems))
        audit = {"executionId": req.execution_id, "toolPath": req.tool_path, "type": req.type}
        await elicitations.intake([Inbound(parse.SOURCE, parse.inbound_id(req), e, audit)])
        return JSONResponse({"stored": True, "executionId": req.execution_id}, status_code=201)

    @router.post(
        "/api/elicitation/{execution_id:path}/resolve",
        summary="Toolshed: approve or deny (the first answer wins)",
        dependencies=SECURED,
        responses=problems(400, 401, 403, 404, 409, 413, 415, 503),
        openapi_extra=request_body(_RESOLVE_SCHEMA),
    )
    async def resolve(request: Request, execution_id: ExecutionId) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        if (bad := _bad_id(execution_id)) is not None:
            return bad
        resolution = await read_json(request, parse.parse_resolution)
        if isinstance(resolution, JSONResponse):
            return resolution
        key = parse.key_of(execution_id)
        if await elicitations.view(key) is None:
            return _not_found(execution_id)
        attempt = Attempt(
            respondent=parse.RESOLVER,
            option_ids=(APPROVE if resolution.approved else DENY,),
            fields=resolution.data or {},
            via=parse.VIA,
            shown=UPSTREAM_DECIDED,
        )
        outcome = await elicitations.answer(key, attempt)
        if outcome.won:
            return JSONResponse(parse.resolve_body(execution_id, resolution.approved))
        refusal = outcome.result
        if not isinstance(refusal, Refusal):  # pragma: no cover - a lost answer is a refusal
            return problem(409, "Conflict", "The elicitation was resolved meanwhile.")
        code, message = refusal.code, refusal.message
        if code is RefusalCode.ALREADY_ANSWERED:
            view = await elicitations.view(key)
            if view is not None and parse.approved(view.answer) == resolution.approved:
                # A retried resolve (or the same decision made elsewhere first): same outcome.
                return JSONResponse(parse.resolve_body(execution_id, resolution.approved))
        if code in _FORBIDDEN:
            return problem(403, "Forbidden", message)
        if code in _CLOSED:
            return problem(409, "Conflict", message)
        return problem(400, "Invalid request", message, [FieldProblem("approved", message)])

    # Declared after resolve: a 405 at ``…/{id}/resolve`` (no route takes that method there)
    # names the first route whose path matched in ``Allow``, and that is the resolve route.
    @router.get(
        "/api/elicitation/{execution_id:path}",
        summary="Toolshed: poll an elicitation (pending, then approved/data)",
        dependencies=SECURED,
        responses=problems(400, 401, 404, 405),
    )
    async def poll(request: Request, execution_id: ExecutionId) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        if request.scope["path"].endswith("\n"):  # the route's `$` matched before it
            execution_id += "\n"
        if execution_id.endswith(parse.RESOLVE_SUFFIX):  # the resolve route's URL: POST only
            response = problem(405, "Method Not Allowed", "Method Not Allowed")
            response.headers["Allow"] = "POST"
            return response
        if (bad := _bad_id(execution_id)) is not None:
            return bad
        if (view := await elicitations.view(parse.key_of(execution_id))) is None:
            return _not_found(execution_id)
        return JSONResponse(parse.poll_body(view))

    return router


def _bad_id(execution_id: str) -> JSONResponse | None:
    """The 400 for a path ``executionId`` no request could be stored under (no store asked)."""
    if (found := id_problem(execution_id, required=True)) is None:
        return None
    return rejected(PayloadRejected([FieldProblem("executionId", found)]))


def _not_found(execution_id: str) -> JSONResponse:
    return problem(404, "Not Found", f"No elicitation with executionId {execution_id!r}.")

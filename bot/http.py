"""The one HTTP server's shell: read-back, health, metrics, the body limit and the error handlers
(FastAPI; OpenAPI at /docs). The edges' routes (each source's intake, Slack events, the web inbox)
come in as routers from the composition root.

The shell reads through the store port (``bot.domain.store.Store``) only. Errors are
``application/problem+json`` with an ``errors`` list naming each bad field.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapters.shared.problem import problem
from bot.domain.errors import FieldProblem, IntakeError, PayloadRejected
from bot.domain.ports import Elicitations
from bot.domain.records import DeadlineView, DeliveryView, StoredElicitation
from bot.domain.refs import ref_json
from bot.domain.store import Store

MAX_BODY_BYTES = 1024 * 1024


@dataclass
class Runtime:
    """What the routes need; built by bot.wiring."""

    store: Store
    elicitations: Elicitations | None = None
    """The core, for whoever builds routers beside the shell; the shell's own routes only read,
    through ``store``."""
    intake_token: str | None = None
    adapters_ready: Callable[[], Mapping[str, bool]] = dict
    draining: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    """What ``/metrics`` serves; routers register their metrics on it."""
    routers: list[APIRouter] = field(default_factory=list)
    """Routes of the edges (each source's intake, Slack events, the web inbox), included as
    they are."""
    service: InitVar[Elicitations | None] = None
    """The former name of ``elicitations``, accepted until every caller says ``elicitations``."""

    def __post_init__(self, service: Elicitations | None) -> None:
        if self.elicitations is None:
            self.elicitations = service


class BodyLimit:
    """413 for a body over the limit (by Content-Length, or counted while streaming)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        seen = 0

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLargeError
            return message

        try:
            await self.app(scope, counting, send)
        except _TooLargeError:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(413, "Payload Too Large", f"The body is over {self.limit} bytes.")
        await response(scope, receive, send)


class _TooLargeError(Exception):
    pass


def create_app(rt: Runtime) -> FastAPI:
    app = FastAPI(title="elicitbot", version="0.1.0")
    app.add_middleware(BodyLimit)
    _add_error_handlers(app)
    _add_read_routes(app, rt)
    _add_health_routes(app, rt)
    for router in rt.routers:
        app.include_router(router)
    return app


def authorised(rt: Runtime, request: Request) -> JSONResponse | None:
    """None when the request may go on, else the 401 to send."""
    if rt.intake_token is None:
        return None
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), rt.intake_token.encode()):
        return None
    return problem(401, "Unauthorized", "A valid 'Authorization: Bearer <token>' is required.")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(IntakeError)
    async def _intake_error(_: Request, exc: IntakeError) -> JSONResponse:
        if isinstance(exc, PayloadRejected):
            return problem(400, "Invalid event", str(exc), exc.problems)
        return problem(exc.status_code, type(exc).__name__, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            FieldProblem(".".join(str(p) for p in e["loc"][1:]) or str(e["loc"][0]), e["msg"])
            for e in exc.errors()
        ]
        return problem(400, "Invalid request", "; ".join(str(p) for p in errors), errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), str(exc.detail))


def _add_read_routes(app: FastAPI, rt: Runtime) -> None:
    @app.get("/v1/elicitations", summary="List elicitations, newest first")
    async def list_elicitations(
        request: Request,
        status: str | None = Query(default=None, pattern="^(pending|answered|expired|cancelled)$"),
        cursor: str | None = None,
        limit: int = Query(default=50, ge=1, le=500),
    ) -> Response:
        if (denied := authorised(rt, request)) is not None:
            return denied
        rows = await rt.store.list_elicitations(status=status, after=cursor, limit=limit + 1)
        page = rows[:limit]
        nxt = page[-1].elicitation.key if len(rows) > limit else None
        return JSONResponse({"items": [summary_json(s) for s in page], "next": nxt})

    @app.get("/v1/elicitations/{ident:path}", summary="One elicitation: status, answer, deliveries")
    async def get_elicitation(request: Request, ident: str) -> Response:
        if (denied := authorised(rt, request)) is not None:
            return denied
        key = await rt.store.resolve_key(ident)
        stored = await rt.store.get(key) if key else None
        if key is None or stored is None:
            return problem(404, "Not Found", f"No elicitation {ident!r}.")
        body = summary_json(stored)
        body["deliveries"] = [delivery_json(d) for d in await rt.store.deliveries(key)]
        body["deadlines"] = [deadline_json(d) for d in await rt.store.deadlines(key)]
        body["elicitation"] = stored.elicitation.model_dump(
            mode="json", by_alias=True, exclude={"extra"}
        )
        return JSONResponse(body)


def _add_health_routes(app: FastAPI, rt: Runtime) -> None:
    @app.get("/healthz", summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="Readiness: the store answers and every adapter is connected")
    async def readyz() -> Response:
        problems: list[str] = []
        try:
            await rt.store.ping()
        except Exception as exc:
            problems.append(f"store: {type(exc).__name__}")
        problems += [f"{name}: not connected" for name, ok in rt.adapters_ready().items() if not ok]
        if rt.draining:
            problems.append("shutting down")
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(generate_latest(rt.registry), media_type=CONTENT_TYPE_LATEST)


def answer_json(stored: StoredElicitation) -> dict[str, Any] | None:
    a = stored.answer
    if a is None:
        return None
    return {
        "by": a.respondent,
        "principal": a.principal,
        "displayName": a.display_name,
        "optionIds": list(a.option_ids),
        "text": a.text,
        "secret": a.secret,
        "via": a.via,
        "at": a.at.isoformat(),
    }


def summary_json(stored: StoredElicitation) -> dict[str, Any]:
    e = stored.elicitation
    return {
        "id": e.key,
        "source": e.source,
        "sourceId": e.source_id,
        "status": stored.status.value,
        "workspace": e.workspace,
        "kind": e.kind.value,
        "title": e.title,
        "question": e.question,
        "answer": answer_json(stored),
        "version": stored.version,
        "createdAt": stored.created_at.isoformat(),
        "updatedAt": stored.updated_at.isoformat(),
    }


def delivery_json(d: DeliveryView) -> dict[str, Any]:
    return {
        "destination": d.destination,
        "position": d.position,
        "purpose": str(d.purpose),
        "state": str(d.state),
        "ref": ref_json(d.ref),
        "postedAt": d.posted_at.isoformat() if d.posted_at else None,
        "error": d.error,
    }


def deadline_json(d: DeadlineView) -> dict[str, Any]:
    return {
        "kind": str(d.kind),
        "dueAt": d.due_at.isoformat(),
        "state": str(d.state),
        "firedAt": d.fired_at.isoformat() if d.fired_at else None,
    }

"""The one HTTP server's shell (FastAPI; OpenAPI at /docs): read-back, health, metrics, the body
limit and the error handlers. Errors are ``application/problem+json`` with an ``errors`` list;
an unexpected one is a 500 of that shape with a correlation id also in the log.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapters.shared.openapi import PROBLEM_SCHEMA, SECURED, id_schema, problems, with_components
from bot.app.metrics import StoreMetrics
from bot.app.outage import StoreOutage, unreachable
from bot.app.shapes import detail_json, summary_json
from bot.domain.bounds import KEY_MAX, lookup_problem
from bot.domain.errors import PROBLEM, FieldProblem, IntakeError, PayloadRejected, problem_body
from bot.domain.ports import Elicitations
from bot.domain.store import Store

MAX_BODY_BYTES = 1024 * 1024
CORRELATION_HEADER = "X-Correlation-Id"
log = structlog.get_logger("elicitbot.http")


@dataclass
class Runtime:
    """What the routes need; built by bot.app.wiring."""

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
    """The edges' routes (each source's intake, Slack events, the web inbox), included as is."""


def problem(
    status: int, title: str, detail: str, errors: list[FieldProblem] | None = None, **more: Any
) -> JSONResponse:
    """:func:`bot.domain.errors.problem_body` as a response with its status and media type."""
    body = problem_body(status, title, detail, errors, **more)
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


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


class LastResort:
    """An exception no handler took: a 500 problem+json with a correlation id, logged with the
    traceback (the body never says what broke). Inside Starlette's error middleware, which answers
    in plain text; once a response started, re-raised. A store out of reach is a 503 instead."""

    def __init__(self, app: ASGIApp, outage: StoreOutage | None = None) -> None:
        self.app = app
        self.outage = outage

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if self.outage is not None and not started and unreachable(exc):
                await self.outage.refuse(exc, scope.get("path"))(scope, receive, send)
                return
            correlation = uuid.uuid4().hex
            log.exception(
                "http.unhandled",
                correlation_id=correlation,
                method=scope.get("method"),
                path=scope.get("path"),
                response_started=started,
            )
            if started:
                raise
            response = problem(
                500,
                "Internal Server Error",
                f"Something went wrong on our side; it is logged as {correlation}.",
                correlationId=correlation,
            )
            response.headers[CORRELATION_HEADER] = correlation
            await response(scope, receive, send)
        else:
            if self.outage is not None:
                self.outage.served()


def create_app(rt: Runtime) -> FastAPI:
    app = FastAPI(title="elicitbot", version="0.1.0")
    app.add_middleware(BodyLimit)
    # Added last: outermost, so it sees every route's error.
    app.add_middleware(LastResort, outage=StoreOutage(rt.store, rt.registry))
    _add_error_handlers(app)
    _add_read_routes(app, rt)
    _add_health_routes(app, rt)
    for router in rt.routers:
        app.include_router(router)
    app.router.routes[:0] = plain_routes(rt.routers)
    return with_components(app)


def plain_routes(routers: list[APIRouter]) -> list[Route]:
    """The edges' plain Starlette routes, matched ahead of FastAPI's routing, which walks every
    router's routes per request and solves dependencies these have none of."""
    return [
        Route(
            router.prefix + route.path,
            route.endpoint,
            methods=sorted(route.methods or ()),
            name=route.name,
            include_in_schema=False,
        )
        for router in routers
        for route in router.routes
        if type(route) is Route  # an APIRoute is a Route too: only the plain ones
    ]


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
        # Starlette's headers stay: a 405's ``Allow`` (RFC 9110 requires it), a 401's
        # ``WWW-Authenticate``, whatever the raiser set.
        response = problem(exc.status_code, str(exc.detail), str(exc.detail))
        response.headers.update(exc.headers or {})
        return response


def _add_read_routes(app: FastAPI, rt: Runtime) -> None:
    @app.get(
        "/v1/elicitations",
        summary="List elicitations, newest first",
        dependencies=SECURED,
        responses=problems(400, 401),
    )
    async def list_elicitations(
        request: Request,
        status: str | None = Query(default=None, pattern="^(pending|answered|expired|cancelled)$"),
        cursor: str | None = Query(default=None, json_schema_extra=id_schema(KEY_MAX)),
        limit: int = Query(default=50, ge=1, le=500),
    ) -> Response:
        if (denied := authorised(rt, request)) is not None:
            return denied
        if cursor is not None and (found := lookup_problem(cursor)) is not None:
            return _bad("cursor", found)
        rows = await rt.store.list_elicitations(status=status, after=cursor, limit=limit + 1)
        page = rows[:limit]
        nxt = page[-1].elicitation.key if len(rows) > limit else None
        return JSONResponse({"items": [summary_json(s) for s in page], "next": nxt})

    @app.get(
        "/v1/elicitations/{ident:path}",
        summary="One elicitation: status, answer, deliveries",
        dependencies=SECURED,
        responses=problems(400, 401, 404),
    )
    async def get_elicitation(
        request: Request, ident: Annotated[str, Path(json_schema_extra=id_schema(KEY_MAX))]
    ) -> Response:
        if (denied := authorised(rt, request)) is not None:
            return denied
        ident = last_path_param(request, ident)
        if (found := lookup_problem(ident)) is not None:
            return _bad("id", found)  # no elicitation could be stored so: no store is asked
        key = await rt.store.resolve_key(ident)
        stored = await rt.store.get(key) if key else None
        if key is None or stored is None:
            return problem(404, "Not Found", f"No elicitation {ident!r}.")
        body = await detail_json(rt.store, key, stored)
        body["elicitation"] = stored.elicitation.model_dump(
            mode="json", by_alias=True, exclude={"extra"}
        )
        return JSONResponse(body)


def last_path_param(request: Request, value: str) -> str:
    """A route's last path parameter as the client sent it: a route pattern ends in ``$``, which
    also matches before one final newline, so Starlette hands ``eli\\n`` over as ``eli``."""
    return value + "\n" if request.scope["path"].endswith("\n") else value


def _bad(loc: str, message: str) -> JSONResponse:
    return problem(400, "Invalid request", f"{loc}: {message}", [FieldProblem(loc, message)])


_NOT_READY: dict[str, Any] = {
    "description": "Not ready: `problems` names the store, each adapter not connected, or the stop",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["status", "problems"],
                "properties": {
                    "status": {"const": "unavailable"},
                    "problems": {"type": "array", "items": {"type": "string"}},
                },
            }
        },
        PROBLEM: {"schema": PROBLEM_SCHEMA},
    },
}
_PROMETHEUS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The Prometheus text exposition format",
        "content": {CONTENT_TYPE_LATEST.split("; charset")[0]: {"schema": {"type": "string"}}},
    }
}


def _add_health_routes(app: FastAPI, rt: Runtime) -> None:
    @app.get("/healthz", summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="Readiness: the store answers and every adapter is connected",
        responses={503: _NOT_READY},
    )
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

    # Lanes, write-backs and leases come from the store: read once per scrape, just before it.
    store_metrics = StoreMetrics(rt.store, rt.registry)

    @app.get(
        "/metrics", summary="Prometheus metrics", responses=_PROMETHEUS, response_class=Response
    )
    async def metrics() -> Response:
        await store_metrics.refresh()
        return Response(generate_latest(rt.registry), media_type=CONTENT_TYPE_LATEST)

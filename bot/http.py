"""The one HTTP server: intake, read-back, health and metrics (FastAPI; OpenAPI at /docs).

Errors are ``application/problem+json`` with an ``errors`` list naming each bad field.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adapters.problem import problem
from adapters.sources import cloudevents
from adapters.sources.superpipeline import parse as superpipeline
from bot.domain.errors import FieldProblem, IntakeError, PayloadRejected
from bot.domain.ports import Inbound
from bot.service import Service
from store.sql import SqlStore, StoredElicitation

MAX_BODY_BYTES = 1024 * 1024


@dataclass
class Runtime:
    """What the routes need; built by bot.wiring."""

    store: SqlStore
    service: Service
    intake_token: str | None = None
    adapters_ready: Callable[[], Mapping[str, bool]] = dict
    draining: bool = False
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    routers: list[APIRouter] = field(default_factory=list)
    """Routes of the edges (Slack events, web inbox, other sources), included as they are."""


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
    _add_intake_routes(app, rt)
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


def _add_intake_routes(app: FastAPI, rt: Runtime) -> None:
    intake_counter = Counter(
        "elicitbot_intake_total",
        "Inbound events by result",
        ["source", "result"],
        registry=rt.registry,
    )
    intake_latency = Histogram(
        "elicitbot_intake_seconds", "Time to accept an intake request", registry=rt.registry
    )

    @app.post(
        "/v1/events", status_code=202, summary="CloudEvents intake (structured, binary, batch)"
    )
    async def post_events(request: Request) -> Response:
        if (denied := authorised(rt, request)) is not None:
            return denied
        if rt.draining:
            return problem(503, "Shutting down", "elicitbot is stopping; send it again shortly.")
        started = time.perf_counter()
        events, is_batch = cloudevents.parse_http(request.headers, await request.body())
        batch = []
        problems: list[FieldProblem] = []
        for index, event in enumerate(events):
            try:
                e = superpipeline.to_elicitation(event)
            except PayloadRejected as exc:
                problems += exc.prefixed(f"[{index}]." if is_batch else "").problems
                continue
            audit = {"ce_source": event.source, "ce_id": event.id, "ce_type": event.type}
            batch.append(Inbound(f"ce:{event.source}", event.id, e, audit))
        if problems:
            raise PayloadRejected(problems)
        outcomes = await rt.service.intake(batch)
        results = []
        for event, outcome in zip(events, outcomes, strict=True):
            result = "duplicate" if outcome.result == "duplicate" else "accepted"
            intake_counter.labels("superpipeline", result).inc()
            results.append({"id": event.id, "elicitation": outcome.key, "result": result})
        intake_latency.observe(time.perf_counter() - started)
        all_duplicates = not is_batch and results[0]["result"] == "duplicate"
        body = {"results": results} if is_batch else results[0]
        return JSONResponse(body, status_code=200 if all_duplicates else 202)


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


def delivery_json(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "destination": d["destination"],
        "position": d["position"],
        "purpose": d["purpose"],
        "state": d["state"],
        "ref": d["ref"],
        "postedAt": d["posted_at"].isoformat() if d["posted_at"] else None,
        "error": d["error"],
    }


def deadline_json(d: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": d["kind"],
        "dueAt": d["due_at"].isoformat(),
        "state": d["state"],
        "firedAt": d["fired_at"].isoformat() if d["fired_at"] else None,
    }

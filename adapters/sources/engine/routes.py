"""``POST /v1/deliveries``: the ask is stored (deduplicated by ``id``), then its deliveries are
watched for up to ``wait_seconds``: 200 with the refs once accepted, 202 while none is, 502 when
the platforms refused every destination, 422 for a platform not run here.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response

from adapters.shared.jsonbody import read_json
from adapters.shared.openapi import (
    ID_TAIL,
    JSON_WITHOUT_NUL,
    SECURED,
    id_schema,
    json_response,
    problems,
    request_body,
    text_schema,
)
from adapters.shared.problem import problem
from adapters.sources.engine import parse
from adapters.sources.engine.document import ask_document
from bot.clock import SystemClock
from bot.domain.bounds import id_problem
from bot.domain.errors import FieldProblem
from bot.domain.model import Destination, ElicitationKey
from bot.domain.ports import Clock, Elicitations, Inbound
from bot.domain.records import DeliveryState, DeliveryView, Purpose

IN_FLIGHT = frozenset({DeliveryState.PLANNED, DeliveryState.POSTING})
PASSED_OVER = frozenset({DeliveryState.FAILED, DeliveryState.SKIPPED})
NOT_CONFIGURED = "is not configured"  # the outbox's words for a platform not run here
_FIRST_POLL_S = 0.02
_MAX_POLL_S = 0.25

CHAT_PLATFORMS = ("slack", "matrix")


def _destination(platforms: Collection[str]) -> dict[str, Any]:
    chats = [p for p in CHAT_PLATFORMS if p in platforms]
    pattern = rf"^(?:web|(?:{'|'.join(chats)}):{ID_TAIL})$" if chats else "^web$"
    named = {"slack": "`slack:<channel or user>`", "matrix": "`matrix:<room or @user>`"}
    return {
        **id_schema(parse.DESTINATION_MAX, pattern=pattern),
        "description": ", ".join(["`web`", *(named[p] for p in chats)])
        + " (the platforms this deployment runs; another is a 422)",
    }


_OBJECT_WITHOUT_NUL = {"type": "object", "allOf": [JSON_WITHOUT_NUL]}
_MENTION_ID = {
    **text_schema(),
    "anyOf": [{"not": {"pattern": "^(slack|matrix):"}}, id_schema(parse.DESTINATION_MAX)],
}
_ANY_MENTION_ID = {
    "anyOf": [
        {"type": ["null", "boolean", "number"]},
        {"type": ["array", "object"], "allOf": [JSON_WITHOUT_NUL]},
        _MENTION_ID,
    ],
    "description": "a string as a mention; anything else is kept and not read",
}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "ask", "destinations", "followup_seconds"],
    "properties": {
        "id": id_schema(),
        "ask": {
            "type": "object",
            "description": "the SDK's ask: something to show (a title, a body or an action)",
            "if": {"required": ["action"], "properties": {"action": {"type": "object"}}},
            "then": {"properties": {"kind": {"enum": ["approval", None]}}},
            "anyOf": [
                {
                    "required": ["title"],
                    "properties": {"title": {"type": "string", "minLength": 1}},
                },
                {"required": ["body"], "properties": {"body": {"type": "string", "minLength": 1}}},
                {"required": ["action"], "properties": {"action": {"type": "object"}}},
            ],
            "properties": {
                "title": text_schema(),
                "body": {**text_schema(), "description": "at most 32 KiB of UTF-8"},
                "kind": {"type": "string", "enum": list(parse.KINDS)},
                "choices": {"type": "array", "uniqueItems": True, "items": id_schema()},
                "action": {
                    "type": "object",
                    "description": "binds an approval: kind must be approval (or omitted)",
                },
                "expires_at": {
                    "type": "string",
                    "format": "date-time",
                    "description": "within 90 days, or 9999-01-01T00:00:00Z (no deadline)",
                },
                "shared_key": text_schema(),
                "conversation_id": id_schema(required=False),
                "mentions": {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            _MENTION_ID,
                            {**_OBJECT_WITHOUT_NUL, "properties": {"id": _ANY_MENTION_ID}},
                        ]
                    },
                },
                "blocking": {"type": "boolean"},
                "reuse_direct": {"type": "boolean"},
                "attachment_ids": {
                    "type": "array",
                    "maxItems": parse.MAX_ATTACHMENTS,
                    "items": {**text_schema(), "minLength": 1},
                },
                "target": _OBJECT_WITHOUT_NUL,
                "preview_token": {"type": "string"},
            },
        },
        "destinations": {
            "type": "array",
            "items": _destination(CHAT_PLATFORMS),
            "description": "in preference order; [] keeps the ask in the workspace (the "
            "config's route, else the web inbox)",
        },
        "followup_seconds": {
            "anyOf": [{"const": 0}, {"type": "integer", "minimum": 5, "maximum": 900}],
            "description": "0: no follow-up; else 5 to 900 seconds",
        },
        "sender_id": {
            **id_schema(required=False),
            "description": "who asked (never answers it); also taken inside `ask`, the same",
        },
    },
}


def _null_is_absent(schema: dict[str, Any]) -> dict[str, Any]:
    """Each optional property (also of ``ask``) takes null too, as the parser counts it absent."""
    for node in (schema, schema["properties"]["ask"]):
        required = set(node.get("required", ()))
        for name, child in node["properties"].items():
            if name not in required:
                node["properties"][name] = {"anyOf": [child, {"type": "null"}]}
    return schema


_null_is_absent(_SCHEMA)


def _schema_for(platforms: Collection[str] | None) -> dict[str, Any]:
    """Only the platforms this deployment runs are named (every one when not told)."""
    if platforms is None:
        return _SCHEMA
    schema = copy.deepcopy(_SCHEMA)
    schema["properties"]["destinations"]["items"] = _destination(platforms)
    return schema


_EXAMPLE: dict[str, Any] = {
    "id": "dlv_question_01",
    "ask": {
        "title": "Which region?",
        "body": "Deploy the **api** service to which region?",
        "kind": "question",
        "choices": ["eu-west-1", "us-east-1"],
        "conversation_id": "cnv_7a1b",
        "shared_key": "deploy-region",
        "blocking": True,
    },
    "destinations": ["web"],
    "followup_seconds": 300,
}
"""tests/fixtures/sources/engine.json's "a question with choices", to the web inbox."""


@dataclass(frozen=True)
class Acceptance:
    state: str  # accepted, failed (every destination failed permanently) or waiting
    deliveries: tuple[DeliveryView, ...] = ()  # the accepted ones, or the failed ones


def acceptance(rows: Sequence[DeliveryView], followup_seconds: int) -> Acceptance:
    """With a follow-up delay the first destination in preference order not failed decides;
    without one every destination is posted at once and all are waited for."""
    primary = sorted((r for r in rows if r.purpose == Purpose.PRIMARY), key=lambda r: r.position)
    posted = tuple(r for r in primary if r.state == DeliveryState.POSTED)
    failed = tuple(r for r in primary if r.state == DeliveryState.FAILED)
    if followup_seconds == 0:
        if any(r.state in IN_FLIGHT for r in primary):
            return Acceptance("waiting")
        return Acceptance("accepted", posted) if posted else Acceptance("failed", failed)
    for row in primary:
        if row.state in PASSED_OVER:
            continue
        if row.state == DeliveryState.POSTED:
            return Acceptance("accepted", (row,))
        return Acceptance("waiting")  # being posted, or next once the one before failed
    return Acceptance("failed", failed)


def delivery_body(row: DeliveryView, link: str) -> dict[str, Any]:
    """The platform's message id, without the store's lookup key."""
    stored = row.ref.to_json() if row.ref is not None else {}
    ref = {k: v for k, v in stored.items() if k != "key"}
    if row.destination == parse.WEB:
        ref.setdefault("url", link)
    return {"destination": row.destination, "ref": ref}


def engine_router(
    elicitations: Elicitations,
    authorise: Callable[[Request], Response | None],
    *,
    wait_seconds: float = 10.0,
    clock: Clock | None = None,
    platforms: Collection[str] | None = None,
) -> APIRouter:
    """``platforms``: the chat platforms run here (``web`` always runs); a new ask naming another
    is a 422 before anything is stored. None: the outbox finds out."""
    router = APIRouter(tags=["engine"])
    time_source = clock or SystemClock()

    async def settle(key: ElicitationKey, followup_seconds: int) -> Acceptance:
        deadline = time.monotonic() + wait_seconds
        pause = _FIRST_POLL_S
        while True:
            rows = await elicitations.deliveries(key)
            result = acceptance(rows, followup_seconds)
            left = deadline - time.monotonic()
            if result.state != "waiting":
                return result
            if left <= 0:
                posted = tuple(
                    r
                    for r in rows
                    if r.purpose == Purpose.PRIMARY and r.state == DeliveryState.POSTED
                )
                return Acceptance("accepted", posted) if posted else result
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _MAX_POLL_S)

    @router.post(
        "/v1/deliveries",
        summary="Engine ask delivery: returns after the chat platform accepted the post",
        dependencies=SECURED,
        responses={
            200: json_response("Accepted by the platform: its message refs (or closed already)"),
            202: json_response("Checkpointed, no platform accepted it yet: send it again"),
            **problems(400, 401, 413, 415, 422, 502, 503),
        },
        openapi_extra=request_body(
            _schema_for(platforms), examples={"a question with choices": _EXAMPLE}
        ),
    )
    async def deliver(request: Request) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        now = time_source.now()
        req = await read_json(request, lambda data: parse.parse_delivery(data, now=now))
        if isinstance(req, JSONResponse):
            return req
        key = parse.key_of(req.id)
        if platforms is not None and await elicitations.view(key) is None:
            missing = unconfigured(req.destinations, platforms)
            if missing:  # a new ask that cannot succeed here: nothing is stored
                return _unprocessable(missing)
        audit = {"delivery_id": req.id, "destinations": list(req.destinations)}
        # No destinations: "in the workspace only", by the config's routes (else the web inbox).
        route = req.route if req.destinations else None
        inbound = Inbound(parse.SOURCE, req.id, req.elicitation, audit, route=route)
        [outcome] = await elicitations.intake([inbound])
        view = await elicitations.view(outcome.key)
        if view is None:  # pragma: no cover - intake committed it
            return problem(500, "Internal Server Error", f"{outcome.key} was not stored")
        # A duplicate id is answered from what was stored first, whatever this request says.
        extra = view.elicitation.extra
        destinations = list(extra.get("destinations", req.destinations))
        followup = int(extra.get("followup_seconds", req.route.followup_seconds))
        if not destinations:  # the config's route decides: chained when a post waits its turn
            rows = await elicitations.deliveries(outcome.key)
            followup = int(any(r.state == DeliveryState.WAITING for r in rows))
        result = await settle(outcome.key, followup)
        body: dict[str, Any] = {"id": view.elicitation.source_id, "elicitation": outcome.key}
        if result.state == "failed" and not result.deliveries:
            # Nothing refused it: it closed before a post was due (an expiry already past at
            # intake fires at once), so its copies were skipped. Stored, and answered so.
            latest = await elicitations.view(outcome.key) or view
            return JSONResponse({**body, "status": latest.status.value, "deliveries": []})
        if result.state == "failed":
            return _refused(destinations, result.deliveries, body)
        body["deliveries"] = [delivery_body(r, view.link) for r in result.deliveries]
        return JSONResponse(body, status_code=200 if result.state == "accepted" else 202)

    @router.get(
        "/v1/deliveries/{delivery_id:path}",
        summary="An engine ask as it stands: expires_at as the spec writes it, and the decision",
        dependencies=SECURED,
        responses=problems(400, 401, 404),
    )
    async def read_back(
        request: Request, delivery_id: Annotated[str, Path(json_schema_extra=id_schema())]
    ) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        if request.scope["path"].endswith("\n"):  # the route's `$` matched before it
            delivery_id += "\n"
        if (found := id_problem(delivery_id, required=True)) is not None:
            # No ask could be stored under it: no store is asked.
            return problem(400, "Invalid request", f"id: {found}", [FieldProblem("id", found)])
        if (view := await elicitations.view(parse.key_of(delivery_id))) is None:
            return problem(404, "Not Found", f"No engine delivery {delivery_id!r}.")
        return JSONResponse(ask_document(view))

    return router


def unconfigured(
    destinations: Sequence[Destination], platforms: Collection[str]
) -> list[FieldProblem]:
    """Each ``destinations[i]`` on a chat platform not in ``platforms`` (``web`` always runs)."""
    return [
        FieldProblem(f"destinations[{i}]", f"{platform} {NOT_CONFIGURED}")
        for i, destination in enumerate(destinations)
        if (platform := destination.platform) != parse.WEB and platform not in platforms
    ]


def _unprocessable(errors: list[FieldProblem], **body: Any) -> JSONResponse:
    return problem(
        422,
        "Unprocessable destination",
        "This deployment cannot deliver to: " + "; ".join(str(e) for e in errors),
        errors,
        **body,
    )


def _refused(
    destinations: list[str], failed: Sequence[DeliveryView], body: dict[str, Any]
) -> JSONResponse:
    """Every destination failed for good: 422 when none of their platforms runs here (the
    request cannot succeed), else 502 naming each platform's refusal."""
    errors = [
        FieldProblem(_where(destinations, r.destination), str(r.error or "failed")) for r in failed
    ]
    if all(e.message.endswith(NOT_CONFIGURED) for e in errors):
        return _unprocessable(errors, **body)
    return problem(
        502,
        "Bad Gateway",
        "No destination accepted the ask: " + "; ".join(str(e) for e in errors),
        errors,
        **body,
    )


def _where(destinations: list[str], destination: str) -> str:
    index = destinations.index(destination) if destination in destinations else 0
    return f"destinations[{index}]"

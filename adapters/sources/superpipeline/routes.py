"""``POST /v1/events``: ``elicitation.pending`` CloudEvents over HTTP (structured, binary, batch).
A batch is all or nothing; events dedupe by CloudEvents ``source`` and ``id``, as over NATS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from adapters.shared import cloudevents
from adapters.shared.openapi import SECURED, bounded, id_schema, inline, json_response, problems
from adapters.sources.superpipeline.models import ElicitationPending
from adapters.sources.superpipeline.parse import APPROVAL_EMPTY, CE_TYPE, to_elicitation
from bot.domain.bounds import CE_SOURCE_MAX, CE_SUBJECT_MAX, ID_MAX
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.ports import Elicitations, Inbound
from bot.domain.records import IntakeResult

Authorise = Callable[[Request], Response | None]
"""None when the request may go on, else the response to send (401, or 503 while stopping)."""

METRICS_SOURCE = "superpipeline"

_SUBJECT = (  # the workspace an identifier of at most ID_MAX characters
    rf"^evt\.[^.*>\s\x00-\x1f\x7f-\x9f\u2028\u2029]{{1,{ID_MAX}}}"
    r"\.superpipeline\.elicitation\.pending$"
)
_DATA = bounded(
    inline(ElicitationPending.model_json_schema()),
    dict.fromkeys(
        (
            *("elicitationId", "boardId", "cardId", "runId", "stageKey", "agentId"),
            *("approvalRequestId", "id", "digest", "schema", "language"),
        ),
        ID_MAX,
    ),
)
_DATA["properties"]["elicitationId"].update(id_schema())  # the one required identifier
# A broker approval request (spec 000): approvalRequestId is "the same id as elicitationId" (so
# not empty; the equality itself no schema can write), and cardId, runId and stageKey are "".
_DATA["properties"]["approvalRequestId"].update(id_schema())
_DATA["properties"]["approvalRequestId"]["description"] = (
    "only on a broker approval request: the same id as elicitationId"
)
_DATA["dependentSchemas"] = {
    "approvalRequestId": {"properties": {key: {"const": ""} for key in APPROVAL_EMPTY}}
}
_EXAMPLE_DATA: dict[str, Any] = {
    "event": "elicitation.pending",
    "boardId": "brd_134a0ddb6d434478",
    "boardName": "Developer Experience",
    "cardId": "crd_0f3c9a2b7d4e4a11",
    "cardTitle": "Research this",
    "elicitationId": "eli_1a2b3c4d5e6f7081",
    "runId": "run_0123456789abcdef",
    "stageKey": "research",
    "agentId": "agt_9e8d7c6b5a493827",
    "question": "May I run the migration?",
    "options": [
        {"id": "allow_once", "label": "Allow once", "meaning": "approve", "scope": "once"},
        {"id": "deny", "label": "Deny", "meaning": "reject"},
    ],
    "ts": "2026-11-10T09:30:00.000Z",
}
"""tests/fixtures/superpipeline/valid.json's "options" (two of its options)."""
_EXAMPLE: dict[str, Any] = {
    "specversion": "1.0",
    "id": "evt_0001",
    "source": "https://superpipeline.example.org",
    "type": CE_TYPE,
    "subject": "evt.acme.superpipeline.elicitation.pending",
    "time": "2026-11-10T09:30:00Z",
    "datacontenttype": "application/json",
    "data": _EXAMPLE_DATA,
}
_ENVELOPE: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": "^[a-z0-9]+$"},
    "additionalProperties": {
        "type": ["string", "integer", "boolean"],
        "description": "an extension attribute",
    },
    "required": ["specversion", "id", "source", "type", "data"],
    "properties": {
        "specversion": {"const": cloudevents.SPECVERSION},
        "id": id_schema(),
        "source": id_schema(CE_SOURCE_MAX),
        "type": {"const": CE_TYPE},
        "subject": {
            **id_schema(CE_SUBJECT_MAX, pattern=_SUBJECT),
            "description": "evt.<workspace>.superpipeline.elicitation.pending",
        },
        "time": {"type": "string", "format": "date-time"},
        "datacontenttype": {
            "type": "string",
            "pattern": r"^(?:application/json|[^/;\s]+/[^;\s]*\+json)(?:\s*;.*)?$",
            "description": "a JSON media type: application/json or any type/subtype+json",
        },
        "data": _DATA,
    },
}
# A context attribute sent as null counts as absent (``cloudevents.event_from_attributes``): an
# optional one, an extension too, may be null.
_ENVELOPE["additionalProperties"]["type"].append("null")
for _name, _attribute in _ENVELOPE["properties"].items():
    if _name not in _ENVELOPE["required"]:
        _attribute["type"] = [_attribute["type"], "null"]  # each optional attribute a string
_HEADERS = (
    ("ce-specversion", "required", '"1.0"'),
    ("ce-id", "required", "the event id"),
    ("ce-source", "required", "the event source"),
    ("ce-type", "required", f'"{CE_TYPE}"'),
    ("ce-subject", "optional", "evt.<workspace>.superpipeline.elicitation.pending"),
    ("ce-time", "optional", "RFC 3339"),
)
# Required in binary mode only, which OpenAPI cannot say of one media type: said in words, and
# unconstrained (structured and batch mode ignore them, so a schema would refuse what is taken).
_OPENAPI: dict[str, Any] = {
    "parameters": [
        {
            "name": name,
            "in": "header",
            "required": False,
            "description": f"Binary mode (a JSON body that is the event's data): {need}, {what}; "
            "ignored in structured and batch mode",
            "schema": {"type": "string"},
            "example": str(_EXAMPLE[name.removeprefix("ce-")]),
        }
        for name, need, what in _HEADERS
    ],
    "requestBody": {
        "required": True,
        "content": {
            "application/cloudevents+json": {
                "schema": _ENVELOPE,
                "examples": {"structured": {"value": _EXAMPLE}},
            },
            "application/cloudevents-batch+json": {
                "schema": {"type": "array", "minItems": 1, "items": _ENVELOPE},
                "examples": {"batch": {"value": [_EXAMPLE]}},
            },
            "application/json": {
                "schema": _DATA,
                "examples": {"binary (with the ce-* headers)": {"value": _EXAMPLE_DATA}},
            },
        },
    },
}


def superpipeline_router(
    elicitations: Elicitations, authorise: Authorise, *, registry: CollectorRegistry | None = None
) -> APIRouter:
    """Its intake counter and latency histogram go on ``registry`` (the one ``/metrics`` serves)."""
    router = APIRouter(tags=["superpipeline"])
    metrics = registry if registry is not None else CollectorRegistry()
    intake_counter = Counter(
        "elicitbot_intake_total", "Inbound events by result", ["source", "result"], registry=metrics
    )
    intake_latency = Histogram(
        "elicitbot_intake_seconds", "Time to accept an intake request", registry=metrics
    )
    counted: dict[str, Counter] = {}  # each result's child, looked up once rather than per event

    async def post_events(request: Request) -> Response:
        if (denied := authorise(request)) is not None:
            return denied
        started = time.perf_counter()
        events, is_batch = cloudevents.parse_http(request.headers, await request.body())
        batch = []
        problems: list[FieldProblem] = []
        for index, event in enumerate(events):
            try:
                e = to_elicitation(event)
            except PayloadRejected as exc:
                problems += exc.prefixed(f"[{index}]." if is_batch else "").problems
                continue
            audit = {"ce_source": event.source, "ce_id": event.id, "ce_type": event.type}
            batch.append(Inbound(f"ce:{event.source}", event.id, e, audit))
        if problems:
            raise PayloadRejected(problems)
        outcomes = await elicitations.intake(batch)
        results: list[dict[str, Any]] = []
        for event, outcome in zip(events, outcomes, strict=True):
            duplicate = outcome.result == IntakeResult.DUPLICATE
            result = "duplicate" if duplicate else "accepted"
            if (child := counted.get(result)) is None:
                child = counted[result] = intake_counter.labels(METRICS_SOURCE, result)
            child.inc()
            results.append({"id": event.id, "elicitation": outcome.key, "result": result})
        intake_latency.observe(time.perf_counter() - started)
        all_duplicates = not is_batch and results[0]["result"] == "duplicate"
        body = {"results": results} if is_batch else results[0]
        return JSONResponse(body, status_code=200 if all_duplicates else 202)

    # A plain Starlette route first (the app serves those ahead of its routers, skipping
    # FastAPI's dependency solving); the FastAPI route, never reached, documents it in OpenAPI.
    router.add_route("/v1/events", post_events, methods=["POST"], include_in_schema=False)
    router.add_api_route(
        "/v1/events",
        post_events,
        methods=["POST"],
        status_code=202,
        summary="CloudEvents intake (structured, binary, batch)",
        dependencies=SECURED,
        responses={
            200: json_response("A duplicate (same source and id): nothing new is stored"),
            202: json_response("Accepted: one result, or a batch's `results` in order"),
            **problems(400, 401, 413, 415, 503),
        },
        openapi_extra=_OPENAPI,
    )
    return router

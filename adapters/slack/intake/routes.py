"""``POST /slack/events``: Slack's HTTP mode; Bolt checks the ``v0`` signature and answers 401.

The signature headers are checked for Slack's only shapes first: the SDK calls ``int()`` and
``hmac.compare_digest`` on them inside Bolt's middleware, where ``"nan"`` or non-ASCII is a 500.
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp

from adapters.shared.openapi import FORM, PROBLEM, PROBLEM_SCHEMA, problems, request_body
from adapters.shared.problem import problem
from bot.domain.errors import FieldProblem

EVENTS_PATH = "/slack/events"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
SIGNATURE_HEADER = "x-slack-signature"
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
"""Unix seconds, as Slack writes them (12 digits last until the year 33658)."""
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


def malformed_signature(request: Request) -> str | None:
    """Which signature header cannot be Slack's (None: both have Slack's shape)."""
    timestamp = request.headers.get(TIMESTAMP_HEADER)
    if timestamp is None or not _TIMESTAMP.fullmatch(timestamp):
        return "X-Slack-Request-Timestamp"
    signature = request.headers.get(SIGNATURE_HEADER)
    if signature is None or not _SIGNATURE.fullmatch(signature):
        return "X-Slack-Signature"
    return None


def slack_router(app: AsyncApp) -> APIRouter:
    handler = AsyncSlackRequestHandler(app)
    router = APIRouter(tags=["slack"])

    @router.post(
        EVENTS_PATH,
        summary="Slack HTTP mode: events, interactivity and slash commands (signed by Slack)",
        response_class=Response,
        responses={
            200: {"description": "acknowledged"},
            **problems(401, 413),
            401: {
                "description": "not signed by Slack (a malformed signature: problem+json; a "
                "wrong one, as Bolt answers it: text)",
                "content": {
                    PROBLEM: {"schema": PROBLEM_SCHEMA},
                    "text/plain": {"schema": {"type": "string"}},
                },
            },
        },
        openapi_extra=request_body(
            {"type": "object", "description": "what Slack sends, signed (X-Slack-Signature)"},
            ("application/json", FORM),
        ),
    )
    async def slack_events(request: Request) -> Response:
        if (header := malformed_signature(request)) is not None:
            why = FieldProblem(header, "is missing or not in the shape Slack signs with")
            return problem(401, "Unauthorized", str(why), [why])
        try:
            (await request.body()).decode("utf-8")
        except UnicodeDecodeError:
            # Slack signs UTF-8 text; Bolt cannot even read this to check it: not from Slack.
            why = FieldProblem("body", "is not UTF-8 text, so not a request Slack signed")
            return problem(401, "Unauthorized", str(why), [why])
        return await handler.handle(request)

    return router

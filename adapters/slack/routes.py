"""``POST /slack/events``: Slack's HTTP mode (Events API, interactivity, slash commands).

Mounted on the one FastAPI app (``Runtime.routers``). Bolt's Starlette adapter turns the request
into an ``AsyncBoltRequest``; Bolt checks the signature first (``v0`` HMAC-SHA256 over the raw
body with the signing secret, timestamp within 5 minutes) and answers 401 before any listener
runs. The response goes back as soon as the listener has called ``ack()``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from slack_bolt.adapter.fastapi.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp

EVENTS_PATH = "/slack/events"


def slack_router(app: AsyncApp) -> APIRouter:
    """The router serving Slack's requests to ``app``."""
    handler = AsyncSlackRequestHandler(app)
    router = APIRouter(tags=["slack"])

    @router.post(
        EVENTS_PATH,
        summary="Slack HTTP mode: events, interactivity and slash commands (signed by Slack)",
        response_class=Response,
        responses={200: {"description": "acknowledged"}, 401: {"description": "bad signature"}},
    )
    async def slack_events(request: Request) -> Response:
        return await handler.handle(request)

    return router

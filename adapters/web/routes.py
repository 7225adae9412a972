"""The web inbox's routes; the handlers are in :mod:`.inbox` and :mod:`.admin`.

The page polls ``/inbox/version`` and fetches ``/inbox/live`` when it changes, rather than using
server-sent events: a request ends at once, so an open page never holds up a shutdown, and it
passes proxies that buffer streams.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from adapters.shared.openapi import FORM, problems, request_body
from adapters.web.admin import AdminRoutes
from adapters.web.identity import IdentityPolicy
from adapters.web.inbox import InboxRoutes
from adapters.web.reads import Reads
from adapters.web.session import CSRF_COOKIE, CSRF_FIELD, STATUSES, Session
from bot.domain.ports import Clock, Elicitations
from bot.domain.store import ElicitationReads

__all__ = ["CSRF_COOKIE", "inbox_router"]

_HTML = {"text/html": {"schema": {"type": "string"}}}
_REFUSAL_JSON = {
    "type": "object",
    "required": ["ok", "message"],
    "properties": {
        "ok": {"const": False},
        "code": {"type": "string"},
        "message": {"type": "string"},
    },
}
_WHY = {
    400: "The form or a parameter could not be read",
    401: "The trusted proxy's user header names no user",
    403: "Not this machine or a trusted proxy's user, not an admin, a stale CSRF token, or a "
    "refused answer (the asker, an agent, a bot, a non-admin's admin option)",
    404: "No such elicitation",
    409: "Already answered, expired or closed; or nothing to claim",
    415: f"The answer is not sent as {FORM}",
    422: "The answer itself is not acceptable (the card says why)",
    502: "The upstream refused a secret's answer",
}


def _refusals(*statuses: int, json: bool = False) -> dict[int | str, dict[str, Any]]:
    """The inbox answers a refusal as a page (HTML), or as ``{"ok": false, "code", "message"}``
    to the page script (``Accept: application/json``)."""
    content: dict[str, Any] = dict(_HTML)
    if json:
        content["application/json"] = {"schema": _REFUSAL_JSON}
    described: dict[int | str, dict[str, Any]] = {
        status: {"description": _WHY[status], "content": content} for status in statuses
    }
    return {**described, **problems()}  # "default": an unexpected 500 is a problem document


_ANSWER_FORM = {
    "type": "object",
    "required": ["key", CSRF_FIELD],
    "properties": {
        "key": {"type": "string", "description": "the elicitation (`<source>:<id>`)"},
        CSRF_FIELD: {"type": "string", "description": "the page's CSRF token (its cookie's)"},
        "option": {"type": "array", "items": {"type": "string"}, "description": "option ids"},
        "text": {"type": "string"},
        "secret": {"type": "string", "enum": ["1"], "description": "text is a secret"},
        "revision": {"type": "string"},
        "digest": {"type": "string", "description": "the approval subject digest the card showed"},
        "claim": {"type": "string", "enum": ["1"], "description": "'I'm on it' instead"},
    },
}


def _query(name: str, description: str, *, required: bool = False) -> dict[str, Any]:
    """A query parameter the handler reads itself (``request.query_params``); any string."""
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": {"type": "string"},
    }


_KEY = "one elicitation, `<source>:<id>` or a bare source id"
_FILTERS = [
    _query("workspace", "only this workspace (empty: all)"),
    _query("board", "only this board (empty: all)"),
    _query("source", "only this source, e.g. `engine` (empty: all)"),
    _query(
        "status",
        "only this status: " + ", ".join(f"`{s}`" for s in sorted(STATUSES)) + " (anything "
        "else: no status filter)",
    ),
]
_LISTED = [
    *_FILTERS,
    _query("key", f"{_KEY}, alone (the messages' full-text link); the filters then do not apply"),
    _query("after", "the next page: the `key` of the last item of the page before"),
]


def inbox_router(
    elicitations: Elicitations,
    store: ElicitationReads,
    identity: IdentityPolicy,
    *,
    clock: Clock,
    secure_cookies: bool = False,
) -> APIRouter:
    """The web inbox's routes. ``store`` is for reads only; every answer and claim goes through
    ``elicitations``. ``clock`` must be the service's (what is offered depends on "now").
    ``secure_cookies``: the page is served over HTTPS, so the CSRF cookie is ``Secure`` and
    ``__Host-`` prefixed."""
    session = Session(elicitations, identity, secure_cookies)
    reads = Reads(store, clock, policy=elicitations.copy_policy)
    inbox = InboxRoutes(elicitations, reads, session)
    admin = AdminRoutes(elicitations, reads, session)
    router = APIRouter(tags=["web inbox"])
    refusals = _refusals(401, 403)

    def page(
        path: str,
        endpoint: Callable[[Request], Awaitable[Response]],
        summary: str,
        *parameters: dict[str, Any],
        more: tuple[int, ...] = (400, 404),
    ) -> None:
        """A page for a browser: HTML, refused as a page too."""
        router.add_api_route(
            path,
            endpoint,
            methods=["GET"],
            response_class=HTMLResponse,
            summary=summary,
            responses={**refusals, **_refusals(*more)},
            openapi_extra={"parameters": list(parameters)} if parameters else None,
        )

    done = _query("done", f"{_KEY} just answered here: the page says what was recorded")
    page("/", inbox.inbox, "The inbox", *_LISTED, done)
    page("/inbox/live", inbox.live, "Its live part", *_LISTED)
    router.add_api_route(
        "/inbox/version",
        inbox.version,
        methods=["GET"],
        summary="What is pending, as a fingerprint",
        responses=_refusals(401, 403, json=True),
    )
    router.add_api_route(
        "/inbox/answer",
        inbox.answer,
        methods=["POST"],
        summary="Answer (a form post)",
        responses={
            200: {"description": "Recorded (to the page script: `{ok, key, message}`)"},
            303: {"description": "Recorded: back to the inbox (a browser's form post)"},
            **_refusals(400, 401, 403, 404, 409, 415, 422, 502, json=True),
        },
        openapi_extra=request_body(_ANSWER_FORM, (FORM,)),
    )
    page("/admin", admin.admin, "Routes, elicitations", more=())
    key = _query("key", f"{_KEY} (none: a 404)", required=True)
    page(
        "/admin/elicitation",
        admin.detail,
        "One elicitation: deliveries, deadlines, outbox, audit",
        key,
    )
    router.add_api_route(
        "/admin/audit.jsonl",
        admin.audit_export,
        methods=["GET"],
        response_class=Response,
        summary="The audit log, JSON Lines",
        openapi_extra={"parameters": [*_FILTERS, _query("key", f"{_KEY}: its entries only")]},
        responses={
            200: {
                "description": "One JSON object per line",
                "content": {"application/jsonl": {"schema": {"type": "string"}}},
            },
            **refusals,
        },
    )
    router.add_api_route("/static/{name}", session.static, methods=["GET"], include_in_schema=False)
    return router

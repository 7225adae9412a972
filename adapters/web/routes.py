"""The web inbox's routes: the page, answers, live updates, the admin view and the audit export.

- ``GET /``: what is waiting (newest first) and the recent history; filters ``workspace``,
  ``board``, ``source``, ``status``; ``key`` shows one elicitation (the messages' full-text link).
- ``POST /inbox/answer``: a form post (or the page script's ``fetch`` with ``Accept:
  application/json``) passed to :meth:`Elicitations.act` with the same rules and the same atomic
  first answer as chat. A refusal is shown in the card, the typed text kept.
- ``GET /inbox/version`` and ``GET /inbox/live``: the page polls the first (a fingerprint of what is
  pending, computed at most every ``reads.VERSION_CACHE_SECONDS`` for all open pages together)
  and, when it changes, fetches the second and swaps the cards that changed. Polling rather than
  server-sent events: a request ends at once, so an open page never holds up a shutdown, and it
  passes proxies that buffer streams.
- ``GET /admin``, ``GET /admin/elicitation?key=``, ``GET /admin/audit.jsonl``: admins only.

Every POST needs the per-session CSRF token (:mod:`.session`). The handlers live in
:mod:`.inbox` and :mod:`.admin`; what they read, in :mod:`.reads`.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from adapters.web.admin import AdminRoutes
from adapters.web.identity import IdentityPolicy
from adapters.web.inbox import InboxRoutes
from adapters.web.reads import Reads
from adapters.web.session import CSRF_COOKIE, Session
from bot.domain.ports import Clock, Elicitations
from bot.domain.store import ElicitationReads

__all__ = ["CSRF_COOKIE", "inbox_router"]


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
    reads = Reads(store, clock)
    inbox = InboxRoutes(elicitations, reads, session)
    admin = AdminRoutes(elicitations, reads, session)
    router = APIRouter(tags=["web inbox"])
    html = HTMLResponse
    router.add_api_route(
        "/", inbox.inbox, methods=["GET"], response_class=html, summary="The inbox"
    )
    router.add_api_route(
        "/inbox/live", inbox.live, methods=["GET"], response_class=html, summary="Its live part"
    )
    router.add_api_route(
        "/inbox/version",
        inbox.version,
        methods=["GET"],
        summary="What is pending, as a fingerprint",
    )
    router.add_api_route(
        "/inbox/answer", inbox.answer, methods=["POST"], summary="Answer (a form post)"
    )
    router.add_api_route(
        "/admin", admin.admin, methods=["GET"], response_class=html, summary="Routes, elicitations"
    )
    router.add_api_route(
        "/admin/elicitation",
        admin.detail,
        methods=["GET"],
        response_class=html,
        summary="One elicitation: deliveries, deadlines, outbox, audit",
    )
    router.add_api_route(
        "/admin/audit.jsonl",
        admin.audit_export,
        methods=["GET"],
        summary="The audit log, JSON Lines",
    )
    router.add_api_route("/static/{name}", session.static, methods=["GET"], include_in_schema=False)
    return router

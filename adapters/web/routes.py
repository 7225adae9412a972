"""The web inbox's routes: the page, answers, live updates, the admin view and the audit export.

- ``GET /``: what is waiting (newest first) and the recent history; filters ``workspace``,
  ``board``, ``source``, ``status``; ``key`` shows one elicitation (the messages' full-text link).
- ``POST /inbox/answer``: a form post (or the page script's ``fetch`` with ``Accept:
  application/json``) answered through :meth:`Elicitations.answer` with the same rules and the
  same atomic first answer as chat. A refusal is shown in the card, the typed text kept.
- ``GET /inbox/version`` and ``GET /inbox/live``: the page polls the first (a fingerprint of what is
  pending, computed at most every :data:`VERSION_CACHE_SECONDS` for all open pages together) and,
  when it changes, fetches the second and swaps the cards that changed. Polling rather than
  server-sent events: a request ends at once, so an open page never holds up a shutdown, and it
  passes proxies that buffer streams.
- ``GET /admin``, ``GET /admin/elicitation?key=``, ``GET /admin/audit.jsonl``: admins only.

Every POST needs the per-session CSRF token: a random value in a ``SameSite=Strict``, ``HttpOnly``
cookie that the form repeats in a hidden field; a request a browser marks cross-site
(``Sec-Fetch-Site``) is refused as well. The pages carry a strict Content-Security-Policy.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.responses import StreamingResponse

from adapters.web import pages
from adapters.web.identity import Denied, IdentityPolicy
from adapters.web.pages import Filters, InboxPage, Notice, Viewer
from bot.domain.errors import DeliveryError
from bot.domain.model import Answer, Attempt, RefusalCode, Status
from bot.domain.ports import Clock, Elicitations, PromptView
from bot.domain.rules import describe_answer, format_time
from store.sql import SqlStore, StoredElicitation

CSRF_COOKIE = "elicitbot_csrf"
CSRF_FIELD = "csrf"
PAGE_LIMIT = 100
HISTORY_LIMIT = 50
RECENT_SCAN = 300
"""Newest elicitations read for the history and the filter choices."""
SCAN_BATCH = 200
SCAN_LIMIT = 5000
"""Most rows read to fill one filtered page (filters run here, not in SQL)."""
VERSION_CACHE_SECONDS = 0.25
VERSION_PENDING = 500
FORM = "application/x-www-form-urlencoded"
MAX_FORM_FIELDS = 200
STATUSES = frozenset(s.value for s in Status)
STATIC = Path(__file__).parent / "static"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
"""A CSRF token as :func:`secrets.token_urlsafe` (32 bytes) writes it."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
REFUSAL_STATUS = {
    RefusalCode.ALREADY_ANSWERED: 409,
    RefusalCode.EXPIRED: 409,
    RefusalCode.CLOSED: 409,
    RefusalCode.ASKER: 403,
    RefusalCode.AGENT: 403,
    RefusalCode.BOT: 403,
    RefusalCode.NOT_ADMIN: 403,
}
"""Any other refusal is 422: the answer itself is not acceptable."""


@dataclass(frozen=True)
class _Asset:
    body: bytes
    media_type: str
    version: str


def _assets() -> dict[str, _Asset]:
    found = {}
    for name, media_type in (("inbox.css", "text/css"), ("inbox.js", "text/javascript")):
        body = (STATIC / name).read_bytes()
        found[name] = _Asset(body, media_type, hashlib.sha256(body).hexdigest()[:12])
    return found


class _Fingerprint:
    """What is pending (keys and versions) plus how many elicitations exist, as one short hash.

    Shared by every open page and recomputed at most every :data:`VERSION_CACHE_SECONDS`.
    """

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self._value = ""
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        async with self._lock:  # pages polling together share one computation
            if time.monotonic() - self._at < VERSION_CACHE_SECONDS:
                return self._value
            pending = await self.store.list_elicitations(status="pending", limit=VERSION_PENDING)
            total = await self.store.count("elicitation")
            digest = hashlib.sha256(f"{total}\n".encode())
            for s in pending:
                digest.update(f"{s.elicitation.key}\x00{s.version}\n".encode())
            self._value = digest.hexdigest()[:16]
            self._at = time.monotonic()
            return self._value


class _Inbox:
    """The handlers and what they share; :func:`inbox_router` turns them into routes."""

    def __init__(
        self,
        elicitations: Elicitations,
        store: SqlStore,
        identity: IdentityPolicy,
        clock: Clock,
        secure_cookies: bool,
    ) -> None:
        self.elicitations = elicitations
        self.store = store
        self.identity = identity
        self.clock = clock
        self.secure_cookies = secure_cookies
        self.assets = _assets()
        self.links = {
            name.split(".")[-1]: f"/static/{name}?v={a.version}" for name, a in self.assets.items()
        }
        self.cookie_name = f"__Host-{CSRF_COOKIE}" if secure_cookies else CSRF_COOKIE
        self.fingerprint = _Fingerprint(store)

    # -- who is asking -------------------------------------------------------------------------

    def viewer_of(self, request: Request) -> tuple[Viewer, bool] | Denied:
        """The viewer and whether their CSRF cookie is new (to be set on the response)."""
        client = request.client.host if request.client else None
        who = self.identity.identify(request.headers, client)
        if isinstance(who, Denied):
            return who
        token = request.cookies.get(self.cookie_name, "")
        fresh = not _TOKEN.fullmatch(token)
        if fresh:
            token = secrets.token_urlsafe(32)
        admin = who.key in self.elicitations.people.admins
        return Viewer(identity=who, admin=admin, csrf=token), fresh

    def admin_of(self, request: Request) -> tuple[Viewer, bool] | Response:
        found = self.viewer_of(request)
        if isinstance(found, Denied):
            return self.problem(found.status, found.message)
        if not found[0].admin:
            return self.problem(403, "Only a workspace admin can see the admin view.")
        return found

    def html(self, body: str, status: int = 200, *, cookie: Viewer | None = None) -> HTMLResponse:
        response = HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)
        if cookie is not None:
            response.set_cookie(
                self.cookie_name,
                cookie.csrf,
                httponly=True,
                samesite="strict",
                secure=self.secure_cookies,
                path="/",
            )
        return response

    def problem(self, status: int, message: str, *, as_json: bool = False) -> Response:
        if as_json:
            body = {"ok": False, "code": "http", "message": message}
            return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)
        return self.html(pages.render_problem(status, message, self.links), status)

    def csrf_refusal(self, request: Request, form: Mapping[str, list[str]]) -> str | None:
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return "Refused: the form was sent from another site."
        cookie = request.cookies.get(self.cookie_name, "")
        given = (form.get(CSRF_FIELD) or [""])[0]
        if not cookie or not given or not hmac.compare_digest(cookie.encode(), given.encode()):
            return "This form has expired: reload the page and answer again."
        return None

    # -- reading -------------------------------------------------------------------------------

    def prompt(self, stored: StoredElicitation) -> PromptView:
        return PromptView(
            elicitation=stored.elicitation,
            status=stored.status,
            answer=stored.answer,
            version=stored.version,
            link=f"/?{urlencode({'key': stored.elicitation.key})}",
            now=self.clock.now(),
            claim=stored.claim,
        )

    async def scan(
        self,
        status: str | None,
        filters: Filters,
        after: str | None,
        limit: int,
        cap: int = SCAN_LIMIT,
    ) -> tuple[list[StoredElicitation], str | None]:
        """Up to ``limit`` matches, newest first, and the next page's cursor (None: no more)."""
        found: list[StoredElicitation] = []
        cursor = after
        scanned = 0
        while scanned < cap:
            batch = await self.store.list_elicitations(
                status=status, after=cursor, limit=SCAN_BATCH
            )
            scanned += len(batch)
            for stored in batch:
                if filters.matches(stored.elicitation):
                    found.append(stored)
                    if len(found) == limit:
                        return found, stored.elicitation.key
            if len(batch) < SCAN_BATCH:
                return found, None
            cursor = batch[-1].elicitation.key
        return found, cursor

    async def one(self, ident: str) -> StoredElicitation | None:
        key = await self.store.resolve_key(ident) if ident else None
        return await self.store.get(key) if key is not None else None

    async def inbox_page(
        self,
        request: Request,
        viewer: Viewer,
        *,
        key: str = "",
        card_notice: Notice | None = None,
        draft: str = "",
    ) -> InboxPage:
        filters = _filters(request)
        version = await self.fingerprint.get()
        if key:
            stored = await self.one(key)
            cards = []
            if stored is not None:
                view = self.prompt(stored)
                cards = [pages.card_view(view, draft=draft, notice=card_notice)]
            waiting = [c for c in cards if c.pending]
            closed = [c for c in cards if not c.pending]
            return InboxPage(viewer, filters, waiting, closed, version, key=key)
        after = request.query_params.get("after") or None
        recent = await self.store.list_elicitations(limit=RECENT_SCAN)
        pending: list[StoredElicitation] = []
        history: list[StoredElicitation] = []
        more = None
        if filters.status in ("", "pending"):
            pending, more = await self.scan("pending", filters, after, PAGE_LIMIT)
        if filters.status == "":
            done = [s for s in recent if s.status is not Status.PENDING]
            done.sort(key=lambda s: s.updated_at, reverse=True)
            history = [s for s in done if filters.matches(s.elicitation)][:HISTORY_LIMIT]
        elif filters.status != "pending":
            history, more = await self.scan(filters.status, filters, after, PAGE_LIMIT)
        return InboxPage(
            viewer,
            filters,
            [pages.card_view(self.prompt(s)) for s in pending],
            [pages.card_view(self.prompt(s)) for s in history],
            version,
            choices=pages.filter_choices(s.elicitation for s in recent),
            more=filters.query(after=more) if more else None,
        )

    # -- the inbox -----------------------------------------------------------------------------

    async def inbox(self, request: Request) -> Response:
        found = self.viewer_of(request)
        if isinstance(found, Denied):
            return self.problem(found.status, found.message)
        viewer, fresh = found
        page = await self.inbox_page(request, viewer, key=request.query_params.get("key", ""))
        done = await self.one(request.query_params.get("done", ""))
        answer = done.answer if done is not None else None
        if done is not None and answer is not None and answer.respondent == viewer.identity.key:
            page.notice = Notice("done", _recorded(done, answer))
        return self.html(pages.render_inbox(page, self.links), cookie=viewer if fresh else None)

    async def live(self, request: Request) -> Response:
        found = self.viewer_of(request)
        if isinstance(found, Denied):
            return self.problem(found.status, found.message)
        viewer, fresh = found
        page = await self.inbox_page(request, viewer, key=request.query_params.get("key", ""))
        response = self.html(pages.render_live(page), cookie=viewer if fresh else None)
        response.headers["X-Inbox-Version"] = page.version
        return response

    async def version(self, request: Request) -> Response:
        found = self.viewer_of(request)
        if isinstance(found, Denied):
            return self.problem(found.status, found.message, as_json=True)
        version = await self.fingerprint.get()
        return JSONResponse({"version": version}, headers=SECURITY_HEADERS)

    async def answer(self, request: Request) -> Response:
        as_json = "application/json" in request.headers.get("accept", "")
        found = self.viewer_of(request)
        if isinstance(found, Denied):
            return self.problem(found.status, found.message, as_json=as_json)
        viewer = found[0]
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != FORM:
            return self.problem(415, f"Send the answer as {FORM}.", as_json=as_json)
        try:
            form = _parse_form(await request.body())
        except ValueError:
            return self.problem(400, "The form could not be read.", as_json=as_json)
        refused = self.csrf_refusal(request, form)
        if refused is not None:
            return self.problem(403, refused, as_json=as_json)
        key = _first(form, "key")
        if _first(form, "claim") == "1":
            return await self.claim(request, viewer, key, as_json=as_json)
        attempt = _attempt(viewer, form)
        try:
            outcome = await self.elicitations.answer(key, attempt)
        except KeyError:
            return self.problem(404, "No such elicitation.", as_json=as_json)
        except DeliveryError:
            message = "The answer could not be passed on to the system that asked: try again."
            return await self.refused(request, viewer, key, 502, ("upstream", message), attempt)
        result = outcome.result
        if isinstance(result, Answer):
            if not as_json:
                target = f"/?{urlencode({'done': outcome.key})}#{outcome.key}"
                return RedirectResponse(target, status_code=303)
            stored = await self.store.get(outcome.key)
            message = _recorded(stored, result) if stored else "Your answer was recorded."
            body = {"ok": True, "key": outcome.key, "message": message}
            return JSONResponse(body, headers=SECURITY_HEADERS)
        status = REFUSAL_STATUS.get(result.code, 422)
        return await self.refused(
            request, viewer, outcome.key, status, (result.code.value, result.message), attempt
        )

    async def claim(self, request: Request, viewer: Viewer, key: str, *, as_json: bool) -> Response:
        """ "I'm on it": escalation and follow-ups wait; every copy shows who."""
        try:
            outcome = await self.elicitations.claim(key, viewer.identity)
        except KeyError:
            return self.problem(404, "No such elicitation.", as_json=as_json)
        if outcome.claim is None:
            message = outcome.refusal.message if outcome.refusal else "Nothing to claim."
            if as_json:
                body = {"ok": False, "code": "claim", "message": message}
                return JSONResponse(body, status_code=409, headers=SECURITY_HEADERS)
            page = await self.inbox_page(
                request, viewer, key=key, card_notice=Notice("refused", message)
            )
            return self.html(pages.render_inbox(page, self.links), status=409)
        message = (
            f"You're on it until {format_time(outcome.claim.until)}: "
            "escalation and follow-ups wait for you."
        )
        if as_json:
            return JSONResponse(
                {"ok": True, "key": key, "message": message}, headers=SECURITY_HEADERS
            )
        return RedirectResponse(f"/?{urlencode({'done': key})}#{key}", status_code=303)

    async def refused(
        self,
        request: Request,
        viewer: Viewer,
        key: str,
        status: int,
        why: tuple[str, str],
        attempt: Attempt,
    ) -> Response:
        """The refusal: JSON for the script, else the one card again with the message and the
        typed text (never a secret's)."""
        code, message = why
        if "application/json" in request.headers.get("accept", ""):
            body = {"ok": False, "code": code, "message": message}
            return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)
        page = await self.inbox_page(
            request,
            viewer,
            key=key,
            card_notice=Notice("refused", message),
            draft="" if attempt.secret else (attempt.text or ""),
        )
        return self.html(pages.render_inbox(page, self.links), status)

    # -- admin ---------------------------------------------------------------------------------

    async def admin(self, request: Request) -> Response:
        found = self.admin_of(request)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        filters = _filters(request)
        items, _ = await self.scan(filters.status or None, filters, None, PAGE_LIMIT)
        recent = await self.store.list_elicitations(limit=RECENT_SCAN)
        rows = [
            {
                "key": s.elicitation.key,
                "title": pages.title_of(s.elicitation),
                "status": s.status.value,
                "created_at": s.created_at,
                "deliveries": await self.store.deliveries(s.elicitation.key),
            }
            for s in items
        ]
        body = pages.render_admin(
            viewer,
            self.links,
            routes=await self.elicitations.routes_text(),
            filters=filters,
            choices=pages.filter_choices(s.elicitation for s in recent),
            rows=rows,
        )
        return self.html(body, cookie=viewer if fresh else None)

    async def admin_detail(self, request: Request) -> Response:
        found = self.admin_of(request)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        stored = await self.one(request.query_params.get("key", ""))
        if stored is None:
            return self.problem(404, "No such elicitation.")
        key = stored.elicitation.key
        body = pages.render_admin_detail(
            viewer,
            self.links,
            card=pages.card_view(self.prompt(stored)),
            deliveries=await self.store.deliveries(key),
            deadlines=await self.store.deadlines(key),
            audit=await self.store.audit(key),
            outbox=await self.store.outbox(key),
        )
        return self.html(body, cookie=viewer if fresh else None)

    async def audit_export(self, request: Request) -> Response:
        found = self.admin_of(request)
        if isinstance(found, Response):
            return found
        key = request.query_params.get("key", "")
        filters = _filters(request)

        async def lines() -> AsyncIterator[bytes]:
            if key:
                stored = await self.one(key)
                keys = [stored.elicitation.key] if stored is not None else []
            else:
                everything = 10**9
                items, _ = await self.scan(
                    filters.status or None, filters, None, everything, cap=everything
                )
                keys = [s.elicitation.key for s in items]
            for k in keys:
                for row in await self.store.audit(k):
                    yield (json.dumps(_audit_json(k, row), ensure_ascii=False) + "\n").encode()

        return StreamingResponse(
            lines(),
            media_type="application/jsonl; charset=utf-8",
            headers={
                **SECURITY_HEADERS,
                "Content-Disposition": 'attachment; filename="elicitbot-audit.jsonl"',
            },
        )

    async def static(self, name: str, v: str = "") -> Response:
        asset = self.assets.get(name)
        if asset is None:
            return Response(status_code=404)
        cache = "public, max-age=31536000, immutable" if v == asset.version else "no-cache"
        return Response(
            asset.body,
            media_type=asset.media_type,
            headers={"Cache-Control": cache, "X-Content-Type-Options": "nosniff"},
        )


def inbox_router(
    elicitations: Elicitations,
    store: SqlStore,
    identity: IdentityPolicy,
    *,
    clock: Clock,
    secure_cookies: bool = False,
) -> APIRouter:
    """The web inbox's routes. ``store`` is for reads only; every answer goes through
    ``elicitations``. ``clock`` must be the service's (what is offered depends on "now").
    ``secure_cookies``: the page is served over HTTPS, so the CSRF cookie is ``Secure`` and
    ``__Host-`` prefixed."""
    h = _Inbox(elicitations, store, identity, clock, secure_cookies)
    router = APIRouter(tags=["web inbox"])
    html = HTMLResponse
    router.add_api_route("/", h.inbox, methods=["GET"], response_class=html, summary="The inbox")
    router.add_api_route(
        "/inbox/live", h.live, methods=["GET"], response_class=html, summary="Its live part"
    )
    router.add_api_route(
        "/inbox/version", h.version, methods=["GET"], summary="What is pending, as a fingerprint"
    )
    router.add_api_route(
        "/inbox/answer", h.answer, methods=["POST"], summary="Answer (a form post)"
    )
    router.add_api_route(
        "/admin", h.admin, methods=["GET"], response_class=html, summary="Routes, elicitations"
    )
    router.add_api_route(
        "/admin/elicitation",
        h.admin_detail,
        methods=["GET"],
        response_class=html,
        summary="One elicitation: deliveries, deadlines, outbox, audit",
    )
    router.add_api_route(
        "/admin/audit.jsonl", h.audit_export, methods=["GET"], summary="The audit log, JSON Lines"
    )
    router.add_api_route("/static/{name}", h.static, methods=["GET"], include_in_schema=False)
    return router


def _filters(request: Request) -> Filters:
    q = request.query_params
    status = q.get("status", "")
    return Filters(
        workspace=q.get("workspace", "").strip(),
        board=q.get("board", "").strip(),
        source=q.get("source", "").strip(),
        status=status if status in STATUSES else "",
    )


def _first(form: Mapping[str, list[str]], name: str) -> str:
    values = form.get(name)
    return values[0] if values else ""


def _attempt(viewer: Viewer, form: Mapping[str, list[str]]) -> Attempt:
    """The answer a form carries. Text keeps what was typed (CRLF as LF), except a secret's,
    which passes exactly as typed."""
    secret = _first(form, "secret") == "1"
    raw = _first(form, "text")
    text = raw if secret else raw.replace("\r\n", "\n")
    revision = _first(form, "revision")
    return Attempt(
        respondent=viewer.identity,
        option_ids=tuple(form.get("option", [])),
        text=text if text.strip() else None,
        secret=secret,
        via="web",
        revision=int(revision) if revision.isdigit() else None,
    )


def _parse_form(body: bytes) -> dict[str, list[str]]:
    """``application/x-www-form-urlencoded`` into lists of values (ValueError when unreadable)."""
    fields: dict[str, list[str]] = {}
    pairs = parse_qsl(
        body.decode("utf-8"),
        keep_blank_values=True,
        strict_parsing=False,
        max_num_fields=MAX_FORM_FIELDS,
        errors="strict",
    )
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return fields


def _recorded(stored: StoredElicitation, answer: Answer) -> str:
    title = pages.title_of(stored.elicitation)
    return f"Recorded: {describe_answer(stored.elicitation, answer)} (on “{title}”)."


def _audit_json(key: str, row: Mapping[str, Any]) -> dict[str, Any]:
    at = row["at"]
    return {
        "id": row["id"],
        "elicitation": key,
        "at": at.isoformat() if at is not None else None,
        "action": row["action"],
        "actor": row["actor"],
        "code": row["code"],
        "detail": row["detail"],
    }

"""What every inbox route shares: who is asking, the CSRF token, and how a response goes out.

A POST must repeat in a form field the token of its ``SameSite=Strict``, ``HttpOnly`` cookie, and
is refused when a browser marks it cross-site (``Sec-Fetch-Site``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from adapters.web import pages
from adapters.web.identity import Denied, IdentityPolicy
from adapters.web.pages import Filters, Viewer
from bot.domain.model import Status
from bot.domain.policy import Standing
from bot.domain.ports import Elicitations

CSRF_COOKIE = "elicitbot_csrf"
CSRF_FIELD = "csrf"
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


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    version: str


def load_assets() -> dict[str, Asset]:
    found = {}
    for name, media_type in (("inbox.css", "text/css"), ("inbox.js", "text/javascript")):
        body = (STATIC / name).read_bytes()
        found[name] = Asset(body, media_type, hashlib.sha256(body).hexdigest()[:12])
    return found


class Session:
    """The viewer of a request, its CSRF cookie, and the pages' responses (HTML or problem)."""

    def __init__(
        self, elicitations: Elicitations, identity: IdentityPolicy, secure_cookies: bool
    ) -> None:
        self._elicitations = elicitations
        self.identity = identity
        self.secure_cookies = secure_cookies
        self.assets = load_assets()
        self.links = {
            name.split(".")[-1]: f"/static/{name}?v={a.version}" for name, a in self.assets.items()
        }
        self.cookie_name = f"__Host-{CSRF_COOKIE}" if secure_cookies else CSRF_COOKIE

    def viewer_of(
        self, request: Request, *, as_json: bool = False, admin_only: bool = False
    ) -> tuple[Viewer, bool] | Response:
        """The viewer and whether their CSRF cookie is new (to be set on the response), or the
        refusal to send."""
        client = request.client.host if request.client else None
        who = self.identity.identify(request.headers, client)
        if isinstance(who, Denied):
            return self.problem(who.status, who.message, as_json=as_json)
        token = request.cookies.get(self.cookie_name, "")
        fresh = not _TOKEN.fullmatch(token)
        if fresh:
            token = secrets.token_urlsafe(32)
        admin = who.key in self._elicitations.people.admins  # read now: people change
        if admin_only and not admin:
            return self.problem(403, "Only a workspace admin can see the admin view.")
        standing = Standing(groups=self.identity.groups(request.headers, client))
        return Viewer(identity=who, admin=admin, csrf=token, standing=standing), fresh

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


def filters_of(request: Request) -> Filters:
    q = request.query_params
    status = q.get("status", "")
    return Filters(
        workspace=q.get("workspace", "").strip(),
        board=q.get("board", "").strip(),
        source=q.get("source", "").strip(),
        status=status if status in STATUSES else "",
    )


def first(form: Mapping[str, list[str]], name: str) -> str:
    values = form.get(name)
    return values[0] if values else ""


def parse_form(body: bytes) -> dict[str, list[str]]:
    """``application/x-www-form-urlencoded`` into lists of values (ValueError when unreadable)."""
    text = body.decode("utf-8")
    return parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, errors="strict")

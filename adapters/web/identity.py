"""Who is at the web inbox: without ``[web] user_header``, on a loopback listener, the local admin
``web:local`` (any other address is refused, so a server later exposed hands out no admin rights);
behind a sign-in proxy, the user its header names, believed only when the direct peer (the
socket's, never ``X-Forwarded-For``) is in ``[server] trusted_proxies``, so whoever reaches the port
directly cannot claim a name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog

from bot.domain.model import Identity

LOCAL_USER = "local"
LOCAL_NAME = "local admin"
MAX_USER_LENGTH = 256
MAX_GROUP_LENGTH = 200
HTTP_UNAUTHORIZED = 401
HTTP_FORBIDDEN = 403
log = structlog.get_logger("elicitbot.web")

Trusts = Callable[[str | None], bool]
"""Whether a direct peer's address is a trusted proxy (``ServerConfig.trusts``)."""


def trusts_nobody(_: str | None) -> bool:
    """The default: no peer is a trusted proxy, so no user header is believed."""
    return False


@dataclass(frozen=True)
class Denied:
    """Why a request has no identity: an HTTP status and a sentence for the page."""

    status: int
    message: str


def _forwarded(headers: Mapping[str, str]) -> bool:
    return any(
        headers.get(name) or headers.get(name.title()) for name in ("x-forwarded-for", "forwarded")
    )


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for anything unparseable."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class IdentityPolicy:
    """``[web]`` (:class:`~adapters.web.config.WebConfig`) as the inbox applies it."""

    user_header: str | None = None
    admins: frozenset[str] = frozenset()
    local_allowed: bool = True
    """Without a header: the server listens on loopback only, so its user is the local admin."""
    trusts: Trusts = trusts_nobody
    """Which direct peers may set ``user_header``: ``[server] trusted_proxies``."""
    groups_header: str | None = None

    @classmethod
    def from_config(
        cls,
        *,
        listen_host: str,
        user_header: str | None,
        admins: Iterable[str] = (),
        trusts: Trusts = trusts_nobody,
        groups_header: str | None = None,
    ) -> IdentityPolicy:
        header = user_header.strip() if user_header else None
        return cls(
            user_header=header or None,
            admins=frozenset(admins),
            local_allowed=is_loopback(listen_host),
            trusts=trusts,
            groups_header=groups_header.strip() if groups_header else None,
        )

    @property
    def local(self) -> bool:
        """The embedded default: everyone who may reach the page is the local admin."""
        return self.user_header is None and self.local_allowed

    def admin_keys(self) -> frozenset[str]:
        """Identity keys to add to ``People.admins`` (read by the answer rules and admin view)."""
        if self.user_header is None:
            return frozenset({f"web:{LOCAL_USER}"}) if self.local_allowed else frozenset()
        return frozenset(f"web:{name}" for name in self.admins)

    def groups(self, headers: Mapping[str, str], client_host: str | None) -> frozenset[str]:
        """``web-group:<name>`` keys from ``groups_header`` (comma-separated), believed only from
        a trusted proxy that also names the user; empty, unprintable or over-long names dropped."""
        if self.groups_header is None or self.user_header is None or not self.trusts(client_host):
            return frozenset()
        raw = headers.get(self.groups_header.lower(), headers.get(self.groups_header, ""))
        names = (name.strip() for name in raw.split(","))
        return frozenset(
            f"web-group:{name}"
            for name in names
            if name and len(name) <= MAX_GROUP_LENGTH and name.isprintable() and " " not in name
        )

    def identify(self, headers: Mapping[str, str], client_host: str | None) -> Identity | Denied:
        """The person behind a request, or why there is none. ``client_host`` is the direct peer:
        the server must not have replaced it with an ``X-Forwarded-For`` address."""
        if self.user_header is None:
            if not self.local_allowed:
                return Denied(
                    HTTP_FORBIDDEN,
                    "The web inbox needs a sign-in proxy when elicitbot listens beyond this "
                    "machine: set [web] user_header in the config.",
                )
            if not is_loopback(client_host):
                return Denied(HTTP_FORBIDDEN, "The web inbox answers this machine only.")
            if self.trusts(client_host) and _forwarded(headers):
                # A trusted proxy on this machine forwarding someone else: not the person at the
                # machine. (From any other peer the forwarding headers are not believed.)
                return Denied(
                    HTTP_FORBIDDEN,
                    "The web inbox answers this machine only; behind a proxy, set [web] "
                    "user_header in the config.",
                )
            return Identity(platform="web", user=LOCAL_USER, display_name=LOCAL_NAME)
        raw = headers.get(self.user_header.lower(), headers.get(self.user_header, ""))
        if not self.trusts(client_host):
            if raw:  # a forged name, or a proxy missing from trusted_proxies: say which peer
                log.warning(
                    "web.user_header_untrusted",
                    peer=client_host,
                    header=self.user_header,
                    hint="the header is believed only from [server] trusted_proxies",
                )
            return Denied(
                HTTP_UNAUTHORIZED,
                "Sign in through the sign-in proxy: this server believes who you are only "
                "from its trusted proxies.",
            )
        user = raw.strip()
        if not user:
            return Denied(
                HTTP_UNAUTHORIZED,
                f"Sign in first: the request has no {self.user_header} header from the proxy.",
            )
        if len(user) > MAX_USER_LENGTH or not user.isprintable():
            return Denied(HTTP_UNAUTHORIZED, f"The {self.user_header} header does not name a user.")
        return Identity(platform="web", user=user, display_name=user)

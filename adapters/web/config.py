"""``[web]``: who the inbox believes a user is, and who its admins are."""

from __future__ import annotations

from pydantic import Field

from adapters.shared.config import Section


class WebConfig(Section):
    user_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]+$")
    """The sign-in proxy's header naming the user; unset = loopback only, the local admin."""
    admins: tuple[str, ...] = ()
    """Users, as the proxy names them, who are workspace admins (``web:<user>``)."""
    groups_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]+$")
    """The sign-in proxy's header naming the user's groups (comma-separated), for
    ``web-group:<name>`` approvers; believed only from ``server.trusted_proxies``, with
    ``user_header``."""

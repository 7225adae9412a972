"""slack_sdk failures as delivery errors: 429, network, 5xx and "try again" codes are transient,
codes no retry fixes are permanent, anything else transient (the outbox gives up at its limit).
Messages name the method and Slack's code, never the request (it carries the token header).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from bot.domain.errors import DeliveryError, PermanentDeliveryError, TransientDeliveryError

HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVER_ERROR = 500

RATE_LIMITED = frozenset({"ratelimited", "rate_limited"})

APP_WIDE = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
    }
)
"""Errors every lookup of a kind would get alike (a people or group lookup): stop asking for a
while rather than on every click."""

PERMANENT = APP_WIDE | frozenset(
    {
        # where
        "channel_not_found",
        "is_archived",
        "not_in_channel",
        "user_not_found",
        "user_not_in_channel",
        "cannot_dm_bot",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "ekm_access_denied",
        "team_access_not_granted",
        # who (and APP_WIDE)
        "no_permission",
        # what
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_too_long",
        "msg_blocks_too_long",
        "no_text",
        "invalid_arguments",
        "invalid_arg_name",
        "invalid_metadata_format",
        "invalid_metadata_schema",
        "metadata_too_large",
        "too_many_attachments",
        # the message
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
    }
)


def retry_after(headers: Mapping[str, Any] | None) -> float | None:
    """Seconds from a ``Retry-After`` header (case-insensitive), or None."""
    if not headers:
        return None
    for name, value in headers.items():
        if str(name).lower() == "retry-after":
            try:
                seconds = float(value)
            except (TypeError, ValueError):
                return None
            return max(seconds, 0.0)
    return None


def api_error(exc: SlackApiError) -> tuple[int | None, str | None, Mapping[str, Any] | None]:
    """(HTTP status, Slack error code, headers) of a failed API call."""
    response = exc.response
    status = getattr(response, "status_code", None)
    data = getattr(response, "data", None)
    code = data.get("error") if isinstance(data, dict) else None
    headers = getattr(response, "headers", None)
    return (
        status if isinstance(status, int) else None,
        str(code) if code else None,
        headers if isinstance(headers, Mapping) else None,
    )


def from_slack(method: str, exc: BaseException) -> DeliveryError:
    """The delivery error for a failure of Slack Web API ``method``."""
    if isinstance(exc, SlackApiError):
        status, code, headers = api_error(exc)
        what = f"slack {method}: {code or 'error'}" + (f" (HTTP {status})" if status else "")
        if status == HTTP_TOO_MANY_REQUESTS or code in RATE_LIMITED:
            return TransientDeliveryError(what, retry_after=retry_after(headers))
        if status is not None and status >= HTTP_SERVER_ERROR:
            return TransientDeliveryError(what)
        if code in PERMANENT:
            return PermanentDeliveryError(what)
        return TransientDeliveryError(what)
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return TransientDeliveryError(f"slack {method}: {type(exc).__name__}: {exc}")
    if isinstance(exc, SlackClientError):
        return PermanentDeliveryError(f"slack {method}: {type(exc).__name__}: {exc}")
    return TransientDeliveryError(f"slack {method}: {type(exc).__name__}: {exc}")

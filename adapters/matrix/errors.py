"""matrix-nio results and failures as elicitbot's delivery errors (the outbox retries transient
ones): a 429 with its delay (the ``Retry-After`` header, the spec's preferred form since v1.10
which nio ignores, else ``retry_after_ms``), connection errors and 5xx transient, errcodes no
retry can fix permanent, anything else transient. Messages never name the request (its token).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nio import ErrorResponse, LocalProtocolError

from bot.domain.errors import DeliveryError, PermanentDeliveryError, TransientDeliveryError

HTTP_TOO_MANY_REQUESTS = 429
HTTP_SERVER_ERROR = 500
HTTP_CLIENT_ERROR = 400

RATE_LIMITED = "M_LIMIT_EXCEEDED"
DUPLICATE_ANNOTATION = "M_DUPLICATE_ANNOTATION"

PERMANENT = frozenset(
    {
        "M_FORBIDDEN",
        "M_UNKNOWN_TOKEN",
        "M_MISSING_TOKEN",
        "M_USER_DEACTIVATED",
        "M_USER_LOCKED",
        "M_USER_SUSPENDED",
        "M_NOT_FOUND",
        "M_UNRECOGNIZED",
        "M_BAD_JSON",
        "M_NOT_JSON",
        "M_TOO_LARGE",
        "M_INVALID_PARAM",
        "M_MISSING_PARAM",
        "M_INVALID_ROOM_STATE",
        "M_GUEST_ACCESS_FORBIDDEN",
        "M_EXCLUSIVE",
        "M_UNSUPPORTED_ROOM_VERSION",
        "M_INCOMPATIBLE_ROOM_VERSION",
        "M_CANNOT_LEAVE_SERVER_NOTICE_ROOM",
    }
)


def http_status(response: Any) -> int | None:
    transport = getattr(response, "transport_response", None)
    status = getattr(transport, "status", None)
    return status if isinstance(status, int) else None


def retry_after(response: Any) -> float | None:
    """Seconds to wait after a 429: ``Retry-After`` first, then ``retry_after_ms``, else None."""
    transport = getattr(response, "transport_response", None)
    headers = getattr(transport, "headers", None)
    value = headers.get("Retry-After") if isinstance(headers, Mapping) else None
    if value is not None:
        try:
            return max(float(value), 0.0)
        except (TypeError, ValueError):
            pass  # an HTTP date: rare from a homeserver; the body's value is used instead
    ms = getattr(response, "retry_after_ms", None)
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms >= 0:
        return float(ms) / 1000
    return None


def errcode(response: Any) -> str | None:
    code = getattr(response, "status_code", None)
    return code if isinstance(code, str) and code else None


def from_response(what: str, response: ErrorResponse) -> DeliveryError:
    """The delivery error for an error value nio returned from call ``what``."""
    status = http_status(response)
    code = errcode(response)
    message = getattr(response, "message", None) or ""
    text = f"matrix {what}: {code or 'error'}" + (f" (HTTP {status})" if status else "")
    if message:
        text += f": {str(message)[:200]}"
    if status == HTTP_TOO_MANY_REQUESTS or code == RATE_LIMITED:
        return TransientDeliveryError(text, retry_after=retry_after(response))
    if status is not None and status >= HTTP_SERVER_ERROR:
        return TransientDeliveryError(text)
    if code in PERMANENT:
        return PermanentDeliveryError(text)
    if code is None and status is not None and HTTP_CLIENT_ERROR <= status < HTTP_SERVER_ERROR:
        return PermanentDeliveryError(text)
    return TransientDeliveryError(text)


def from_exception(what: str, exc: BaseException) -> DeliveryError:
    """The delivery error for an exception raised by nio during call ``what``."""
    if isinstance(exc, DeliveryError):
        return exc
    if isinstance(exc, LocalProtocolError):
        return PermanentDeliveryError(f"matrix {what}: {exc}")
    return TransientDeliveryError(f"matrix {what}: {type(exc).__name__}: {exc}")

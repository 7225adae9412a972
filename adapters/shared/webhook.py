"""The one webhook client every answer sink posts through: JSON with an ``Idempotency-Key``.

2xx (and 409 with ``conflict_is_done``: the receiver has it) is done; 429, 5xx and connection
errors are transient (``Retry-After`` honoured), retried with the same key, which the receiver
dedupes by; any other status is permanent, or comes back with ``read_refusals`` for the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError

TIMEOUT_SECONDS = 10.0
HTTP_REDIRECT = 300
HTTP_CONFLICT = 409
HTTP_TOO_MANY = 429
HTTP_SERVER_ERROR = 500
BODY_EXCERPT = 200


@dataclass(frozen=True)
class Receiver:
    """Error wordings: ``unreachable`` takes ``{error}`` (the exception's class), ``answered``
    ``{status}``."""

    unreachable: str
    answered: str

    @classmethod
    def named(cls, name: str) -> Receiver:
        return cls(f"{name} unreachable: {{error}}", f"{name} answered HTTP {{status}}")


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    document: Any,
    *,
    idempotency_key: str,
    receiver: Receiver,
    headers: Mapping[str, str] | None = None,
    conflict_is_done: bool = False,
    read_refusals: bool = False,
    confidential: bool = False,
) -> httpx.Response:
    """``confidential``: the document holds a secret, so no error carries the request (a
    connection error is raised without its cause) and no refusal quotes the reply."""
    sent = {**(headers or {}), "Idempotency-Key": idempotency_key}
    try:
        response = await client.post(url, json=document, headers=sent, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        error = TransientDeliveryError(receiver.unreachable.format(error=type(exc).__name__))
        if confidential:
            raise error from None
        raise error from exc
    status = response.status_code
    if status < HTTP_REDIRECT or (conflict_is_done and status == HTTP_CONFLICT):
        return response
    answered = receiver.answered.format(status=status)
    if status >= HTTP_SERVER_ERROR or status == HTTP_TOO_MANY:
        raise TransientDeliveryError(answered, retry_after=retry_after(response))
    if read_refusals:
        return response
    if confidential:
        raise PermanentDeliveryError(answered)
    raise PermanentDeliveryError(f"{answered}: {response.text[:BODY_EXCERPT]}")


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

"""The one webhook client: a JSON document POSTed with an ``Idempotency-Key``, the reply mapped.

Every answer sink that calls a receiver over HTTP posts through :func:`post_json`:

- 2xx: done (the response comes back, for a caller that reads its body);
- 409 when the caller says so (``conflict_is_done``): the receiver already has it, done;
- 429, 5xx and connection errors: ``TransientDeliveryError``, retried by the outbox with the same
  idempotency key (``Retry-After`` in seconds honoured);
- any other status: ``PermanentDeliveryError`` naming the status and the start of the body, or,
  with ``read_refusals``, the response itself for a caller that maps the receiver's error codes.

The receiver dedupes by the ``Idempotency-Key``, so a retry after a lost reply changes nothing.
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
    """How errors name the receiver: ``unreachable`` takes ``{error}`` (the exception's class),
    ``answered`` takes ``{status}``."""

    unreachable: str
    answered: str

    @classmethod
    def named(cls, name: str) -> Receiver:
        """``<name> unreachable: <error>`` and ``<name> answered HTTP <status>``."""
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
    timeout_seconds: float = TIMEOUT_SECONDS,
) -> httpx.Response:
    """POST ``document`` as JSON to ``url`` and map the reply (see the module docstring).

    ``confidential``: the document holds a secret, so no error carries the request (a connection
    error is raised without its cause) and no refusal quotes the reply.
    """
    sent = {**(headers or {}), "Idempotency-Key": idempotency_key}
    try:
        response = await client.post(url, json=document, headers=sent, timeout=timeout_seconds)
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
    """The reply's ``Retry-After`` in seconds, if it gave one."""
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

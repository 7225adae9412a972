"""The handup write-back: the terminal Request POSTed to its ``callback_url``.

The body is the whole Request (:func:`~adapters.sources.handup.parse.request_document`): its
terminal ``status`` and the ``decision`` with the option, outcome, the ``content_hash`` it was
decided on, feedback, ``fields.answers``, ``decided_by`` and ``decided_at``. The header
``Idempotency-Key`` is stable per answer. 2xx and 409 (the receiver has it) are done; 5xx, 429 and
connection errors are retried; another 4xx, or a URL no longer on the allowlist, fails for good.
A Request without ``callback_url`` is only read back (``GET /v1/handup/requests/{id}``).
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from adapters.sources.handup.parse import callback_allowed, request_document
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Status
from bot.domain.ports import PromptView

TIMEOUT_SECONDS = 10.0
HTTP_CONFLICT = 409
HTTP_TOO_MANY = 429
HTTP_SERVER_ERROR = 500
HTTP_REDIRECT = 300


class HandupSink:
    def __init__(self, client: httpx.AsyncClient, allowlist: Sequence[str]) -> None:
        self.client = client
        self.allowlist = tuple(str(entry) for entry in allowlist)

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        if view.status is Status.PENDING:
            return  # only a terminal Request is called back
        document = request_document(view)
        url = document.get("callback_url")
        if not url:
            return
        if not callback_allowed(url, self.allowlist):
            raise PermanentDeliveryError(
                "the callback_url is no longer on sources.handup.callback_allowlist; not sent"
            )
        try:
            response = await self.client.post(
                url,
                json=document,
                headers={"Idempotency-Key": idempotency_key},
                timeout=TIMEOUT_SECONDS,
            )
        except httpx.HTTPError as exc:
            raise TransientDeliveryError(
                f"handup callback unreachable: {type(exc).__name__}"
            ) from exc
        status = response.status_code
        if status < HTTP_REDIRECT or status == HTTP_CONFLICT:
            return
        if status >= HTTP_SERVER_ERROR or status == HTTP_TOO_MANY:
            raise TransientDeliveryError(
                f"handup callback answered HTTP {status}", retry_after=_retry_after(response)
            )
        raise PermanentDeliveryError(
            f"handup callback answered HTTP {status}: {response.text[:200]}"
        )


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

"""The ``elicitation.answered`` write-back: a JSON document POSTed to the configured webhook.

5xx and connection errors are retried (transient); 409 means SuperPipeline already has it (done);
any other 4xx is recorded as failed. The ``Idempotency-Key`` header is stable per answer.
"""

from __future__ import annotations

from typing import Any

import httpx

from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Answer
from bot.domain.ports import PromptView

DOCUMENT_TYPE = "elicitation.answered"
DOCUMENT_VERSION = 1
HTTP_CONFLICT = 409
HTTP_SERVER_ERROR = 500
HTTP_TOO_MANY = 429


def answered_document(view: PromptView, idempotency_key: str) -> dict[str, Any]:
    """The document README.md describes. A secret answer's text is never in it."""
    e = view.elicitation
    answer: Answer | None = view.answer
    extra = e.extra
    options = []
    if answer is not None:
        for option_id in answer.option_ids:
            option = e.option(option_id)
            options.append(
                {
                    "id": option_id,
                    "label": option.label if option else None,
                    "meaning": option.meaning.value if option else None,
                    "scope": option.scope.value if option and option.scope else None,
                }
            )
    return {
        "event": DOCUMENT_TYPE,
        "version": DOCUMENT_VERSION,
        "idempotencyKey": idempotency_key,
        "elicitationId": e.source_id,
        "approvalRequestId": e.approval_request_id,
        "workspace": e.workspace,
        "boardId": e.context.board_id,
        "cardId": extra.get("cardId", e.context.card_id or ""),
        "runId": extra.get("runId", e.context.run_id or ""),
        "stageKey": extra.get("stageKey", e.context.stage_key or ""),
        "status": view.status.value,
        "answer": None
        if answer is None
        else {
            "optionIds": list(answer.option_ids),
            "options": options,
            "text": answer.text,
            "secret": answer.secret,
        },
        "answeredBy": None
        if answer is None
        else {
            "id": answer.respondent,
            "principal": answer.principal,
            "displayName": answer.display_name,
        },
        "answeredVia": answer.via if answer else None,
        "answeredAt": answer.at.isoformat().replace("+00:00", "Z") if answer else None,
        "approvalSubject": None
        if e.subject is None
        else {
            "id": e.subject.id,
            "digest": answer.subject_digest
            if answer and answer.subject_digest
            else e.subject.digest,
            "revision": answer.subject_revision
            if answer and answer.subject_revision is not None
            else e.subject.revision,
        },
    }


class SuperPipelineSink:
    def __init__(self, webhook: str | None, client: httpx.AsyncClient) -> None:
        self.webhook = webhook
        self.client = client

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        if self.webhook is None:
            return  # readable at GET /v1/elicitations/{id} for the carrier's sweep
        body = answered_document(view, idempotency_key)
        try:
            response = await self.client.post(
                self.webhook, json=body, headers={"Idempotency-Key": idempotency_key}, timeout=10.0
            )
        except httpx.HTTPError as exc:
            raise TransientDeliveryError(
                f"answer webhook unreachable: {type(exc).__name__}"
            ) from exc
        status = response.status_code
        if status < 300 or status == HTTP_CONFLICT:  # noqa: PLR2004
            return
        if status >= HTTP_SERVER_ERROR or status == HTTP_TOO_MANY:
            raise TransientDeliveryError(
                f"answer webhook answered {status}", retry_after=_retry_after(response)
            )
        raise PermanentDeliveryError(f"answer webhook answered {status}: {response.text[:200]}")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None

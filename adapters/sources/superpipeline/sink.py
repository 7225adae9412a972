"""The ``elicitation.answered`` write-back, POSTed to the configured webhook: 409 means
SuperPipeline has it (done); the ``Idempotency-Key`` header is stable per answer.
"""

from __future__ import annotations

from typing import Any

import httpx

from adapters.shared.webhook import Receiver, post_json
from adapters.sources.common import utc_text
from bot.domain.model import Answer
from bot.domain.ports import PromptView

DOCUMENT_TYPE = "elicitation.answered"
DOCUMENT_VERSION = 1
RECEIVER = Receiver("answer webhook unreachable: {error}", "answer webhook answered {status}")


def answered_document(view: PromptView, idempotency_key: str) -> dict[str, Any]:
    """The document README.md describes. A secret answer's text is never in it."""
    e = view.elicitation
    answer: Answer | None = view.answer
    extra = e.extra
    options = [
        {
            "id": option_id,
            "label": option.label if option else None,
            "meaning": option.meaning.value if option else None,
            "scope": option.scope.value if option and option.scope else None,
        }
        for option_id in (answer.option_ids if answer else ())
        for option in [e.option(option_id)]
    ]
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
        "answeredAt": utc_text(answer.at) if answer else None,
        "approvals": [
            {"by": a.by, "at": utc_text(a.at), "via": a.via, "option": a.option}
            for a in (answer.approvals if answer else ())
        ],
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
        await post_json(
            self.client,
            self.webhook,
            answered_document(view, idempotency_key),
            idempotency_key=idempotency_key,
            receiver=RECEIVER,
            conflict_is_done=True,
        )

"""The engine answer webhook (``sources.engine.answer_webhook``): the closed ask POSTed once.

Spec 001 defines no webhook document, so the body is the read-back
(:func:`~adapters.sources.engine.document.ask_document`, what ``GET /v1/deliveries/{id}``
returns): the ask, its ``status``, ``expires_at`` as the spec writes it and the ``decision``.
The same rules as the other write-backs (:mod:`adapters.shared.webhook`): the header
``Idempotency-Key`` is stable per answer; 2xx and 409 (the receiver has it) are done; 5xx, 429
and connection errors are retried; any other 4xx fails for good. Without a webhook nothing is
posted: the outcome is only read back.
"""

from __future__ import annotations

import httpx

from adapters.shared.webhook import Receiver, post_json
from adapters.sources.engine.document import ask_document
from bot.domain.model import Status
from bot.domain.ports import PromptView

RECEIVER = Receiver.named("engine answer webhook")


class EngineSink:
    def __init__(self, webhook: str | None, client: httpx.AsyncClient) -> None:
        self.webhook = webhook
        self.client = client

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        if self.webhook is None or view.status is Status.PENDING:
            return  # read back at GET /v1/deliveries/{id}
        await post_json(
            self.client,
            self.webhook,
            ask_document(view),
            idempotency_key=idempotency_key,
            receiver=RECEIVER,
            conflict_is_done=True,
        )

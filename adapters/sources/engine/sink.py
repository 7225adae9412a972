"""The engine answer webhook: the closed ask's read-back POSTed once (without one: read back)."""

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

"""The handup write-back: the terminal Request POSTed to ``callback_url``. A URL no longer
allowlisted fails for good; a document the spec's schema refuses is never sent (it reopens).
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from adapters.shared.webhook import Receiver, post_json
from adapters.sources.handup.document import request_document
from adapters.sources.handup.validation import callback_allowed, schema_problems
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Status
from bot.domain.ports import PromptView

RECEIVER = Receiver.named("handup callback")


class HandupSink:
    def __init__(self, client: httpx.AsyncClient, allowlist: Sequence[str]) -> None:
        self.client = client
        self.allowlist = tuple(str(entry) for entry in allowlist)

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        if view.status is Status.PENDING:
            return  # only a terminal Request is called back
        document = request_document(view)
        if not (url := document.get("callback_url")):
            return
        if not callback_allowed(url, self.allowlist):
            raise PermanentDeliveryError(
                "the callback_url is no longer on sources.handup.callback_allowlist; not sent"
            )
        if problems := schema_problems(document):
            named = "; ".join(str(p) for p in problems[:5])
            raise PermanentDeliveryError(
                f"the decision does not fit handup's Request schema, so it was not sent ({named})"
            )
        await post_json(
            self.client,
            url,
            document,
            idempotency_key=idempotency_key,
            receiver=RECEIVER,
            conflict_is_done=True,
        )

"""The handup write-back: the terminal Request POSTed to its ``callback_url``.

The body is the whole Request (:func:`~adapters.sources.handup.document.request_document`): its
terminal ``status`` and the ``decision`` with the option, outcome, the ``content_hash`` it was
decided on, feedback, ``fields.answers``, ``decided_by`` and ``decided_at``. The header
``Idempotency-Key`` is stable per answer. 2xx and 409 (the receiver has it) are done; 5xx, 429 and
connection errors are retried; another 4xx, or a URL no longer on the allowlist, fails for good
(the webhook client, :mod:`adapters.shared.webhook`, maps the reply). The document is checked
against the spec's JSON Schema before it is sent: one the schema refuses is never sent, and the
answer is refused (the question reopens) with the fields named.
A Request without ``callback_url`` is only read back (``GET /v1/handup/requests/{id}``).
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
        url = document.get("callback_url")
        if not url:
            return
        if not callback_allowed(url, self.allowlist):
            raise PermanentDeliveryError(
                "the callback_url is no longer on sources.handup.callback_allowlist; not sent"
            )
        problems = schema_problems(document)
        if problems:
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

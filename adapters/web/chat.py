"""The ``web`` destination: the inbox page reads the store, so a post is accepted at once."""

from __future__ import annotations

from datetime import datetime

from bot.domain.model import Destination
from bot.domain.ports import MessageRef, Notice, PromptView
from bot.domain.refs import InboxRef


class WebChat:
    platform = "web"
    post_interval = 0.0
    seeds = False

    async def post(
        self,
        destination: Destination,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MessageRef:
        return InboxRef(view.elicitation.key)

    async def update(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        """Nothing to rewrite: the page renders the stored state."""

    async def seed(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        """Nothing to seed: the page has its buttons."""

    async def notify(
        self,
        destination: Destination,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        """Refusals are shown in the page's own response."""

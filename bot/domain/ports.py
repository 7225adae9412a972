"""The small interfaces the core talks through. Adapters conform structurally (Protocols)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.domain.model import Answer, Elicitation, Status

MessageRef = dict[str, Any]
"""A platform's message id: Slack ``{"channel", "ts"}``, Matrix ``{"room_id", "event_id"}``."""


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC."""
        ...


@dataclass(frozen=True)
class PromptView:
    """Everything a surface needs to render one elicitation as it stands now."""

    elicitation: Elicitation
    status: Status
    answer: Answer | None
    version: int
    link: str
    """The web inbox page with the full text."""
    now: datetime


@dataclass(frozen=True)
class Notice:
    """A private message to one person (a refusal, how to answer)."""

    user: str
    """The person's identity key (``slack:U…``, ``matrix:@…``)."""
    text: str
    thread: MessageRef | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class ChatAdapter(Protocol):
    """Outbound chat for one platform. Raise Transient/PermanentDeliveryError on failure."""

    platform: str

    async def post(
        self, destination: str, view: PromptView, *, idempotency_key: str, uncertain: bool
    ) -> MessageRef:
        """Post and return the message ref. ``uncertain``: an earlier attempt may have posted it
        already (crash or dropped connection): find that message before posting again."""
        ...

    async def update(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None: ...

    async def notify(self, destination: str, notice: Notice, *, idempotency_key: str) -> None: ...


class AnswerSink(Protocol):
    """Writes a closed elicitation's outcome back to the system that asked; idempotent by key."""

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None: ...

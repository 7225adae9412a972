"""The small interfaces the core talks through. Adapters conform structurally (Protocols)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bot.domain.actions import Action, Outcome
from bot.domain.deadlines import Claim, Escalation, ScheduleStep
from bot.domain.model import (
    Answer,
    Attempt,
    Destination,
    Elicitation,
    ElicitationKey,
    Identity,
    IdentityKey,
    People,
    Refusal,
    Route,
    Status,
)
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy
from bot.domain.quorum import Vote
from bot.domain.records import DeliveryView, IntakeResult, NoticeKind, Subscribed, Writeback
from bot.domain.refs import MessageRef
from bot.domain.wording import Result, result_of, waiting_line

__all__ = ["MessageRef"]


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC."""
        ...


@dataclass(frozen=True)
class CopyPolicy:
    """What a copy needs of its policy route (rule 9): the route's policy, and the principals
    of its person approvers (so the same person on another surface counts as having voted)."""

    policy: RoutePolicy = DEFAULT_POLICY
    principals: Mapping[str, str] = field(default_factory=dict)


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
    schedule: tuple[ScheduleStep, ...] = ()
    """What happens if nobody answers (``deadlines.schedule_line`` writes it as one line)."""
    claim: Claim | None = None
    """Who said "I'm on it", while the claim holds (``deadlines.claim_line``)."""
    escalation: Escalation | None = None
    """Set on an escalation copy: whom to mention and where the original is."""
    writeback: Writeback | None = None
    """Where the outcome stands upstream: copies say "Sending…" until it is accepted, and say
    what was refused (:func:`bot.domain.views.writeback_note`)."""
    votes: tuple[Vote, ...] = ()
    """Approving votes stored toward the route's quorum (rule 9)."""
    approve_on: tuple[str, ...] | None = None
    """The route policy's ``approve_on`` (rule 9), from the route the service judges by: on a
    surface it does not name, approving options are withheld and the copy links to
    :attr:`link` (:func:`bot.domain.rules.offered_options`). None: every surface."""
    approvers: tuple[str, ...] | None = None
    """The policy route's ``approvers`` as written (rule 9), from the same route as
    :attr:`approve_on`: the tally line names who may still approve. None: anyone may."""
    principals: Mapping[str, str] = field(default_factory=dict)
    """The principals of :attr:`approvers`' person entries (``[people.principals]``): a person
    who voted on another surface is not named as still to approve."""

    @property
    def waiting(self) -> str | None:
        """While a quorum is counted: ``Approved by Alice (1 of 2) — waiting for one more
        approver: Bob`` (:func:`bot.domain.wording.waiting_line`); None otherwise."""
        if self.status is not Status.PENDING:
            return None
        return waiting_line(self.elicitation, self.votes, self.approvers, self.principals)

    @property
    def result(self) -> Result | None:
        """What became of it, as every surface says it (:mod:`bot.domain.wording`); None while
        it waits for an answer."""
        return result_of(self.elicitation, self.status, self.answer, self.writeback)


@dataclass(frozen=True)
class Notice:
    """A private message to one person (a refusal, how to answer)."""

    user: IdentityKey
    """The person's identity key (``slack:U…``, ``matrix:@…``); empty for a reminder."""
    text: str
    thread: MessageRef | None = None
    """The posted copy whose thread it goes in."""
    kind: NoticeKind = NoticeKind.REFUSAL
    mentions: tuple[IdentityKey, ...] = ()
    """Identity keys to mention (a reminder's people); other platforms' are left out."""
    mention: bool = True
    """Mention ``user`` (a refusal does; a confirmation does not)."""
    reply_to: str | None = None
    """The platform event it answers (Matrix), when there is one."""


@dataclass(frozen=True)
class Inbound:
    """An elicitation as it arrived: the inbound id dedupes redelivery of the same message."""

    channel: str
    """Dedupe namespace of the inbound id, e.g. ``ce:<cloudevents source>``."""
    inbound_id: str
    elicitation: Elicitation
    audit: dict[str, Any]
    route: Route | None = None
    """Where it goes when the request itself says (engine deliveries); None: the config's routes."""


@dataclass(frozen=True)
class IntakeOutcome:
    key: ElicitationKey
    result: IntakeResult


@dataclass(frozen=True)
class AnswerOutcome:
    key: ElicitationKey
    result: Answer | Refusal
    won: bool


@dataclass(frozen=True)
class ClaimOutcome:
    """An "I'm on it": the claim now held, or why not (told privately, like a refusal)."""

    key: ElicitationKey
    claim: Claim | None
    refusal: Refusal | None = None


class Elicitations(Protocol):
    """What an edge (a chat surface, a source's routes) may ask of the core.

    Implemented by ``bot.service.Service``; adapters receive it, never the service module.
    """

    people: People

    async def intake(self, batch: Sequence[Inbound]) -> list[IntakeOutcome]:
        """Store a batch (all or nothing) with its deliveries, deadlines and outbox rows."""
        ...

    async def act(self, action: Action) -> Outcome:
        """What a person did on a surface (a choice, a reply, a form, a claim, a chat command):
        the one entry for people. The core finds the elicitation, applies every rule and returns
        what to show; a secret goes upstream first (DeliveryError when it could not)."""
        ...

    async def answer(self, key: ElicitationKey, attempt: Attempt) -> AnswerOutcome:
        """Apply the answer rules; the first valid answer wins. Refusals come back as values."""
        ...

    async def claim(self, key: ElicitationKey, who: Identity) -> ClaimOutcome:
        """Someone is on it: escalation and follow-ups (not reminders or expiry) wait until the
        claim lapses, and every copy shows who claimed it. Claiming again renews; another person
        takes it over. The asker, agents and bots are refused. KeyError: unknown key."""
        ...

    async def view(self, key: ElicitationKey) -> PromptView | None:
        """The elicitation as it stands now (None: unknown key)."""
        ...

    async def copy_policy(self, e: Elicitation) -> CopyPolicy:
        """``e``'s policy route as its copies need it: where approving counts (``approve_on``;
        None: everywhere) and who may approve (``approvers``; None: anyone)."""
        ...

    async def key_for_message(self, ref_key: str) -> ElicitationKey | None:
        """The elicitation a posted message belongs to (its delivery's ``ref["key"]``)."""
        ...

    async def first_time(self, channel: str, inbound_id: str) -> bool:
        """Record an inbound chat event id; False when it was seen before (a redelivery)."""
        ...

    async def deliveries(self, key: ElicitationKey) -> list[DeliveryView]:
        """Each copy: destination, position, purpose, state, ref, posted_at, error."""
        ...

    async def close(
        self, key: ElicitationKey, status: Status, *, answer: Answer | None, reason: str
    ) -> bool:
        """Close a pending elicitation from its source's side (expired, cancelled, or answered
        elsewhere); every copy is updated. False when it was not pending."""
        ...

    async def subscribe(
        self,
        workspace: str,
        board: str | None,
        destination: str,
        by: str,
        *,
        policy: RoutePolicy | None = None,
    ) -> Subscribed:
        """An admin routes a workspace (and board) to a destination, with who may decide its
        questions (``policy``: replaces the route's whole; None: an existing route keeps its)."""
        ...

    async def unsubscribe(self, workspace: str, board: str | None, destination: str) -> int:
        """Remove chat-made routes; returns how many."""
        ...

    async def routes_text(self) -> list[str]:
        """Every route, config and chat-made, one line each, for ``routes`` commands."""
        ...

    async def routes(self) -> tuple[Route, ...]:
        """Today's routes, config first (first match wins), then chat-made: a surface reads what
        a route's policy names (the Slack user groups among its approvers) from them."""
        ...


class ChatAdapter(Protocol):
    """Outbound chat for one platform. Raise Transient/PermanentDeliveryError on failure."""

    platform: str
    post_interval: float
    """Seconds between two posts to one destination that the platform allows (Slack: about one
    a second per channel; 0 when it sets no such pace). The adapter keeps to it (Slack's Pacer,
    shared by every replica); the outbox claims a lane's next post as soon as the one before it
    is done, so it waits for its slot in the adapter, and until that slot the lane's updates and
    notices go first (messages first counts only posts it could make now)."""
    seeds: bool
    """Whether a posted copy is answered by reactions the bot seeds on it (Matrix): the outbox
    then queues a ``seed`` effect when the post completes, behind the lane's other posts."""

    async def post(
        self,
        destination: Destination,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MessageRef:
        """Post and return the message ref. ``uncertain``: when the first attempt began, if an
        earlier attempt may have posted it already (a crash, a dropped connection): find that
        message, posted since then, before posting again."""
        ...

    async def update(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None: ...

    async def seed(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        """Seed the reactions that answer the posted copy ``ref`` (safe to repeat; nothing on a
        platform that does not seed)."""
        ...

    async def notify(
        self,
        destination: Destination,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        """Send a notice; ``uncertain`` as for :meth:`post`."""
        ...


class SecretSink(Protocol):
    """Takes a secret answer straight upstream (e.g. Pinework's secret route). The secret is
    never stored, logged or echoed: only the fact that it was given is recorded."""

    async def deliver_secret(
        self, view: PromptView, secret: str, *, idempotency_key: str
    ) -> None: ...


class AnswerSink(Protocol):
    """Writes a closed elicitation's outcome back to the system that asked; idempotent by key."""

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None: ...

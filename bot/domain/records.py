"""The core's records: every state and kind as a ``StrEnum``, and what the store port
(:mod:`bot.domain.store`) hands back: nothing above the store sees a row or a ``dict`` of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from bot.domain.model import Answer, Elicitation, ElicitationKey, Route, Status
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy
from bot.domain.refs import MessageRef

if TYPE_CHECKING:
    from bot.domain.payloads import Payload
    from bot.domain.quorum import Vote


class DeliveryState(StrEnum):
    """``waiting`` for its turn (a follow-up), ``planned`` (post queued), ``posting`` (claimed),
    ``posted`` (accepted), ``failed`` (for good), ``skipped`` (closed before its turn)."""

    WAITING = "waiting"
    PLANNED = "planned"
    POSTING = "posting"
    POSTED = "posted"
    FAILED = "failed"
    SKIPPED = "skipped"


class Purpose(StrEnum):
    PRIMARY = "primary"
    ESCALATION = "escalation"


class EffectKind(StrEnum):
    POST = "post"
    UPDATE = "update"
    NOTIFY = "notify"
    WRITEBACK = "writeback"
    SEED = "seed"
    """Reactions to answer by (Matrix keycaps), queued when the post completes behind the lane's
    remaining posts, so a burst shows every question before any reactions."""


class EffectState(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"


class DeadlineKind(StrEnum):
    REMIND = "remind"
    ESCALATE = "escalate"
    FOLLOWUP = "followup"
    EXPIRE = "expire"
    SUBJECT_EXPIRED = "subject_expired"
    CLAIM_LAPSE = "claim_lapse"


class DeadlineState(StrEnum):
    PENDING = "pending"
    FIRED = "fired"
    CANCELLED = "cancelled"
    DEFERRED = "deferred"


class IntakeResult(StrEnum):
    ACCEPTED = "accepted"
    UPDATED = "updated"
    """The same elicitation, and what people see changed."""
    UNCHANGED = "unchanged"
    """The same elicitation, nothing to show."""
    DUPLICATE = "duplicate"
    """This inbound id was seen before."""


class FireOutcome(StrEnum):
    FIRED = "fired"
    DEFERRED = "deferred"
    """Held by a claim: a new row at the claim's lapse takes its place."""
    IDLE = "idle"
    """Nothing left to do: closed earlier in the batch, or moved by a revision."""
    WAITING = "waiting"
    """A copy it needs is still on its way (``planned`` / ``posting``): nothing was sent, and the
    row itself is pending again, due a few seconds later."""
    SKIPPED = "skipped"
    """No copy in a chat posted or on its way: audited, and the row is cancelled."""
    LOST = "lost"
    """Not ours to fire any more: another claimer took it after our lease ran out, or an answer,
    expiry, cancellation or revision removed it."""


class NoticeKind(StrEnum):
    REFUSAL = "refusal"
    REMINDER = "reminder"
    NOTE = "note"


@dataclass(frozen=True)
class IntakeItem:
    channel: str
    """Dedupe namespace of the inbound id, e.g. ``ce:<cloudevents source>``."""
    inbound_id: str
    elicitation: Elicitation
    route: Route
    display_hash: str
    audit: dict[str, Any] = field(default_factory=dict)


class WritebackState(StrEnum):
    """Where the answer (or the close) stands with the system that asked."""

    SENDING = "sending"
    """Recorded here, not yet accepted upstream: copies say "Sending…", never "Answered"."""
    ACCEPTED = "accepted"
    REFUSED = "refused"
    """Refused for good: reopened for another answer (``reopened``) or marked failed."""


@dataclass(frozen=True)
class Writeback:
    """The last write-back of an elicitation's outcome to its source: ``round`` counts the outcomes
    written back (a refused answer reopens the question; the next is round 2) and keys each."""

    state: WritebackState
    round: int = 1
    error: str | None = None
    """What the upstream said when it refused (a sentence for people; never a secret)."""
    reopened: bool = False
    refused: Answer | None = None
    """The refused answer, kept to say whose it was once the question is open again."""
    cancelled: tuple[int, ...] = ()
    """Deadline ids the close cancelled (while sending): a reopen revives them."""
    skipped: tuple[int, ...] = ()
    """Waiting copies the close skipped (while sending): a reopen puts them back to waiting."""
    gave_up: bool = False
    """Not refused but never confirmed: every attempt failed for a transient reason."""

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "round": self.round,
            "error": self.error,
            "reopened": self.reopened,
            "refused": None if self.refused is None else self.refused.model_dump(mode="json"),
            "cancelled": list(self.cancelled),
            "skipped": list(self.skipped),
            "gave_up": self.gave_up,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Writeback | None:
        if not data or data.get("state") not in set(WritebackState):
            return None
        refused = data.get("refused")
        return cls(
            state=WritebackState(data["state"]),
            round=int(data.get("round") or 1),
            error=data.get("error") if isinstance(data.get("error"), str) else None,
            reopened=bool(data.get("reopened")),
            refused=Answer.model_validate(refused) if isinstance(refused, Mapping) else None,
            cancelled=tuple(int(i) for i in data.get("cancelled") or ()),
            skipped=tuple(int(i) for i in data.get("skipped") or ()),
            gave_up=bool(data.get("gave_up")),
        )


WEB = "web"
"""The web inbox's destination: it has no thread to remind in."""
_ON_ITS_WAY = frozenset({DeliveryState.PLANNED, DeliveryState.POSTING})


@dataclass(frozen=True)
class Claim:
    """Someone said "I'm on it": escalation and follow-ups wait until ``until``."""

    by: str
    """The identity key of who claimed it."""
    until: datetime
    name: str | None = None

    def active(self, now: datetime) -> bool:
        return self.until > now

    @property
    def who(self) -> str:
        return self.name or self.by


@dataclass(frozen=True)
class Copy:
    """One delivery as deadlines see it."""

    id: int
    destination: str
    position: int
    purpose: Purpose
    state: DeliveryState
    ref: MessageRef | None = None

    @property
    def live(self) -> bool:
        """Posted and in a chat (the web inbox has no thread to remind in)."""
        return (
            self.state is DeliveryState.POSTED and self.destination != WEB and self.ref is not None
        )

    @property
    def on_its_way(self) -> bool:
        """Queued or being posted to a chat: posted within moments, or failed for good."""
        return self.state in _ON_ITS_WAY and self.destination != WEB


@dataclass(frozen=True)
class Timer:
    """A pending deadline."""

    kind: DeadlineKind
    due_at: datetime


@dataclass(frozen=True)
class Original:
    """A primary copy an escalation links to."""

    destination: str
    ref: MessageRef


@dataclass(frozen=True)
class Escalation:
    """What makes a copy an escalation: whom it mentions and where the original is."""

    mentions: tuple[str, ...]
    originals: tuple[Original, ...] = ()


@dataclass(frozen=True)
class StoredElicitation:
    elicitation: Elicitation
    status: Status
    answer: Answer | None
    version: int
    route: Route
    created_at: datetime
    updated_at: datetime
    claim: Claim | None = None
    """The last "I'm on it" (it may have lapsed: ``claim.active(now)``)."""
    writeback: Writeback | None = None
    """Where the outcome stands upstream; None before any (or from before it was recorded)."""
    votes: tuple[Vote, ...] = ()
    """Approving votes stored toward the route's quorum (rule 9), oldest first."""


@dataclass(frozen=True)
class Timeline:
    """What a message's schedule is built from: every copy and the pending deadlines."""

    copies: tuple[Copy, ...] = ()
    timers: tuple[Timer, ...] = ()


@dataclass(frozen=True)
class DeliveryView:
    """One copy of an elicitation, as reads show it."""

    id: int
    elicitation_key: ElicitationKey
    destination: str
    position: int
    purpose: Purpose
    state: DeliveryState
    ref: MessageRef | None
    posted_at: datetime | None
    created_at: datetime
    error: str | None = None
    escalation: Escalation | None = None
    """Set on an escalation copy: whom it mentions and where the originals are."""


@dataclass(frozen=True)
class DeadlineView:
    id: int
    elicitation_key: ElicitationKey
    kind: DeadlineKind
    due_at: datetime
    state: DeadlineState
    fired_at: datetime | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    detail: dict[str, Any] | None = None
    """What planned it: ``{"after": <delivery id>}`` (a follow-up), ``{"deferred": <id>}``."""


@dataclass(frozen=True)
class AuditEntry:
    id: int
    elicitation_key: ElicitationKey
    at: datetime
    action: str
    actor: str | None
    code: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True)
class EffectView:
    """One outbox row, as the admin view and tests read it."""

    id: int
    elicitation_key: ElicitationKey
    kind: EffectKind
    target: str
    delivery_id: int | None
    state: EffectState
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    done_at: datetime | None = None
    last_error: str | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    payload: dict[str, Any] | None = None
    lane: str = ""
    first_attempt_at: datetime | None = None


@dataclass(frozen=True)
class ChatRoute:
    """A route an admin made from chat."""

    id: int
    workspace: str
    board: str | None
    destination: str
    created_by: str
    created_at: datetime
    policy: RoutePolicy = DEFAULT_POLICY
    """Who may decide its questions, as the admin's ``subscribe`` words gave it."""


@dataclass(frozen=True)
class Subscribed:
    """What a ``subscribe`` did: ``changed`` (a route added, or its policy replaced: ``previous``),
    and ``policy``, the route's policy as stored now."""

    changed: bool
    policy: RoutePolicy
    previous: RoutePolicy | None = None


@dataclass(frozen=True)
class RecordResult:
    won: bool
    status: Status
    answer: Answer | None


@dataclass(frozen=True)
class OutboxItem:
    """A claimed outbox row."""

    id: int
    elicitation_key: ElicitationKey
    kind: EffectKind
    target: str
    delivery_id: int | None
    payload: Payload
    """What its kind carries (:mod:`bot.domain.payloads`)."""
    attempts: int
    version: int | None = None
    """The elicitation's version when the row was claimed (what a post renders)."""
    lane: str = ""
    first_attempt_at: datetime | None = None
    """When the row was first claimed: an earlier attempt may have reached the platform since."""


@dataclass(frozen=True)
class DueDeadline:
    id: int
    elicitation_key: ElicitationKey
    kind: DeadlineKind
    due_at: datetime


@dataclass(frozen=True)
class FiredDeadline(DueDeadline):
    """What firing one claimed deadline did."""

    outcome: FireOutcome


@dataclass(frozen=True)
class LeaseView:
    """Who holds a single-owner lease, and until when (it moves when it runs out)."""

    name: str
    holder: str
    until: datetime
    since: datetime


@dataclass(frozen=True)
class RawEvent:
    """An inbound chat event recorded before its ack, not yet handled."""

    id: int
    channel: str
    dedupe_key: str
    body: dict[str, Any]
    received_at: datetime


@dataclass(frozen=True)
class LaneView:
    """One lane's backlog (for ``/metrics``): rows waiting or in flight, and the oldest's age."""

    lane: str
    pending: int
    claimed: int
    oldest: datetime | None

"""The values deadlines are decided with (:mod:`bot.domain.deadlines`, which re-exports them and
holds the rules): kinds of due time, what a firing reads and writes, a schedule step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.domain import writes
from bot.domain.model import Answer, Elicitation, Route, Status
from bot.domain.quorum import Vote
from bot.domain.records import Claim, Copy, DeadlineKind, Escalation, Purpose
from bot.domain.refs import MessageRef

REMIND = DeadlineKind.REMIND
ESCALATE = DeadlineKind.ESCALATE
FOLLOWUP = DeadlineKind.FOLLOWUP
EXPIRE = DeadlineKind.EXPIRE
SUBJECT_EXPIRED = DeadlineKind.SUBJECT_EXPIRED
CLAIM_LAPSE = DeadlineKind.CLAIM_LAPSE

PLANNED_AT_INTAKE = (REMIND, ESCALATE, EXPIRE, SUBJECT_EXPIRED)
"""Kinds planned from the elicitation itself: a revision replaces the pending ones."""
PAUSED_BY_CLAIM = frozenset({ESCALATE, FOLLOWUP})
"""What an active claim holds back (expiry and reminders go on)."""

PRIMARY = Purpose.PRIMARY
ESCALATION = Purpose.ESCALATION
SYSTEM = writes.SYSTEM
"""Respondent and ``via`` of a decision made by the timeout rule."""


@dataclass(frozen=True)
class ScheduleStep:
    """One step still to come, as a message shows it."""

    kind: DeadlineKind
    """remind, followup, escalate or expire."""
    at: datetime
    targets: tuple[str, ...] = ()
    """Destinations of an escalation or a follow-up."""
    outcome: str | None = None
    """What expiry records (approve / deny); None: it just expires."""
    held_by: str | None = None
    """Pushed back to ``at`` by this person's claim."""


@dataclass(frozen=True)
class FireContext:
    """A claimed deadline and its elicitation, read in the transaction that fires it."""

    kind: DeadlineKind
    due_at: datetime
    now: datetime
    elicitation: Elicitation
    status: Status
    route: Route
    copies: tuple[Copy, ...]
    claim: Claim | None = None
    detail: Mapping[str, Any] | None = None
    """The deadline row's detail: what planned it, and (``waiting_since``) how long it has waited
    for a copy on its way."""
    votes: tuple[Vote, ...] = ()
    """The approving votes stored toward the route's quorum: a reminder mentions only the
    approvers who have not voted."""


@dataclass(frozen=True)
class ThreadNotice:
    """A reminder in the thread of one live copy."""

    delivery_id: int
    destination: str
    thread: MessageRef
    text: str
    mentions: tuple[str, ...]


@dataclass(frozen=True)
class EscalationPost:
    """A new, answerable copy in an escalation destination."""

    destination: str
    position: int
    escalation: Escalation


@dataclass(frozen=True)
class Closing:
    status: Status
    answer: Answer | None


@dataclass(frozen=True)
class Firing:
    """What a due deadline does now; the empty value does nothing (closed, or stale)."""

    defer_to: datetime | None = None
    notices: tuple[ThreadNotice, ...] = ()
    escalations: tuple[EscalationPost, ...] = ()
    activate: Copy | None = None
    """The next waiting destination to deliver to."""
    close: Closing | None = None
    refresh: bool = False
    """What the copies show changed: update every copy."""
    audit: str | None = None
    """The audit action to record, if any."""
    detail: dict[str, Any] = field(default_factory=dict)
    wait_until: datetime | None = None
    """Waiting for a copy on its way: the row is due again then (nothing else is written)."""
    waiting_since: datetime | None = None
    """With ``wait_until``: when it first came due (the row keeps it in its detail)."""
    skipped: bool = False
    """Nothing to send it to: only its audit is written (saying why), and the row is cancelled."""

"""What to write: the values :mod:`bot.domain.planning` returns and every store applies.

A store applies a :class:`WriteSet` in the transaction it read the state in, in this order:

1. ``audits``;
2. ``copies`` (an escalation copy is inserted once per destination and purpose; a duplicate
   writes nothing, nor does anything hanging on it);
3. ``activations`` (fenced on the delivery still ``waiting``, else nothing is written);
4. ``replace`` (pending deadlines of those kinds deleted), then ``deadlines`` (same kind and due
   time added once);
5. ``effects`` (outbox rows);
6. ``updates`` and ``refresh`` (one coalesced ``update`` row per posted chat copy; ``new_version``
   first bumps the version for a change no stored field shows);
7. ``close`` (fenced on ``pending``: cancels pending deadlines, skips waiting copies, updates
   posted ones, queues one writeback and audits as the system);
8. ``settle`` (stores the new :class:`~bot.domain.records.Writeback`, bumps the version;
   ``reopen`` puts an answered elicitation back to ``pending``, reviving what its close put aside).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.domain.model import Answer, Status
from bot.domain.payloads import Payload
from bot.domain.records import (
    DeadlineKind,
    DeliveryState,
    EffectKind,
    Escalation,
    Original,
    Purpose,
    Writeback,
)
from bot.domain.refs import MessageRef, ref_from_json

SYSTEM = "system"
"""The actor of what the system decides (timeouts, follow-ups, escalation)."""


@dataclass(frozen=True)
class PlannedDeadline:
    """A due time to add."""

    kind: DeadlineKind
    due_at: datetime
    detail: Mapping[str, Any] | None = None
    """Stored with the row, e.g. ``{"after": <delivery id>}`` for a follow-up."""


@dataclass(frozen=True)
class AuditWrite:
    action: str
    actor: str | None = None
    code: str | None = None
    detail: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class NewCopy:
    """A delivery to insert; what hangs on it is written once its id is known."""

    destination: str
    position: int
    purpose: Purpose
    state: DeliveryState
    ref: MessageRef | None = None
    posted: bool = False
    """Posted at once (the web inbox): ``posted_at`` is now."""
    post: bool = False
    """Queue its ``post`` (an escalation copy's carries ``{"purpose": "escalation"}``)."""
    followup_at: datetime | None = None
    """Plan its follow-up (``{"after": <its id>}``) at this time."""
    escalation: Escalation | None = None
    """Whom an escalation copy mentions and where the originals are."""


@dataclass(frozen=True)
class Activation:
    """A waiting copy's turn: fenced on it still waiting."""

    delivery_id: int
    destination: str
    state: DeliveryState
    ref: MessageRef | None = None
    posted: bool = False
    post: bool = False
    followup_at: datetime | None = None
    audit: AuditWrite | None = None
    """Written only when the activation happens."""


@dataclass(frozen=True)
class Effect:
    """An outbox row to queue."""

    kind: EffectKind
    target: str
    delivery_id: int | None = None
    payload: Payload | None = None
    """None: the kind's default (:mod:`bot.domain.payloads`)."""


@dataclass(frozen=True)
class CopyUpdate:
    """Rewrite one posted copy (coalesced with an unclaimed update already waiting)."""

    delivery_id: int
    destination: str


@dataclass(frozen=True)
class Close:
    """Close a pending elicitation (fenced on it still pending)."""

    status: Status
    answer: Answer | None = None
    detail: Mapping[str, Any] | None = None
    """The audit detail of the decision (its action is the status, its actor the system)."""


@dataclass(frozen=True)
class Settle:
    """The write-back's outcome to store (the planner fenced it on the round being sent)."""

    writeback: Writeback
    reopen: bool = False


@dataclass(frozen=True)
class WriteSet:
    """Everything one decision writes; the empty value writes nothing."""

    audits: tuple[AuditWrite, ...] = ()
    copies: tuple[NewCopy, ...] = ()
    activations: tuple[Activation, ...] = ()
    replace: frozenset[DeadlineKind] = frozenset()
    deadlines: tuple[PlannedDeadline, ...] = ()
    effects: tuple[Effect, ...] = ()
    updates: tuple[CopyUpdate, ...] = ()
    refresh: bool = False
    """Update every posted chat copy."""
    new_version: bool = False
    close: Close | None = None
    settle: Settle | None = None

    @property
    def empty(self) -> bool:
        return self == WriteSet()


def escalation_json(escalation: Escalation) -> dict[str, Any]:
    """An escalation copy's stored detail."""
    return {
        "mentions": list(escalation.mentions),
        "originals": [
            {"destination": o.destination, "ref": o.ref.to_json()} for o in escalation.originals
        ],
    }


def escalation_from_json(detail: Mapping[str, Any] | None) -> Escalation | None:
    """The typed escalation of a stored detail (None: not an escalation copy)."""
    if not detail or "mentions" not in detail:
        return None
    originals = tuple(
        Original(str(o.get("destination", "")), ref)
        for o in detail.get("originals") or ()
        if (ref := ref_from_json(o.get("ref"))) is not None
    )
    return Escalation(tuple(str(m) for m in detail["mentions"]), originals)

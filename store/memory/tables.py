"""The in-memory store's tables and its transaction: every write goes through :class:`Tx`, which
keeps an undo log, so a failed transaction leaves the tables exactly as they were.

Rows are frozen values: a change puts a new row in place of the old one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from bot.domain.deadlines import Claim
from bot.domain.model import Answer, Elicitation, Route, Status
from bot.domain.records import (
    AuditEntry,
    ChatRoute,
    DeadlineKind,
    DeadlineState,
    DeadlineView,
    DeliveryView,
    EffectView,
    Writeback,
)

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class ElicitationRow:
    elicitation: Elicitation
    route: Route
    status: Status
    version: int
    display_hash: str
    created_at: datetime
    updated_at: datetime
    answer: Answer | None = None
    closed_at: datetime | None = None
    claim: Claim | None = None
    writeback: Writeback | None = None

    @property
    def expires_at(self) -> datetime | None:
        return self.elicitation.deadlines.expires_at

    @property
    def subject_expires_at(self) -> datetime | None:
        subject = self.elicitation.subject
        return None if subject is None else subject.expires_at


@dataclass(frozen=True)
class DeadlineRow:
    id: int
    elicitation_key: str
    kind: DeadlineKind
    due_at: datetime
    state: DeadlineState
    fired_at: datetime | None = None
    claimed_by: str | None = None
    claimed_until: datetime | None = None
    detail: dict[str, Any] | None = None

    def view(self) -> DeadlineView:
        return DeadlineView(
            id=self.id,
            elicitation_key=self.elicitation_key,
            kind=self.kind,
            due_at=self.due_at,
            state=self.state,
            fired_at=self.fired_at,
            claimed_by=self.claimed_by,
            claimed_until=self.claimed_until,
            detail=copy.deepcopy(self.detail),
        )


@dataclass
class Tables:
    """Every table, keyed like its SQL one; the ``*_of`` indexes: row ids per elicitation."""

    elicitations: dict[str, ElicitationRow] = field(default_factory=dict)
    inbound: dict[tuple[str, str], str | None] = field(default_factory=dict)
    deliveries: dict[int, DeliveryView] = field(default_factory=dict)
    deadlines: dict[int, DeadlineRow] = field(default_factory=dict)
    outbox: dict[int, EffectView] = field(default_factory=dict)
    answers: dict[str, Answer] = field(default_factory=dict)
    audit: dict[int, AuditEntry] = field(default_factory=dict)
    routes: dict[int, ChatRoute] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    deliveries_of: dict[str, set[int]] = field(default_factory=dict)
    deadlines_of: dict[str, set[int]] = field(default_factory=dict)
    outbox_of: dict[str, set[int]] = field(default_factory=dict)
    audit_of: dict[str, set[int]] = field(default_factory=dict)
    last_id: dict[str, int] = field(default_factory=dict)

    def of(self, index: dict[str, set[int]], rows: dict[int, V], key: str) -> list[V]:
        """The rows of one elicitation, by id."""
        return [rows[i] for i in sorted(index.get(key, ()))]

    def deliveries_for(self, key: str) -> list[DeliveryView]:
        return self.of(self.deliveries_of, self.deliveries, key)

    def deadlines_for(self, key: str) -> list[DeadlineRow]:
        return self.of(self.deadlines_of, self.deadlines, key)

    def outbox_for(self, key: str) -> list[EffectView]:
        return self.of(self.outbox_of, self.outbox, key)


_MISSING: Any = object()


class Tx:
    """One transaction: writes go straight to the tables, each with its undo step."""

    def __init__(self, tables: Tables) -> None:
        self.t = tables
        self._undo: list[Callable[[], None]] = []
        self.planned: list[datetime] = []
        """Due times of deadlines this transaction planned (for the watchers)."""

    def rollback(self) -> None:
        while self._undo:
            self._undo.pop()()

    # -- generic writes -----------------------------------------------------------------------

    def put(self, table: dict[K, V], key: K, row: V) -> None:
        old = table.get(key, _MISSING)
        table[key] = row

        def undo() -> None:
            if old is _MISSING:
                del table[key]
            else:
                table[key] = old

        self._undo.append(undo)

    def drop(self, table: dict[K, V], key: K) -> None:
        old = table.pop(key)
        self._undo.append(lambda: table.__setitem__(key, old))

    def index(self, index: dict[str, set[int]], key: str, row_id: int) -> None:
        ids = index.setdefault(key, set())
        ids.add(row_id)
        self._undo.append(lambda: ids.discard(row_id))

    def unindex(self, index: dict[str, set[int]], key: str, row_id: int) -> None:
        ids = index[key]
        ids.discard(row_id)
        self._undo.append(lambda: ids.add(row_id))

    def next_id(self, table: str) -> int:
        """Increasing per table; like a sequence, a rolled-back id is not handed out again."""
        self.t.last_id[table] = self.t.last_id.get(table, 0) + 1
        return self.t.last_id[table]

    def change(self, table: dict[K, V], key: K, **values: Any) -> V:
        row = replace(table[key], **values)  # type: ignore[type-var]
        self.put(table, key, row)
        return row

    # -- rows ---------------------------------------------------------------------------------

    def elicitation(self, key: str, **values: Any) -> ElicitationRow:
        return self.change(self.t.elicitations, key, **values)

    def delivery(self, delivery_id: int, **values: Any) -> DeliveryView:
        return self.change(self.t.deliveries, delivery_id, **values)

    def deadline(self, deadline_id: int, **values: Any) -> DeadlineRow:
        return self.change(self.t.deadlines, deadline_id, **values)

    def effect(self, row_id: int, **values: Any) -> EffectView:
        return self.change(self.t.outbox, row_id, **values)

    def insert_delivery(self, row: DeliveryView) -> None:
        self.put(self.t.deliveries, row.id, row)
        self.index(self.t.deliveries_of, row.elicitation_key, row.id)

    def insert_deadline(self, row: DeadlineRow) -> None:
        self.put(self.t.deadlines, row.id, row)
        self.index(self.t.deadlines_of, row.elicitation_key, row.id)

    def delete_deadline(self, deadline_id: int) -> None:
        row = self.t.deadlines[deadline_id]
        self.drop(self.t.deadlines, deadline_id)
        self.unindex(self.t.deadlines_of, row.elicitation_key, deadline_id)

    def insert_effect(self, row: EffectView) -> None:
        self.put(self.t.outbox, row.id, row)
        self.index(self.t.outbox_of, row.elicitation_key, row.id)

    def insert_audit(self, row: AuditEntry) -> None:
        self.put(self.t.audit, row.id, row)
        self.index(self.t.audit_of, row.elicitation_key, row.id)


def utc(at: datetime) -> datetime:
    """Aware UTC, as every store hands times back; a naive time is refused, as SQL refuses it."""
    if at.tzinfo is None:
        msg = "naive datetime given to the store; use aware UTC"
        raise ValueError(msg)
    return at.astimezone(UTC)


def as_json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a JSON column would give back: a copy, refused if it is not JSON."""
    if value is None:
        return None
    copied: dict[str, Any] = json.loads(json.dumps(dict(value)))
    return copied

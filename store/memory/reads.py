"""The in-memory store's reads: typed records, ordered as the SQL store orders them."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bot.domain.deadlines import Timer
from bot.domain.model import Status
from bot.domain.records import (
    AuditEntry,
    DeadlineState,
    DeadlineView,
    EffectView,
    StoredElicitation,
    Timeline,
)
from store.memory.tables import ElicitationRow, Tables
from store.memory.writer import to_copy


def copied(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A caller's own copy of a JSON value (changing it changes nothing stored)."""
    return copy.deepcopy(value)


def stored(row: ElicitationRow) -> StoredElicitation:
    return StoredElicitation(
        elicitation=row.elicitation,
        status=row.status,
        answer=row.answer,
        version=row.version,
        route=row.route,
        created_at=row.created_at,
        updated_at=row.updated_at,
        claim=row.claim,
        writeback=row.writeback,
    )


def resolve_key(t: Tables, ident: str) -> str | None:
    if ident in t.elicitations:
        return ident
    hits = [k for k, r in t.elicitations.items() if r.elicitation.source_id == ident]
    return hits[0] if len(hits) == 1 else None


def key_for_message(t: Tables, ref_key: str) -> str | None:
    for d in sorted(t.deliveries.values(), key=lambda d: d.id):
        if d.ref is not None and d.ref.key == ref_key:
            return d.elicitation_key
    return None


def list_elicitations(
    t: Tables, status: str | None, after: str | None, limit: int
) -> list[StoredElicitation]:
    rows = [r for r in t.elicitations.values() if status is None or r.status == status]
    anchor = t.elicitations.get(after) if after is not None else None
    if anchor is not None and after is not None:
        rows = [
            r
            for r in rows
            if r.created_at < anchor.created_at
            or (r.created_at == anchor.created_at and r.elicitation.key < after)
        ]
    rows.sort(key=lambda r: (r.created_at, r.elicitation.key), reverse=True)
    return [stored(r) for r in rows[: max(limit, 0)]]


def deadlines(t: Tables, key: str) -> list[DeadlineView]:
    rows = sorted(t.deadlines_for(key), key=lambda d: (d.due_at, d.id))
    return [r.view() for r in rows]


def audit(t: Tables, key: str) -> list[AuditEntry]:
    rows = t.of(t.audit_of, t.audit, key)
    return [replace(a, detail=copy.deepcopy(a.detail)) for a in rows]


def outbox(t: Tables, key: str | None) -> list[EffectView]:
    rows = sorted(t.outbox.values(), key=lambda o: o.id) if key is None else t.outbox_for(key)
    return [replace(o, payload=copy.deepcopy(o.payload)) for o in rows]


def count(t: Tables, table: str) -> int:
    sizes = {
        "elicitation": len(t.elicitations),
        "inbound": len(t.inbound),
        "delivery": len(t.deliveries),
        "outbox": len(t.outbox),
        "answer": len(t.answers),
        "audit": len(t.audit),
        "deadline": len(t.deadlines),
    }
    return sizes[table]


def timelines(t: Tables, keys: Sequence[str]) -> dict[str, Timeline]:
    found: dict[str, Timeline] = {}
    for key in sorted(set(keys)):
        pending = sorted(
            (d for d in t.deadlines_for(key) if d.state is DeadlineState.PENDING),
            key=lambda d: (d.due_at, d.id),
        )
        found[key] = Timeline(
            tuple(to_copy(d) for d in t.deliveries_for(key)),
            tuple(Timer(d.kind, d.due_at) for d in pending),
        )
    return found


def is_pending(t: Tables, key: str) -> bool:
    row = t.elicitations.get(key)
    return row is not None and row.status is Status.PENDING

"""The in-memory store's writes that hang on a domain decision: each reads the state in its
transaction, asks :mod:`bot.domain.planning` what to write and applies the write-set."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from bot.domain import deadlines as dl
from bot.domain import planning
from bot.domain.deadlines import Copy, FireContext, Firing
from bot.domain.model import Status
from bot.domain.ports import IntakeOutcome
from bot.domain.records import (
    DeadlineState,
    DeliveryState,
    DueDeadline,
    EffectKind,
    EffectState,
    FiredDeadline,
    FireOutcome,
    IntakeItem,
    IntakeResult,
    OutboxItem,
    Writeback,
)
from bot.domain.refs import MessageRef
from store.memory.reads import stored
from store.memory.tables import ElicitationRow, as_json, utc
from store.memory.writer import Writer


def intake(w: Writer, item: IntakeItem, now: datetime) -> IntakeOutcome:
    """One item of a batch: deduplicated on its inbound id, then new, revised or unchanged."""
    e = item.elicitation
    key = e.key
    seen = (item.channel, item.inbound_id)
    if seen in w.t.inbound:
        # Seen before: name the elicitation it was first stored as (the id may be reused).
        return IntakeOutcome(w.t.inbound[seen] or key, IntakeResult.DUPLICATE)
    w.tx.put(w.t.inbound, seen, key)
    row = w.t.elicitations.get(key)
    if row is None:
        w.tx.put(
            w.t.elicitations,
            key,
            ElicitationRow(
                elicitation=e,
                route=item.route,
                status=Status.PENDING,
                version=1,
                display_hash=item.display_hash,
                created_at=utc(now),
                updated_at=utc(now),
            ),
        )
        w.apply(key, planning.intake_writes(e, item.route, now, item.audit), now)
        return IntakeOutcome(key, IntakeResult.ACCEPTED)
    if row.status is not Status.PENDING or row.display_hash == item.display_hash:
        return IntakeOutcome(key, IntakeResult.UNCHANGED)
    w.tx.elicitation(
        key,
        elicitation=e,
        display_hash=item.display_hash,
        version=row.version + 1,
        updated_at=utc(now),
    )
    w.apply(key, planning.revision_writes(e, now, item.audit), now)
    return IntakeOutcome(key, IntakeResult.UPDATED)


def writeback_done(
    w: Writer,
    item: OutboxItem,
    now: datetime,
    *,
    error: str | None,
    reopen: bool,
    gave_up: bool = False,
) -> Writeback | None:
    """A write-back accepted (``error`` None) or refused for good: what the domain plans for it
    (:func:`bot.domain.planning.writeback_writes`); returns what was settled."""
    key = item.elicitation_key
    row = w.t.elicitations.get(key)
    if row is None:
        return None
    round_ = int((item.payload or {}).get("round") or 1)
    writes = planning.writeback_writes(
        stored(row), w.copies(key), round_, error=error, reopen=reopen, gave_up=gave_up
    )
    if writes.empty or writes.settle is None:
        return None
    w.apply(key, writes, now)
    return writes.settle.writeback


def complete(
    w: Writer,
    item: OutboxItem,
    ref: MessageRef | None,
    claimer: str,
    now: datetime,
    *,
    seed: bool = False,
) -> bool:
    """One completion, fenced on our claim; a post records its ref and what follows from it."""
    row = w.t.outbox.get(item.id)
    if row is None or row.state is not EffectState.CLAIMED or row.claimed_by != claimer:
        return False
    w.tx.effect(item.id, state=EffectState.DONE, done_at=utc(now), last_error=None)
    if item.kind is EffectKind.WRITEBACK:
        writeback_done(w, item, now, error=None, reopen=False)
        return True
    if item.kind is not EffectKind.POST or item.delivery_id is None:
        return True
    if item.delivery_id in w.t.deliveries:
        w.tx.delivery(
            item.delivery_id,
            state=DeliveryState.POSTED,
            ref=ref,
            posted_at=utc(now),
            error=None,
        )
    current = w.t.elicitations.get(item.elicitation_key)
    if current is None:
        return True
    writes = planning.posted_writes(
        current.route,
        delivery_id=item.delivery_id,
        destination=item.target,
        pending=current.status is Status.PENDING,
        stale=current.version != item.version,
        copies=w.copies(item.elicitation_key),
        now=now,
        seed=seed,
    )
    w.apply(item.elicitation_key, writes, now)
    return True


def fall_back(w: Writer, key: str, failed_id: int, now: datetime) -> None:
    """A post failed for good: what the domain says comes next (the next destination, now)."""
    row = w.t.elicitations.get(key)
    if row is not None:
        w.apply(key, planning.fall_back(key, row.route, w.copies(key), failed_id, now), now)


def fire(
    w: Writer,
    due: Sequence[DueDeadline],
    claimer: str,
    now: datetime,
    decide: Callable[[FireContext], Firing],
) -> list[FiredDeadline]:
    """Mark each claimed deadline fired (fenced on our claim and on it still pending), then write
    what ``decide`` says; a deadline of an elicitation closed earlier in the batch is idle."""
    ours: set[int] = set()
    for d in due:
        row = w.t.deadlines.get(d.id)
        if row is not None and row.claimed_by == claimer and row.state is DeadlineState.PENDING:
            w.tx.deadline(d.id, state=DeadlineState.FIRED, fired_at=utc(now))
            ours.add(d.id)
    # Every firing of the batch is decided on the copies as they stood when it began.
    copies = {key: w.copies(key) for key in {d.elicitation_key for d in due if d.id in ours}}
    results: list[FiredDeadline] = []
    for d in due:
        outcome = FireOutcome.LOST
        if d.id in ours:
            outcome = _fire_one(w, d, copies[d.elicitation_key], now, decide)
        if outcome in (FireOutcome.IDLE, FireOutcome.SKIPPED):  # nothing done: the row says so
            w.tx.deadline(d.id, state=DeadlineState.CANCELLED)
        elif outcome is FireOutcome.DEFERRED:
            w.tx.deadline(d.id, state=DeadlineState.DEFERRED)
        results.append(FiredDeadline(d.id, d.elicitation_key, d.kind, d.due_at, outcome))
    return results


def _fire_one(
    w: Writer,
    d: DueDeadline,
    copies: tuple[Copy, ...],
    now: datetime,
    decide: Callable[[FireContext], Firing],
) -> FireOutcome:
    key = d.elicitation_key
    row = w.t.elicitations.get(key)
    if row is None or row.status is not Status.PENDING:
        return FireOutcome.IDLE
    deadline = w.t.deadlines[d.id]
    ctx = FireContext(
        d.kind,
        d.due_at,
        now,
        row.elicitation,
        row.status,
        row.route,
        copies,
        row.claim,
        deadline.detail,
    )
    planned = planning.firing_writes(ctx, decide(ctx), d.id)
    if planned.outcome is FireOutcome.WAITING:  # now, so a close later in the batch cancels it
        _due_again(w, d, planned.again_at or now + dl.COPY_RETRY, planned.again_detail)
    applied = w.apply(key, planned.writes, now, batch=True)
    if applied.closed is False:
        return FireOutcome.IDLE
    return planned.outcome


def _due_again(w: Writer, d: DueDeadline, at: datetime, detail: Mapping[str, Any] | None) -> None:
    """Put a deadline waiting for a copy back, pending, due at the first instant from ``at`` that
    no other row of its kind holds (as the SQL store does)."""
    rows = w.t.deadlines_for(d.elicitation_key)
    taken = {r.due_at for r in rows if r.kind is d.kind and r.id != d.id}
    again = dl.free_instant(utc(at), taken)
    w.tx.deadline(
        d.id,
        state=DeadlineState.PENDING,
        due_at=again,
        detail=as_json(detail),
        fired_at=None,
        claimed_by=None,
        claimed_until=None,
    )
    w.tx.planned.append(again)

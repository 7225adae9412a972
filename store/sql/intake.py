"""Intake: deduplicated on (channel, inbound id) and on the key, all or nothing per batch, with
group commit. A group is written a statement per table (:class:`store.sql.many_rows.ManyRows`),
not several per item: per-statement overhead was most of the store's CPU per event.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection, Engine

from bot.domain import planning
from bot.domain.model import ElicitationKey
from bot.domain.ports import IntakeOutcome
from bot.domain.records import (
    DeadlineState,
    IntakeItem,
    IntakeResult,
)
from bot.domain.writes import PlannedDeadline, WriteSet
from store.db import RawJson
from store.sql.apply import Applier, Batch
from store.sql.base import (
    AUDIT,
    DEADLINE,
    DELIVERY,
    INBOUND,
    OUTBOX,
    PENDING,
    E,
    open_changed,
)
from store.sql.many_rows import ManyRows

GROUP_COMMIT_MAX = 64
"""Most inbound batches written in one transaction."""


@dataclass(frozen=True)
class _PendingIntake:
    items: list[IntakeItem]
    now: datetime
    future: asyncio.Future[list[IntakeOutcome]]


class Intake(Applier):
    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._pending: list[_PendingIntake] = []
        self._drainer: asyncio.Task[None] | None = None
        # For a whole group at once (one statement each): the rows returned name the new ones.
        many = functools.partial(ManyRows, engine)
        self._group_inbounds = many(
            INBOUND, conflict=("channel", "inbound_id"), returning=("channel", "inbound_id")
        )
        self._group_elicitations = many(E, conflict=("key",), returning=("key",))
        self._group_copies = many(
            DELIVERY,
            conflict=("elicitation_key", "destination", "purpose"),
            returning=("elicitation_key", "destination", "purpose", "id"),
        )
        self._group_deadlines = many(DEADLINE, conflict=("elicitation_key", "kind", "due_at"))
        self._group_outbox = many(OUTBOX)
        self._group_audit = many(AUDIT)
        self._first_key = select(INBOUND.c.elicitation_key).where(
            INBOUND.c.channel == bindparam("ch"), INBOUND.c.inbound_id == bindparam("iid")
        )

    async def intake(self, items: Sequence[IntakeItem], now: datetime) -> list[IntakeOutcome]:
        """Group commit: batches that arrive while a commit runs are written together in the next
        transaction; if that fails, each is retried in its own: one bad batch fails no other."""
        pending = _PendingIntake(list(items), now, asyncio.get_running_loop().create_future())
        self._pending.append(pending)
        if self._drainer is None or self._drainer.done():
            # A task of its own: a caller that goes away mid-commit must not strand the others.
            self._drainer = asyncio.create_task(self._drain_intake())
        return await pending.future

    async def _drain_intake(self) -> None:
        while self._pending:
            group = self._pending[:GROUP_COMMIT_MAX]
            del self._pending[:GROUP_COMMIT_MAX]
            await self._flush_intake(group)

    async def _flush_intake(self, group: list[_PendingIntake]) -> None:
        def work(conn: Connection) -> list[list[IntakeOutcome]]:
            entries = [(item, p.now) for p in group for item in p.items]
            if _independent(entries):
                flat = self._intake_many(conn, entries)
            else:
                flat = [self._intake_one(conn, item, now) for item, now in entries]
            results, start = [], 0
            for p in group:
                results.append(flat[start : start + len(p.items)])
                start += len(p.items)
            return results

        try:
            results = await self._run(work, write=True)
        except Exception as exc:
            if len(group) == 1:
                if not group[0].future.done():
                    group[0].future.set_exception(exc)
                return
            for p in group:
                await self._flush_intake([p])
            return
        for p, outcomes in zip(group, results, strict=True):
            if not p.future.done():
                p.future.set_result(outcomes)

    def _intake_many(
        self, conn: Connection, entries: list[tuple[IntakeItem, datetime]]
    ) -> list[IntakeOutcome]:
        """:meth:`_intake_one` for a group of independent items, a statement per table for all of
        them: the same outcomes as one by one, since every inbound id and key in it is distinct."""
        if not entries:  # empty batches alone: nothing to write (an insert of no rows is no SQL)
            return []
        # Rows in key order: replicas writing overlapping groups lock them in the same order.
        inbound = sorted((_inbound_row(item, now) for item, now in entries), key=_inbound_order)
        new = {(r.channel, r.inbound_id) for r in self._group_inbounds.execute(conn, inbound)}
        outcomes: list[IntakeOutcome | None] = [None] * len(entries)
        fresh: list[int] = []
        for index, (item, _) in enumerate(entries):
            if (item.channel, item.inbound_id) in new:
                fresh.append(index)
            else:
                outcomes[index] = self._seen_before(conn, item)
        created: set[str] = set()
        if fresh:
            rows = sorted((_elicitation_row(*entries[i]) for i in fresh), key=lambda r: r["key"])
            created = {r.key for r in self._group_elicitations.execute(conn, rows)}
        work: list[tuple[str, WriteSet, datetime]] = []
        for index in fresh:
            item, now = entries[index]
            e = item.elicitation
            if e.key in created:
                work.append((e.key, planning.intake_writes(e, item.route, now, item.audit), now))
                outcomes[index] = IntakeOutcome(e.key, IntakeResult.ACCEPTED)
            else:
                outcomes[index] = self._revise(conn, item, now)
        batch = Batch()
        self._apply_all(conn, work, batch)
        if batch.bump or batch.refresh:  # no intake write-set asks for either: ``_finish`` then
            # ``now`` here dates the refreshes and version bumps only.
            self._finish(conn, batch, entries[-1][1])
        else:  # what ``_finish`` would write (its ``_flush``), a statement per table
            self._group_outbox.execute(conn, batch.outbox)
            self._group_audit.execute(conn, batch.audit)
            batch.outbox.clear()
            batch.updating.clear()
            batch.audit.clear()
        return [_present(outcome) for outcome in outcomes]

    def _apply_all(
        self, conn: Connection, work: list[tuple[str, WriteSet, datetime]], batch: Batch
    ) -> None:
        """:meth:`Applier._apply` for many write-sets: their copies in one statement, then their
        deadlines in another (``_apply``'s order), then ``_apply`` with the rest; deadlines stay
        with ``_apply`` when an activation or a replace must run first."""
        followups = self._add_copies(conn, work, batch, insert=self._group_copies.execute)
        deadlines: list[dict[str, Any]] = []
        rests: list[tuple[str, WriteSet, datetime]] = []
        for (key, ws, now), planned_after in zip(work, followups, strict=True):
            planned = [*ws.deadlines, *planned_after]
            if ws.activations or ws.replace:
                rests.append((key, replace(ws, copies=(), deadlines=tuple(planned)), now))
                continue
            deadlines += (_deadline_row(key, d) for d in planned)
            rests.append((key, replace(ws, copies=(), deadlines=()), now))
        if deadlines:
            self._group_deadlines.execute(conn, deadlines)
            # Once written, as ``_add_deadlines`` does: a row the database refused wakes nobody.
            self._planned.extend(row["due_at"] for row in deadlines)
        for key, rest, now in rests:
            self._apply(conn, key, rest, now, batch)

    def _intake_one(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        e = item.elicitation
        key = e.key
        seen = conn.execute(self._new_inbound, _inbound_row(item, now))
        if seen.first() is None:
            return self._seen_before(conn, item)
        created = conn.execute(self._new_elicitation, _elicitation_row(item, now))
        if created.first() is not None:
            self._write(conn, key, planning.intake_writes(e, item.route, now, item.audit), now)
            return IntakeOutcome(key, IntakeResult.ACCEPTED)
        return self._revise(conn, item, now)

    def _seen_before(self, conn: Connection, item: IntakeItem) -> IntakeOutcome:
        """A duplicate: name the elicitation it was first stored as (the id may be reused)."""
        first = conn.execute(self._first_key, {"ch": item.channel, "iid": item.inbound_id}).scalar()
        key = ElicitationKey(str(first)) if first else item.elicitation.key
        return IntakeOutcome(key, IntakeResult.DUPLICATE)

    def _revise(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        """The same elicitation pushed again: update what people see, if it changed and is open."""
        e = item.elicitation
        if not open_changed(
            conn,
            e.key,
            now,
            E.c.display_hash != item.display_hash,
            payload=RawJson(e.model_dump_json(by_alias=True)),
            display_hash=item.display_hash,
            expires_at=e.deadlines.expires_at,
            subject_expires_at=e.subject.expires_at if e.subject else None,
        ):
            return IntakeOutcome(e.key, IntakeResult.UNCHANGED)
        self._write(conn, e.key, planning.revision_writes(e, now, item.audit), now)
        return IntakeOutcome(e.key, IntakeResult.UPDATED)


def _independent(entries: list[tuple[IntakeItem, datetime]]) -> bool:
    """No two items share an inbound id or a key: each one's outcome is its own (a repeat
    within the group is a duplicate or a revision of an earlier item, so it goes one by one)."""
    inbound = {(item.channel, item.inbound_id) for item, _ in entries}
    keys = {item.elicitation.key for item, _ in entries}
    return len(inbound) == len(keys) == len(entries)


def _present(outcome: IntakeOutcome | None) -> IntakeOutcome:
    if outcome is None:  # pragma: no cover - every index is given an outcome above
        raise AssertionError
    return outcome


def _inbound_order(row: dict[str, Any]) -> tuple[str, str]:
    return row["channel"], row["inbound_id"]


def _deadline_row(key: str, d: PlannedDeadline) -> dict[str, Any]:
    """A deadline row, as :meth:`Applier._add_deadlines` writes it."""
    return {
        "elicitation_key": key,
        "kind": d.kind.value,
        "due_at": d.due_at,
        "state": DeadlineState.PENDING.value,
        "detail": None if d.detail is None else dict(d.detail),
    }


def _inbound_row(item: IntakeItem, now: datetime) -> dict[str, Any]:
    return {
        "channel": item.channel,
        "inbound_id": item.inbound_id,
        "elicitation_key": item.elicitation.key,
        "received_at": now,
    }


def _elicitation_row(item: IntakeItem, now: datetime) -> dict[str, Any]:
    e = item.elicitation
    return {
        "key": e.key,
        "source": e.source,
        "source_id": e.source_id,
        "workspace": e.workspace,
        "board_id": e.context.board_id,
        "status": PENDING,
        "version": 1,
        "display_hash": item.display_hash,
        # Serialised once, by pydantic (a dump to a dict, then json.dumps, cost twice as much).
        "payload": RawJson(e.model_dump_json(by_alias=True)),
        "route": RawJson(item.route.model_dump_json()),
        "expires_at": e.deadlines.expires_at,
        "subject_expires_at": e.subject.expires_at if e.subject else None,
        "created_at": now,
        "updated_at": now,
        "answer": None,
        "closed_at": None,
    }

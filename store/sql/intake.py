"""Intake: deduplicated on (channel, inbound id) and on the key, all or nothing per batch, with
group commit; what a new or revised elicitation writes is decided by the domain."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection, Engine

from bot.domain import planning
from bot.domain.ports import IntakeOutcome
from bot.domain.records import IntakeItem, IntakeResult
from store.sql.apply import Applier
from store.sql.base import INBOUND, PENDING, E

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

    async def intake(self, items: Sequence[IntakeItem], now: datetime) -> list[IntakeOutcome]:
        """Store a batch: all of it, or (on error) none of it.

        Group commit: batches that arrive while a commit is running are written together in the
        next transaction (one commit for many requests). If that shared transaction fails, each
        batch is retried in its own, so one bad batch never fails another.
        """
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
            return [[self._intake_one(conn, item, p.now) for item in p.items] for p in group]

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

    def _intake_one(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        e = item.elicitation
        key = e.key
        seen = conn.execute(
            self._new_inbound,
            {
                "channel": item.channel,
                "inbound_id": item.inbound_id,
                "elicitation_key": key,
                "received_at": now,
            },
        )
        if seen.first() is None:
            # Seen before: name the elicitation it was first stored as (the id may be reused).
            first = conn.execute(
                select(INBOUND.c.elicitation_key).where(
                    INBOUND.c.channel == item.channel, INBOUND.c.inbound_id == item.inbound_id
                )
            ).scalar()
            return IntakeOutcome(str(first) if first else key, IntakeResult.DUPLICATE)
        created = conn.execute(self._new_elicitation, _elicitation_row(item, now))
        if created.first() is not None:
            self._write(conn, key, planning.intake_writes(e, item.route, now, item.audit), now)
            return IntakeOutcome(key, IntakeResult.ACCEPTED)
        return self._revise(conn, item, now)

    def _revise(self, conn: Connection, item: IntakeItem, now: datetime) -> IntakeOutcome:
        """The same elicitation pushed again: update what people see, if it changed and is open."""
        e = item.elicitation
        changed = conn.execute(
            update(E)
            .where(
                E.c.key == e.key,
                E.c.status == PENDING,
                E.c.display_hash != item.display_hash,
            )
            .values(
                payload=e.model_dump(mode="json", by_alias=True),
                display_hash=item.display_hash,
                version=E.c.version + 1,
                expires_at=e.deadlines.expires_at,
                subject_expires_at=e.subject.expires_at if e.subject else None,
                updated_at=now,
            )
            .returning(E.c.key)
        )
        if changed.first() is None:
            return IntakeOutcome(e.key, IntakeResult.UNCHANGED)
        self._write(conn, e.key, planning.revision_writes(e, now, item.audit), now)
        return IntakeOutcome(e.key, IntakeResult.UPDATED)


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
        "payload": e.model_dump(mode="json", by_alias=True),
        "route": item.route.model_dump(mode="json"),
        "expires_at": e.deadlines.expires_at,
        "subject_expires_at": e.subject.expires_at if e.subject else None,
        "created_at": now,
        "updated_at": now,
        "answer": None,
        "closed_at": None,
    }

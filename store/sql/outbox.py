"""The outbox: rows claimed by one claimer at a time under a lease (``UPDATE … WHERE id IN (SELECT …
FOR UPDATE SKIP LOCKED) RETURNING`` on PostgreSQL; SQLite's writers are serialised), and every
completion, retry and failure fenced on that claim: a claimer whose lease ran out changes
nothing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.engine import Connection

from bot.domain import planning
from bot.domain.model import Route
from bot.domain.records import DeliveryState, EffectKind, EffectState, OutboxItem
from bot.domain.refs import MessageRef
from store.sql.apply import Applier
from store.sql.base import (
    COMPLETE_OUTBOX,
    CURRENT_STATE,
    DELIVERY,
    MARK_POSTED,
    NEW_AUDIT,
    OUTBOX,
    PENDING,
    E,
    audit_row,
)

CLAIMED = EffectState.CLAIMED.value


class Outbox(Applier):
    async def claim_outbox(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 20,
        lease: timedelta = timedelta(seconds=60),
    ) -> list[OutboxItem]:
        """Claim due rows (pending, or claimed by someone whose lease ran out)."""
        due = self._locked(
            select(OUTBOX.c.id)
            .where(
                or_(
                    and_(
                        OUTBOX.c.state == EffectState.PENDING.value,
                        OUTBOX.c.next_attempt_at <= now,
                    ),
                    and_(OUTBOX.c.state == CLAIMED, OUTBOX.c.claimed_until < now),
                )
            )
            .order_by(OUTBOX.c.next_attempt_at, OUTBOX.c.id)
            .limit(limit)
        )

        def work(conn: Connection) -> list[OutboxItem]:
            rows = conn.execute(
                update(OUTBOX)
                .where(OUTBOX.c.id.in_(due.scalar_subquery()))
                .values(
                    state=CLAIMED,
                    claimed_by=claimer,
                    claimed_until=now + lease,
                    attempts=OUTBOX.c.attempts + 1,
                )
                .returning(
                    OUTBOX.c.id,
                    OUTBOX.c.elicitation_key,
                    OUTBOX.c.kind,
                    OUTBOX.c.target,
                    OUTBOX.c.delivery_id,
                    OUTBOX.c.payload,
                    OUTBOX.c.attempts,
                )
            ).all()
            posting = [
                r.delivery_id
                for r in rows
                if r.kind == EffectKind.POST and r.delivery_id is not None
            ]
            if posting:
                conn.execute(
                    update(DELIVERY)
                    .where(
                        DELIVERY.c.id.in_(posting),
                        DELIVERY.c.state == DeliveryState.PLANNED.value,
                    )
                    .values(state=DeliveryState.POSTING.value)
                )
            keys = sorted({r.elicitation_key for r in rows})
            versions: dict[str, int] = {
                r.key: r.version
                for r in conn.execute(select(E.c.key, E.c.version).where(E.c.key.in_(keys)))
            }
            return sorted(
                (
                    OutboxItem(
                        id=r.id,
                        elicitation_key=r.elicitation_key,
                        kind=EffectKind(r.kind),
                        target=r.target,
                        delivery_id=r.delivery_id,
                        payload=r.payload,
                        attempts=r.attempts,
                        version=versions.get(r.elicitation_key),
                    )
                    for r in rows
                ),
                key=lambda i: i.id,
            )

        return await self._run(work, write=True)

    async def release_claims(self, claimer: str | None = None) -> int:
        """Give claimed rows back (at start with SQLite: the one process that held them is gone)."""

        def work(conn: Connection) -> int:
            query = update(OUTBOX).where(OUTBOX.c.state == CLAIMED)
            if claimer is not None:
                query = query.where(OUTBOX.c.claimed_by == claimer)
            result = conn.execute(
                query.values(
                    state=EffectState.PENDING.value, claimed_by=None, claimed_until=None
                ).returning(OUTBOX.c.id)
            )
            return len(result.all())

        return await self._run(work, write=True)

    async def complete_outbox(
        self, item: OutboxItem, claimer: str, now: datetime, *, ref: MessageRef | None = None
    ) -> bool:
        """Done (fenced on our claim). A post also records its platform message ref."""
        return (await self.complete_many([(item, ref)], claimer, now))[0]

    async def complete_many(
        self, done: Sequence[tuple[OutboxItem, MessageRef | None]], claimer: str, now: datetime
    ) -> list[bool]:
        """Several completions in one transaction; each is fenced on our claim."""

        def work(conn: Connection) -> list[bool]:
            return [self._complete(conn, item, ref, claimer, now) for item, ref in done]

        if not done:
            return []
        return await self._run(work, write=True)

    def _complete(
        self,
        conn: Connection,
        item: OutboxItem,
        ref: MessageRef | None,
        claimer: str,
        now: datetime,
    ) -> bool:
        finished = conn.execute(
            COMPLETE_OUTBOX, {"row_id": item.id, "claimer": claimer, "at": now}
        ).first()
        if finished is None:
            return False
        if item.kind != EffectKind.POST or item.delivery_id is None:
            return True
        conn.execute(
            MARK_POSTED,
            {
                "delivery_id": item.delivery_id,
                "new_ref": None if ref is None else ref.to_json(),
                "new_ref_key": None if ref is None else ref.key,
                "at": now,
            },
        )
        current = conn.execute(CURRENT_STATE, {"ekey": item.elicitation_key}).first()
        if current is None:
            return True
        route = Route.model_validate(current.route)
        pending = current.status == PENDING
        copies = (
            self._copies(conn, [item.elicitation_key]).get(item.elicitation_key, ())
            if planning.needs_copies(route, pending=pending)
            else ()
        )
        writes = planning.posted_writes(
            route,
            delivery_id=item.delivery_id,
            destination=item.target,
            pending=pending,
            stale=current.version != item.version,  # answered or revised while it was posted
            copies=copies,
            now=now,
        )
        if not writes.empty:
            self._write(conn, item.elicitation_key, writes, now)
        return True

    async def retry_outbox(self, item: OutboxItem, claimer: str, error: str, at: datetime) -> None:
        def work(conn: Connection) -> None:
            conn.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.id == item.id,
                    OUTBOX.c.claimed_by == claimer,
                    OUTBOX.c.state == CLAIMED,
                )
                .values(
                    state=EffectState.PENDING.value,
                    claimed_by=None,
                    claimed_until=None,
                    next_attempt_at=at,
                    last_error=error[:2000],
                )
            )

        await self._run(work, write=True)

    async def fail_outbox(self, item: OutboxItem, claimer: str, error: str, now: datetime) -> bool:
        """Record a permanent failure, fenced on our claim (a lost lease changes nothing); a
        primary copy that failed for good falls back to the next waiting destination."""

        def work(conn: Connection) -> bool:
            failed = conn.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.id == item.id,
                    OUTBOX.c.claimed_by == claimer,
                    OUTBOX.c.state == CLAIMED,
                )
                .values(state=EffectState.FAILED.value, done_at=now, last_error=error[:2000])
                .returning(OUTBOX.c.id)
            ).first()
            if failed is None:
                return False
            post = item.kind == EffectKind.POST and item.delivery_id is not None
            if post:
                conn.execute(
                    update(DELIVERY)
                    .where(DELIVERY.c.id == item.delivery_id)
                    .values(state=DeliveryState.FAILED.value, error=error[:2000])
                )
            conn.execute(
                NEW_AUDIT,
                audit_row(
                    item.elicitation_key,
                    now,
                    f"{item.kind.value}_failed",
                    None,
                    None,
                    {"target": item.target, "error": error[:500]},
                ),
            )
            if post and item.delivery_id is not None:
                key = item.elicitation_key
                copies = self._copies(conn, [key]).get(key, ())
                route = conn.execute(select(E.c.route).where(E.c.key == key)).scalar()
                if route is not None:
                    writes = planning.fall_back(
                        key, Route.model_validate(route), copies, item.delivery_id, now
                    )
                    if not writes.empty:
                        self._write(conn, key, writes, now)
            return True

        return await self._run(work, write=True)

    async def next_outbox_at(self) -> datetime | None:
        def work(conn: Connection) -> datetime | None:
            value: datetime | None = conn.execute(
                select(func.min(OUTBOX.c.next_attempt_at)).where(
                    OUTBOX.c.state == EffectState.PENDING.value
                )
            ).scalar()
            return value

        return await self._run(work, write=False)

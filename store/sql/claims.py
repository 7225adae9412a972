"""Outbox claims: rows claimed lane by lane by one claimer at a time under a lease, renewed by the
claimer's heartbeat, given back at start; the lanes' pace and figures, and when the next row is due.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    func,
    literal,
    not_,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.engine import Connection

from bot.domain import lanes
from bot.domain.payloads import payload_of
from bot.domain.records import DeliveryState, EffectKind, EffectState, LaneView, OutboxItem
from store.sql.base import CLAIMED, DELIVERY, OUTBOX, PACE, E, SqlBase, moved, released
from store.tables import UtcDateTime

PACE_PREFIX = lanes.pace_key("")
DOWN_PREFIX = lanes.down_key("")


NOW = bindparam("now", type_=UtcDateTime())
UNTIL = bindparam("until", type_=UtcDateTime())
CLAIMER = bindparam("claimer", type_=String())
LIMIT = bindparam("limit", type_=Integer())


@functools.lru_cache(maxsize=16)
def claim_statement(chained: tuple[str, ...], locked: bool) -> Any:
    """The claim, built once per set of chained lanes (and per dialect's locking): its values
    (now, claimer, until, limit) are bound at each call, so a claim costs the database's time,
    not the time to build a statement of three windowed subqueries again."""
    state, lane, kind = OUTBOX.c.state, OUTBOX.c.lane, OUTBOX.c.kind
    due = or_(
        and_(state == EffectState.PENDING.value, OUTBOX.c.next_attempt_at <= NOW),
        and_(state == CLAIMED, OUTBOX.c.claimed_until < NOW),
    )
    is_post = kind == EffectKind.POST.value
    is_update = kind == EffectKind.UPDATE.value
    paced = select(PACE.c.key).where(PACE.c.not_before > NOW)
    # A post waiting for its retry holds its lane's later posts: they go out in the order they
    # came, after an outage too. Not in a chained lane, whose posts are sent together and may
    # land in any order among themselves: one failing there holds back none of the others.
    head, behind = OUTBOX.alias("head"), OUTBOX.alias("behind")
    unchained = [not_(head.c.lane.like(p + "%")) for p in chained]
    heads = (
        select(head.c.lane.label("lane"), func.min(head.c.id).label("id"))
        .where(
            head.c.kind == EffectKind.POST.value,
            head.c.state == EffectState.PENDING.value,
            head.c.next_attempt_at > NOW,
            *unchained,
        )
        .group_by(head.c.lane)
        .subquery("heads")
    )
    held = (
        select(behind.c.id)
        .join(heads, and_(heads.c.lane == behind.c.lane, heads.c.id < behind.c.id))
        .where(behind.c.kind == EffectKind.POST.value)
    )
    is_writeback = kind == EffectKind.WRITEBACK.value
    # A paced lane's next post is claimed as soon as the one before it is done, ahead of its
    # pace: its bookkeeping (this claim, its reads, the shared slot) overlaps the platform's
    # interval, and the adapter sends it when the slot comes (Slack's Pacer, every replica's).
    candidate = and_(
        due,
        not_(and_(is_post, OUTBOX.c.id.in_(held))),
        # A sink that is down is tried again no sooner than its key says.
        not_(and_(is_writeback, literal(DOWN_PREFIX).concat(lane).in_(paced))),
    )
    live = (
        select(
            lane.label("lane"),
            func.count().label("n"),
            func.sum(case((is_post, 1), else_=0)).label("np"),
            func.sum(case((is_update, 1), else_=0)).label("nu"),
        )
        .where(state == CLAIMED, OUTBOX.c.claimed_until >= NOW)
        .group_by(lane)
        .subquery("live")
    )
    # 1. Due rows, numbered within their lane and kind (a lane's posts, its updates); a lane's
    # posts in the order they came, a retried one too.
    post_order = case((is_post, OUTBOX.c.id), else_=literal(0))
    by_kind = (
        select(
            OUTBOX.c.id,
            lane,
            kind,
            OUTBOX.c.next_attempt_at,
            func.row_number()
            .over(
                partition_by=(lane, kind),
                order_by=(post_order, OUTBOX.c.next_attempt_at, OUTBOX.c.id),
            )
            .label("kr"),
        )
        .where(candidate)
        .subquery("by_kind")
    )
    # Messages first: the lanes with a post they could make now hold back everything else. A
    # post whose pace has not come is claimed (above) but is not one the lane could make now:
    # the lane's updates and notices go out while it waits for its slot.
    posting = (
        select(OUTBOX.c.lane)
        .where(candidate, is_post, not_(literal(PACE_PREFIX).concat(lane).in_(paced)))
        .distinct()
    )
    waits = [k.value for k in EffectKind if lanes.waits_for_posts(k)]
    n, np_, nu = (func.coalesce(c, 0) for c in (live.c.n, live.c.np, live.c.nu))
    # Unpaced lanes (``chained``) have a chain of posts in flight, carried in order.
    post_cap = (
        case(
            (or_(*(by_kind.c.lane.like(p + "%") for p in chained)), lanes.POST_CHAIN),
            else_=lanes.POSTS_IN_FLIGHT,
        )
        if chained
        else literal(lanes.POSTS_IN_FLIGHT)
    )
    # 2. Those within their kind's bound, numbered within their lane (posts first): rows
    # held back by a bound take no place ahead of the others.
    post_first = case((by_kind.c.kind == EffectKind.POST.value, 0), else_=1)
    ranked = (
        select(
            by_kind.c.id,
            by_kind.c.lane,
            by_kind.c.kind,
            by_kind.c.next_attempt_at,
            n.label("n"),
            func.row_number()
            .over(
                partition_by=by_kind.c.lane,
                order_by=(post_first, by_kind.c.next_attempt_at, by_kind.c.id),
            )
            .label("r"),
        )
        .select_from(by_kind.outerjoin(live, live.c.lane == by_kind.c.lane))
        .where(
            or_(by_kind.c.kind != EffectKind.POST.value, by_kind.c.kr + np_ <= post_cap),
            or_(
                by_kind.c.kind != EffectKind.UPDATE.value,
                by_kind.c.kr + nu <= lanes.UPDATES_IN_FLIGHT,
            ),
            or_(by_kind.c.kind.not_in(waits), by_kind.c.lane.not_in(posting)),
        )
        .subquery("ranked")
    )
    # A chained lane has room for its chain of posts; its other effects keep the lane's usual
    # slots (a burst's reactions do not all go at once).
    down = select(PACE.c.key).where(PACE.c.key.like(DOWN_PREFIX + "%"))
    slots = case(
        (literal(DOWN_PREFIX).concat(ranked.c.lane).in_(down), 1),  # probed one at a time
        (ranked.c.lane.like(lanes.SINK + "%"), lanes.SINK_LANE_SLOTS),
        *(
            (
                and_(ranked.c.kind == EffectKind.POST.value, ranked.c.lane.like(prefix + "%")),
                lanes.lane_slots(prefix, chained=True),
            )
            for prefix in chained
        ),
        else_=lanes.CHAT_LANE_SLOTS,
    )
    # 3. Within the lane's slots; round-robin across lanes (every lane's first, then ...).
    pick = (
        select(ranked.c.id)
        .where(ranked.c.r + ranked.c.n <= slots)
        .order_by(ranked.c.r, ranked.c.next_attempt_at, ranked.c.id)
        .limit(LIMIT)
    )
    chosen = select(OUTBOX.c.id).where(OUTBOX.c.id.in_(pick.scalar_subquery()))
    if locked:
        chosen = chosen.with_for_update(skip_locked=True)

    return (
        update(OUTBOX)
        # ``due`` again: on PostgreSQL a row another owner claimed meanwhile is re-read
        # after its lock and no longer matches.
        .where(OUTBOX.c.id.in_(chosen.scalar_subquery()), due)
        .values(
            state=CLAIMED,
            claimed_by=CLAIMER,
            claimed_until=UNTIL,
            attempts=OUTBOX.c.attempts + 1,
            first_attempt_at=func.coalesce(OUTBOX.c.first_attempt_at, NOW),
        )
        .returning(
            OUTBOX.c.id,
            OUTBOX.c.elicitation_key,
            OUTBOX.c.kind,
            OUTBOX.c.target,
            OUTBOX.c.delivery_id,
            OUTBOX.c.payload,
            OUTBOX.c.attempts,
            OUTBOX.c.lane,
            OUTBOX.c.first_attempt_at,
        )
    )


class Claims(SqlBase):
    async def claim_outbox(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 20,
        lease: timedelta = lanes.CLAIM_LEASE,
        chained: Sequence[str] = (),
    ) -> list[OutboxItem]:
        """Claim due rows lane by lane (pending, or claimed by an owner whose lease ran out),
        round-robin across lanes so one deep lane cannot crowd the others out."""
        statement = claim_statement(tuple(chained), self.dialect == "postgresql")
        params = {"now": now, "until": now + lease, "claimer": claimer, "limit": limit}

        def work(conn: Connection) -> list[OutboxItem]:
            rows = conn.execute(statement, params).all()
            posting = [
                r.delivery_id
                for r in rows
                if r.kind == EffectKind.POST and r.delivery_id is not None
            ]
            if posting:
                ids, posting_now = DELIVERY.c.id.in_(posting), DeliveryState.POSTING.value
                moved(conn, DELIVERY, ids, posting_now, was=DeliveryState.PLANNED.value)
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
                        payload=payload_of(EffectKind(r.kind), r.payload),
                        attempts=r.attempts,
                        version=versions.get(r.elicitation_key),
                        lane=r.lane,
                        first_attempt_at=r.first_attempt_at,
                    )
                    for r in rows
                ),
                key=lambda i: i.id,
            )

        return await self._run(work, write=True)

    async def renew_claims(self, claimer: str, until: datetime) -> int:
        def work(conn: Connection) -> int:
            renewed = conn.execute(
                update(OUTBOX)
                .where(OUTBOX.c.state == CLAIMED, OUTBOX.c.claimed_by == claimer)
                .values(claimed_until=until)
                .returning(OUTBOX.c.id)
            )
            return len(renewed.all())

        return await self._run(work, write=True)

    async def set_pace(self, key: str, not_before: datetime) -> None:
        statement = self._dialect_insert(PACE).values(key=key, not_before=not_before)
        statement = statement.on_conflict_do_update(
            index_elements=["key"],
            set_={"not_before": statement.excluded.not_before},
            where=PACE.c.not_before < statement.excluded.not_before,
        )
        await self._execute(statement)

    async def lanes(self) -> list[LaneView]:
        state = OUTBOX.c.state
        query = (
            select(
                OUTBOX.c.lane,
                func.sum(case((state == EffectState.PENDING.value, 1), else_=0)).label("pending"),
                func.sum(case((state == CLAIMED, 1), else_=0)).label("claimed"),
                func.min(OUTBOX.c.created_at).label("oldest"),
            )
            .where(state.in_([EffectState.PENDING.value, CLAIMED]))
            .group_by(OUTBOX.c.lane)
            .order_by(OUTBOX.c.lane)
        )
        return await self._read_rows(
            query, lambda r: LaneView(r.lane, int(r.pending), int(r.claimed), r.oldest)
        )

    async def release_claims(self, claimer: str | None = None) -> int:
        """Give claimed rows back (at start with SQLite: the one process that held them is gone)."""

        def work(conn: Connection) -> int:
            held = OUTBOX.c.state == CLAIMED
            return released(conn, OUTBOX, held, claimer, state=EffectState.PENDING.value)

        return await self._run(work, write=True)

    async def next_outbox_at(self) -> datetime | None:
        """When the next pending row is due: its retry time (a post is claimed ahead of its
        lane's pace, so the pace does not count), or a write-back's sink's next probe."""
        paced, down = PACE.c.not_before, PACE.alias("down")
        is_post = OUTBOX.c.kind == EffectKind.POST.value
        is_writeback = OUTBOX.c.kind == EffectKind.WRITEBACK.value
        due_at = case(
            # A write-back to a sink that is down: when the sink is probed next.
            (
                and_(is_writeback, down.c.not_before > OUTBOX.c.next_attempt_at),
                down.c.not_before,
            ),
            else_=OUTBOX.c.next_attempt_at,
        )
        # In a paced lane, only its first post counts: the later ones wait behind it (one post
        # in flight; behind its retry, if it is waiting for one).
        first = OUTBOX.alias("first")
        firsts = (
            select(func.min(first.c.id))
            .where(
                first.c.kind == EffectKind.POST.value,
                first.c.state == EffectState.PENDING.value,
            )
            .group_by(first.c.lane)
        )
        query = (
            select(type_coerce(func.min(due_at), UtcDateTime()))
            .select_from(
                OUTBOX.outerjoin(
                    PACE, PACE.c.key == literal(PACE_PREFIX).concat(OUTBOX.c.lane)
                ).outerjoin(down, down.c.key == literal(DOWN_PREFIX).concat(OUTBOX.c.lane))
            )
            .where(
                OUTBOX.c.state == EffectState.PENDING.value,
                or_(not_(is_post), paced.is_(None), OUTBOX.c.id.in_(firsts)),
            )
        )

        def work(conn: Connection) -> datetime | None:
            value: datetime | None = conn.execute(query).scalar()
            return value

        return await self._run(work, write=False)

"""Routes admins made from chat, with who may decide their questions: the policy is stored as the
config names its keys (NULL: the defaults), so a row reads back as the route the admin typed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, insert, select, update
from sqlalchemy.engine import Connection

from bot.domain.model import ElicitationKey
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy
from bot.domain.records import ChatRoute, Subscribed
from bot.domain.redraw import redraw_writes
from store.sql.apply import Applier
from store.sql.base import PENDING, ROUTE, E, record_of

REDRAW_CHUNK = 500
"""Elicitations redrawn per transaction (each locks its rows only that long)."""


class ChatRoutes(Applier):
    async def add_chat_route(
        self,
        workspace: str,
        board: str | None,
        destination: str,
        by: str,
        now: datetime,
        policy: RoutePolicy | None = None,
    ) -> Subscribed:

        def work(conn: Connection) -> Subscribed:
            row = conn.execute(
                select(ROUTE.c.id, ROUTE.c.policy).where(*_same(workspace, board, destination))
            ).first()
            if row is None:
                stored = policy or DEFAULT_POLICY
                conn.execute(
                    insert(ROUTE).values(
                        workspace=workspace,
                        board=board,
                        destination=destination,
                        created_by=by,
                        created_at=now,
                        policy=policy_json(stored),
                    )
                )
                return Subscribed(changed=True, policy=stored)
            before = policy_of_json(row.policy)
            if policy is None or policy == before:
                return Subscribed(changed=False, policy=before)
            conn.execute(
                update(ROUTE).where(ROUTE.c.id == row.id).values(policy=policy_json(policy))
            )
            return Subscribed(changed=True, policy=policy, previous=before)

        return await self._run(work, write=True)

    async def remove_chat_route(self, workspace: str, board: str | None, destination: str) -> int:
        def work(conn: Connection) -> int:
            result = conn.execute(
                ROUTE.delete().where(*_same(workspace, board, destination)).returning(ROUTE.c.id)
            )
            return len(result.all())

        return await self._run(work, write=True)

    async def redraw(
        self, keys: Sequence[ElicitationKey], by: str, now: datetime, detail: Mapping[str, Any]
    ) -> int:
        """Queue an update of every posted chat copy of each of ``keys`` still pending (one
        coalesced with an update already waiting), with a ``redraw`` audit row; how many were
        still pending. Each elicitation row is locked first (the lock order), in key order."""
        writes = redraw_writes(by, detail)
        wanted = sorted(set(keys))

        def work(chunk: Sequence[str]) -> Callable[[Connection], int]:
            def run(conn: Connection) -> int:
                query = select(E.c.key).where(E.c.key.in_(chunk), E.c.status == PENDING)
                if self.dialect == "postgresql":
                    query = query.order_by(E.c.key).with_for_update()
                pending = conn.execute(query).scalars().all()
                for key in pending:
                    self._write(conn, key, writes, now)
                return len(pending)

            return run

        done = 0
        for start in range(0, len(wanted), REDRAW_CHUNK):
            done += await self._run(work(wanted[start : start + REDRAW_CHUNK]), write=True)
        return done

    async def chat_routes(self) -> list[ChatRoute]:
        return await self._read_rows(select(ROUTE).order_by(ROUTE.c.id), chat_route_of)


def _same(workspace: str, board: str | None, destination: str) -> tuple[ColumnElement[bool], ...]:
    return (
        ROUTE.c.workspace == workspace,
        ROUTE.c.destination == destination,
        ROUTE.c.board.is_(None) if board is None else ROUTE.c.board == board,
    )


def policy_json(policy: RoutePolicy) -> dict[str, Any] | None:
    if policy == DEFAULT_POLICY:
        return None
    return {
        "approvers": None if policy.approvers is None else list(policy.approvers),
        "quorum": policy.quorum,
        "approve_on": None if policy.approve_on is None else list(policy.approve_on),
        "anyone_may_reject": policy.anyone_may_reject,
    }


def policy_of_json(value: dict[str, Any] | None) -> RoutePolicy:
    if not value:
        return DEFAULT_POLICY
    approvers, approve_on = value.get("approvers"), value.get("approve_on")
    return RoutePolicy(
        approvers=None if approvers is None else tuple(approvers),
        quorum=int(value.get("quorum", 1)),
        approve_on=None if approve_on is None else tuple(approve_on),
        anyone_may_reject=bool(value.get("anyone_may_reject", False)),
    )


def chat_route_of(row: Any) -> ChatRoute:
    return record_of(ChatRoute, row, policy=policy_of_json(row.policy))

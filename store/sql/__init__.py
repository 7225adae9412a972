"""The SQL store (SQLite WAL or PostgreSQL), implementing :class:`bot.domain.store.Store`; what it
writes is decided in :mod:`bot.domain.planning` and applied by :mod:`store.sql.apply` in the
transaction that read the state it was decided on.

Exactly-once by construction:
- intake dedupe: ``INSERT … ON CONFLICT DO NOTHING`` on the inbound id and on the elicitation key;
- the first answer: one conditional ``UPDATE … WHERE status='pending'`` (and the version the
  judgement read) checked through ``RETURNING`` (psycopg's async rowcount is -1 for these), plus
  a unique ``answer`` row in the same transaction;
- claims of outbox rows and due deadlines: ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP
  LOCKED) RETURNING`` on PostgreSQL; the same statement without the locking clause on SQLite,
  whose writers are serialised (every transaction starts with ``BEGIN IMMEDIATE``);
- a deadline's effects are written in the transaction that marks it fired, fenced on the claim.

Lock order on PostgreSQL: an elicitation row before its deadline, delivery and outbox rows, in
every transaction that writes more than one of them (answers, revisions, closes, claims, firing).
"""

from __future__ import annotations

from typing import Self

from store.db import make_engine
from store.sql.answers import Answers
from store.sql.base import DEADLINE, DELIVERY, OUTBOX
from store.sql.chat_routes import ChatRoutes
from store.sql.claims import Claims
from store.sql.crypto import Crypto
from store.sql.deadlines import Deadlines
from store.sql.intake import Intake
from store.sql.leases import Leases
from store.sql.outbox import Outbox
from store.sql.raw import Raw
from store.sql.reads import Reads
from store.sql.votes import Votes

__all__ = ["DEADLINE", "DELIVERY", "OUTBOX", "SqlStore"]
"""The tables too: benchmarks read them directly."""


class SqlStore(
    Intake, Answers, Votes, Outbox, Claims, Deadlines, Reads, ChatRoutes, Leases, Raw, Crypto
):
    """SQLite (WAL, one writer at a time) or PostgreSQL, chosen by URL."""

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(make_engine(url))

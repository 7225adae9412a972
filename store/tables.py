"""SQLModel tables: the persistence shape (not domain types). Alembic migrations mirror these."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    LargeBinary,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

# SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets BIGINT.
AutoId = BigInteger().with_variant(Integer(), "sqlite")


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC in and out on every backend (SQLite keeps naive UTC text, ordered correctly)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            msg = "naive datetime given to the store; use aware UTC"
            raise ValueError(msg)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _ts(*, nullable: bool = True, index: bool = False) -> Any:
    return Field(default=None, sa_column=Column(UtcDateTime(), nullable=nullable, index=index))


def _json(*, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(JSON, nullable=nullable))


class ElicitationRow(SQLModel, table=True):
    """One elicitation. ``status`` moves pending -> answered | expired | cancelled exactly once."""

    __tablename__ = "elicitation"

    key: str = Field(primary_key=True, max_length=400)
    source: str = Field(max_length=40)
    source_id: str = Field(max_length=360)
    workspace: str | None = Field(default=None, max_length=200, index=True)
    board_id: str | None = Field(default=None, max_length=200)
    status: str = Field(max_length=16, index=True)
    version: int = 1
    display_hash: str = Field(max_length=64)
    payload: dict[str, Any] = _json(nullable=False)
    route: dict[str, Any] = _json(nullable=False)
    answer: dict[str, Any] | None = _json()
    expires_at: datetime | None = _ts()
    subject_expires_at: datetime | None = _ts()
    created_at: datetime = _ts(nullable=False)
    updated_at: datetime = _ts(nullable=False)
    closed_at: datetime | None = _ts()
    claim_by: str | None = Field(default=None, max_length=300)
    """Who said "I'm on it" (identity key); the claim holds until ``claim_until``."""
    claim_name: str | None = Field(default=None, max_length=200)
    claim_until: datetime | None = _ts()
    writeback: dict[str, Any] | None = _json()
    """Where the outcome stands upstream (:class:`bot.domain.records.Writeback`)."""

    __table_args__ = (UniqueConstraint("source", "source_id", name="uq_elicitation_source_id"),)


class InboundRow(SQLModel, table=True):
    """An inbound id already processed: CloudEvents (source, id), Slack or Matrix event ids."""

    __tablename__ = "inbound"

    channel: str = Field(primary_key=True, max_length=300)
    """Where the id comes from: ``ce:<cloudevents source>``, ``slack``, ``matrix``..."""
    inbound_id: str = Field(primary_key=True, max_length=300)
    elicitation_key: str | None = Field(default=None, max_length=400)
    received_at: datetime = _ts(nullable=False)


class DeliveryRow(SQLModel, table=True):
    """One copy of an elicitation in one channel."""

    __tablename__ = "delivery"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    elicitation_key: str = Field(max_length=400, index=True)
    destination: str = Field(max_length=300)
    position: int
    """Order in the route's destinations (follow-up fallback goes n -> n+1)."""
    purpose: str = Field(default="primary", max_length=16)
    """``primary`` or ``escalation``."""
    state: str = Field(max_length=16)
    """planned -> posting -> posted | failed; ``waiting`` for a later follow-up (-> planned, or
    ``skipped`` when the elicitation closes first)."""
    ref: dict[str, Any] | None = _json()
    ref_key: str | None = Field(default=None, max_length=300, index=True)
    """``ref["key"]``: finds the elicitation of a message people react to or reply under."""
    error: str | None = None
    posted_at: datetime | None = _ts()
    created_at: datetime = _ts(nullable=False)
    detail: dict[str, Any] | None = _json()
    """An escalation copy's mentions and the originals it links to."""

    __table_args__ = (
        UniqueConstraint("elicitation_key", "destination", "purpose", name="uq_delivery_dest"),
    )


class DeadlineRow(SQLModel, table=True):
    """A due time held by the database; claimed atomically before it acts."""

    __tablename__ = "deadline"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    elicitation_key: str = Field(max_length=400, index=True)
    kind: str = Field(max_length=16)
    """remind, escalate, followup, expire, subject_expired, claim_lapse."""
    due_at: datetime = _ts(nullable=False)
    state: str = Field(default="pending", max_length=16)
    """pending -> fired | cancelled | deferred (held by a claim: a new row takes its place)."""
    claimed_by: str | None = Field(default=None, max_length=64)
    claimed_until: datetime | None = _ts()
    fired_at: datetime | None = _ts()
    detail: dict[str, Any] | None = _json()

    __table_args__ = (
        Index("ix_deadline_due", "state", "due_at"),
        UniqueConstraint("elicitation_key", "kind", "due_at", name="uq_deadline"),
    )


class AnswerRow(SQLModel, table=True):
    """Second line of defence for first-answer-wins: one row per elicitation, ever."""

    __tablename__ = "answer"

    elicitation_key: str = Field(primary_key=True, max_length=400)
    respondent: str = Field(max_length=300)
    via: str = Field(max_length=300)
    at: datetime = _ts(nullable=False)
    body: dict[str, Any] = _json(nullable=False)


class VoteRow(SQLModel, table=True):
    """One person's approving vote toward a route's quorum (answer rule 9), on one revision and
    digest of the approval subject (``-1`` and ``""`` when the question has none)."""

    __tablename__ = "vote"

    elicitation_key: str = Field(primary_key=True, max_length=400)
    person: str = Field(primary_key=True, max_length=300)
    revision: int = Field(primary_key=True)
    digest: str = Field(primary_key=True, max_length=200)
    respondent: str = Field(max_length=300)
    display_name: str | None = Field(default=None, max_length=300)
    option_id: str = Field(max_length=300)
    via: str = Field(max_length=300)
    at: datetime = _ts(nullable=False)
    needed: int = 1
    """The route's quorum when the vote was given (the copies' tally counts to it)."""


class RefusalToldRow(SQLModel, table=True):
    """A refusal told once per question and person (rule 9's "only the approvers"): its first
    telling. A later attempt by the same actor finds the row and is not told it again."""

    __tablename__ = "refusal_told"

    elicitation_key: str = Field(primary_key=True, max_length=400)
    actor: str = Field(primary_key=True, max_length=300)
    code: str = Field(primary_key=True, max_length=40)
    at: datetime = _ts(nullable=False)


class AuditRow(SQLModel, table=True):
    """Every intake, answer, refusal and system decision. Never holds a secret."""

    __tablename__ = "audit"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    elicitation_key: str = Field(max_length=400, index=True)
    at: datetime = _ts(nullable=False)
    action: str = Field(max_length=32)
    actor: str | None = Field(default=None, max_length=300)
    code: str | None = Field(default=None, max_length=40)
    detail: dict[str, Any] | None = _json()


class OutboxRow(SQLModel, table=True):
    """An effect to carry out: post, update, notify, writeback. Claimed, then done or failed."""

    __tablename__ = "outbox"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    elicitation_key: str = Field(max_length=400, index=True)
    kind: str = Field(max_length=16)
    target: str = Field(max_length=300)
    delivery_id: int | None = None
    payload: dict[str, Any] | None = _json()
    state: str = Field(default="pending", max_length=16)
    """pending -> claimed -> done | failed (claimed goes back to pending on a transient error)."""
    attempts: int = 0
    next_attempt_at: datetime = _ts(nullable=False)
    claimed_by: str | None = Field(default=None, max_length=64)
    claimed_until: datetime | None = _ts()
    last_error: str | None = None
    created_at: datetime = _ts(nullable=False)
    done_at: datetime | None = _ts()
    lane: str = Field(default="", max_length=320)
    """Where it goes (``chat:<destination>``, ``sink:<source>``): lanes are dispatched apart."""
    first_attempt_at: datetime | None = _ts()
    """When it was first claimed: an uncertain post looks for itself from then on."""

    __table_args__ = (
        Index("ix_outbox_due", "state", "next_attempt_at"),
        Index("ix_outbox_lane", "lane", "state"),
        # A copy's pending update is looked up by its delivery (updates are coalesced per copy).
        Index("ix_outbox_delivery", "delivery_id"),
    )


class RouteRow(SQLModel, table=True):
    """A route made by an admin from chat (``subscribe``); used beside the config file's routes."""

    __tablename__ = "chat_route"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    workspace: str = Field(max_length=200)
    board: str | None = Field(default=None, max_length=200)
    destination: str = Field(max_length=300)
    created_by: str = Field(max_length=300)
    created_at: datetime = _ts(nullable=False)
    policy: dict[str, Any] | None = _json()
    """Who may decide (``subscribe … approvers … quorum …``): the rule 9 keys by their config
    names; NULL: the defaults."""

    __table_args__ = (UniqueConstraint("workspace", "board", "destination", name="uq_chat_route"),)


class KeyValueRow(SQLModel, table=True):
    """Small durable values (e.g. a sync token)."""

    __tablename__ = "kv"

    key: str = Field(primary_key=True, max_length=200)
    value: str


class PaceRow(SQLModel, table=True):
    """A shared rate: nothing on ``key`` goes out before ``not_before`` (every replica reads it)."""

    __tablename__ = "pace"

    key: str = Field(primary_key=True, max_length=400)
    not_before: datetime = _ts(nullable=False)


class LeaseRow(SQLModel, table=True):
    """Single-owner work (the Matrix connection, a poller): held by one process until ``until``."""

    __tablename__ = "lease"

    name: str = Field(primary_key=True, max_length=200)
    holder: str = Field(max_length=200)
    until: datetime = _ts(nullable=False)
    since: datetime = _ts(nullable=False)


class RawEventRow(SQLModel, table=True):
    """An inbound chat event recorded before it is acknowledged, handled after (and again after a
    restart while ``handled_at`` is empty)."""

    __tablename__ = "raw_event"

    id: int | None = Field(default=None, sa_column=Column(AutoId, primary_key=True))
    channel: str = Field(max_length=40)
    dedupe_key: str = Field(max_length=400)
    body: dict[str, Any] = _json(nullable=False)
    received_at: datetime = _ts(nullable=False)
    handled_at: datetime | None = _ts()

    __table_args__ = (
        UniqueConstraint("channel", "dedupe_key", name="uq_raw_event"),
        Index("ix_raw_event_open", "channel", "handled_at"),
    )


class MatrixCryptoRow(SQLModel, table=True):
    """A Matrix device's end-to-end crypto state (nio's store, pickled with the pickle key, which is
    never stored); ``owner``: ``<user id>|<device id>``; ``version`` counts saves. Never log it."""

    __tablename__ = "matrix_crypto"

    owner: str = Field(primary_key=True, max_length=400)
    blob: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    updated_at: datetime = _ts(nullable=False)
    version: int = 1

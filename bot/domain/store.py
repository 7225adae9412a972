"""The store port: what the core and its edges need of persistence, and nothing about how it is
kept (``store.sql.SqlStore``; ``tests/contract`` runs on both engines). Whatever the backend:
- intake is all or nothing per batch, deduplicated on (channel, inbound id) and on the key;
- the first valid answer wins once (a conditional write), and its effects are written with it;
- outbox rows and due deadlines are claimed by one claimer at a time under a lease, and every
  completion is fenced on the claim: a claimer whose lease ran out changes nothing;
- what the domain decides (intake plans, firings, fall-backs) is written in the transaction that
  read the state it was decided on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.domain.deadlines import FireContext, Firing
from bot.domain.model import Answer, ElicitationKey, Status
from bot.domain.policy import RoutePolicy
from bot.domain.ports import IntakeOutcome
from bot.domain.quorum import Vote
from bot.domain.records import (
    AuditEntry,
    ChatRoute,
    DeadlineView,
    DeliveryView,
    DueDeadline,
    EffectView,
    FiredDeadline,
    IntakeItem,
    LaneView,
    LeaseView,
    OutboxItem,
    RawEvent,
    RecordResult,
    StoredElicitation,
    Subscribed,
    Timeline,
    Writeback,
)
from bot.domain.refs import MessageRef


class ElicitationReads(Protocol):
    async def get(self, key: ElicitationKey) -> StoredElicitation | None: ...

    async def get_many(
        self, keys: Sequence[ElicitationKey]
    ) -> dict[ElicitationKey, StoredElicitation]: ...

    async def resolve_key(self, ident: str) -> ElicitationKey | None:
        """The key for ``<source>:<id>`` or a bare source id (None: unknown or ambiguous)."""
        ...

    async def key_for_message(self, ref_key: str) -> ElicitationKey | None:
        """The elicitation whose delivered message has this ref key."""
        ...

    async def list_elicitations(
        self, *, status: str | None = None, after: str | None = None, limit: int = 50
    ) -> list[StoredElicitation]:
        """Newest first; ``after`` is the key of the last item of the previous page."""
        ...

    async def deliveries(self, key: ElicitationKey) -> list[DeliveryView]: ...

    async def delivery(self, delivery_id: int) -> DeliveryView | None: ...

    async def deadlines(self, key: ElicitationKey) -> list[DeadlineView]: ...

    async def audit(self, key: ElicitationKey) -> list[AuditEntry]: ...

    async def outbox(self, key: ElicitationKey | None = None) -> list[EffectView]: ...

    async def count(self, table: str) -> int:
        """Rows of one kind: elicitation, inbound, delivery, outbox, answer, audit, deadline."""
        ...

    async def timelines(self, keys: Sequence[ElicitationKey]) -> dict[ElicitationKey, Timeline]: ...


class ChatRoutes(Protocol):
    async def add_chat_route(
        self,
        workspace: str,
        board: str | None,
        destination: str,
        by: str,
        now: datetime,
        policy: RoutePolicy | None = None,
    ) -> Subscribed:
        """``policy`` replaces an existing route's policy whole; None keeps it."""
        ...

    async def remove_chat_route(
        self, workspace: str, board: str | None, destination: str
    ) -> int: ...

    async def chat_routes(self) -> list[ChatRoute]: ...

    async def redraw(
        self, keys: Sequence[ElicitationKey], by: str, now: datetime, detail: Mapping[str, Any]
    ) -> int:
        """Queue an update of every posted chat copy of each of ``keys`` still pending, with a
        ``redraw`` audit row (``by``, ``detail``); how many were still pending."""
        ...


class Values(Protocol):
    """Small durable values (a Matrix sync token, a poller's cursor)."""

    async def get_value(self, key: str) -> str | None: ...

    async def set_value(self, key: str, value: str) -> None: ...


class Pacing(Protocol):
    """A rate shared by every replica (Slack's per-channel posts, its chat.update budget)."""

    async def reserve_slot(self, key: str, interval: float, now: datetime) -> datetime:
        """Take the next free moment on ``key`` (never before ``now``) and hold the following
        ``interval`` seconds for it: returns when the caller may go."""
        ...

    async def question_claimed(self, lane: str, now: datetime) -> bool:
        """Whether a post of ``lane`` is claimed now by any replica (a question on its way,
        waiting for its channel's slot) or due to be claimed: a thread note in that channel
        gives way to it."""
        ...


class Leases(Protocol):
    """Single-owner work: one holder at a time; a lease not renewed runs out and moves."""

    async def acquire_lease(self, name: str, holder: str, now: datetime, ttl: timedelta) -> bool:
        """Take ``name`` if it is free or ran out, or renew it if ``holder`` has it."""
        ...

    async def release_lease(self, name: str, holder: str) -> None: ...

    async def leases(self) -> list[LeaseView]: ...


class RawEvents(Protocol):
    """Inbound chat events recorded before the ack (durable), marked handled after."""

    async def record_raw(
        self, channel: str, dedupe_key: str, body: dict[str, object], now: datetime
    ) -> int | None:
        """Record once; None when (channel, dedupe_key) was recorded before."""
        ...

    async def handled_raw(self, raw_id: int, now: datetime) -> None: ...

    async def open_raw(self, channel: str, *, limit: int = 100) -> list[RawEvent]:
        """Recorded and not handled (oldest first): what a restart handles again."""
        ...

    async def purge_raw(self, handled_before: datetime) -> int:
        """Forget events handled before then (their dedupe keys with them); how many."""
        ...


class CryptoStates(Protocol):
    """A Matrix device's end-to-end crypto state: an opaque blob, encrypted with a key the store
    never sees, that survives restarts and moves with the Matrix lease. Never logged."""

    async def save_crypto(
        self, owner: str, blob: bytes, now: datetime, *, lease: tuple[str, str] | None = None
    ) -> bool:
        """Replace ``owner``'s blob (``<user id>|<device id>``) whole; True when written. With
        ``lease`` = (name, holder): only while that holder holds it at ``now``, so a holder that
        lost the lease cannot roll its successor's state back."""
        ...

    async def load_crypto(self, owner: str) -> bytes | None: ...


class Store(
    ElicitationReads, ChatRoutes, Values, Pacing, Leases, RawEvents, CryptoStates, Protocol
):
    single_process: bool
    """True when one process owns the store (a SQLite file): claims found at start are ours."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...

    # -- intake and answers ----------------------------------------------------------------

    async def intake(self, items: Sequence[IntakeItem], now: datetime) -> list[IntakeOutcome]:
        """Store a batch: all of it or none of it, with what the domain plans for each."""
        ...

    async def first_time(self, channel: str, inbound_id: str, now: datetime) -> bool:
        """Record an inbound event id; False if it was seen before."""
        ...

    async def record_answer(
        self,
        key: ElicitationKey,
        answer: Answer,
        now: datetime,
        *,
        approving: bool,
        audit: dict[str, object],
        version: int | None = None,
    ) -> RecordResult:
        """Record the first valid answer while pending, not expired (nor its subject, for an
        ``approving`` one) and still at ``version`` when given (anything in between makes it
        lose: judge again). The loser learns the status and answer as they are."""
        ...

    async def record_vote(
        self,
        key: ElicitationKey,
        vote: Vote,
        now: datetime,
        *,
        version: int,
        audit: dict[str, object],
    ) -> bool:
        """Store an approving vote toward the route's quorum while the elicitation is pending,
        not expired and still at ``version``; False: something changed, judge again."""
        ...

    async def close_elicitation(
        self,
        key: ElicitationKey,
        status: Status,
        now: datetime,
        *,
        answer: Answer | None,
        audit: dict[str, object],
    ) -> bool: ...

    async def record_refusal(
        self,
        key: ElicitationKey,
        actor: str,
        code: str,
        now: datetime,
        detail: dict[str, object],
        *,
        once: bool = False,
    ) -> bool:
        """An audit row for a refused attempt; True: tell it. With ``once``, False when ``code`` was
        told ``actor`` on ``key`` before, on any replica (its audit row says ``repeat``)."""
        ...

    async def claim(
        self, key: ElicitationKey, by: str, name: str | None, until: datetime, now: datetime
    ) -> bool: ...

    # -- outbox ----------------------------------------------------------------------------

    async def claim_outbox(
        self,
        now: datetime,
        claimer: str,
        *,
        limit: int = 20,
        lease: timedelta = ...,
        chained: Sequence[str] = (),
    ) -> list[OutboxItem]:
        """Due rows, lane by lane (:mod:`bot.domain.lanes`); a lane starting with one of the
        ``chained`` prefixes may have ``POST_CHAIN`` posts in flight (carried in order)."""
        ...

    async def complete_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        now: datetime,
        *,
        ref: MessageRef | None = None,
        seed: bool = False,
    ) -> bool:
        """Done (fenced on our claim). A post records its ref and what follows from it; with
        ``seed`` (its platform answers by reaction) a pending copy's ``seed`` row is queued in
        the same transaction."""
        ...

    async def complete_many(
        self,
        done: Sequence[tuple[OutboxItem, MessageRef | None]],
        claimer: str,
        now: datetime,
        *,
        seed: bool = False,
    ) -> list[bool]: ...

    async def retry_outbox(
        self,
        item: OutboxItem,
        claimer: str,
        error: str,
        at: datetime,
        *,
        refresh_at: datetime | None = None,
    ) -> None:
        """Back to pending, due ``at`` (fenced on our claim); ``refresh_at`` (now): every posted
        copy is rewritten too (a write-back taking longer: the copies say "Sending…")."""
        ...

    async def fail_outbox(
        self, item: OutboxItem, claimer: str, error: str, now: datetime
    ) -> bool: ...

    async def hold_sink(self, lane: str, now: datetime) -> int:
        """A sink is down: its write-backs not tried yet are marked waiting and their copies
        rewritten once (they say "Sending…"); returns how many."""
        ...

    async def drop_outbox(self, item: OutboxItem, claimer: str, what: str, now: datetime) -> bool:
        """Done without being carried out (fenced on our claim): a ``what`` (reminder,
        escalation) whose question closed before its turn; an escalation copy's delivery is
        ``skipped``; one audit row ``<what>_dropped``."""
        ...

    async def refuse_writeback(
        self, item: OutboxItem, claimer: str, error: str, now: datetime, *, reopen: bool
    ) -> Writeback | None:
        """A write-back the upstream refused for good: the row fails and, in one transaction,
        :func:`bot.domain.planning.writeback_writes` is applied (reopen or mark failed, every copy
        rewritten, the person told, one audit row); returns what was settled, None when the row
        was no longer ours or its round no longer the one sending."""
        ...

    async def release_claims(self, claimer: str | None = None) -> int: ...

    async def renew_claims(self, claimer: str, until: datetime) -> int:
        """The heartbeat: every outbox row ``claimer`` holds is leased until ``until``."""
        ...

    async def set_pace(self, key: str, not_before: datetime) -> None:
        """Nothing paced on ``key`` (a lane's posts) is claimed before ``not_before``."""
        ...

    async def lanes(self) -> list[LaneView]:
        """Lanes with rows waiting or in flight (for ``/metrics``)."""
        ...

    async def next_outbox_at(self) -> datetime | None: ...

    # -- deadlines -------------------------------------------------------------------------

    async def claim_deadlines(
        self, now: datetime, claimer: str, *, limit: int = 50, lease: timedelta = ...
    ) -> list[DueDeadline]: ...

    async def fire_deadlines(
        self,
        due: Sequence[DueDeadline],
        claimer: str,
        now: datetime,
        decide: Callable[[FireContext], Firing],
    ) -> list[FiredDeadline]: ...

    async def mark_fired(self, deadline_id: int, claimer: str, now: datetime) -> bool: ...

    async def next_deadline_at(self, now: datetime) -> datetime | None: ...

    async def release_deadline_claims(self, claimer: str | None = None) -> int: ...

    def watch_deadlines(self, watcher: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``watcher(earliest due time)`` after a write of ours plans deadlines."""
        ...

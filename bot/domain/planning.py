"""What each write of the store does, pure: from the state the store read in its transaction to a
:class:`~bot.domain.writes.WriteSet` it applies there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot.domain import deadlines as dl
from bot.domain.deadlines import Copy, FireContext, Firing
from bot.domain.described import describe_answer
from bot.domain.model import Answer, Elicitation, ElicitationKey, Route, Status
from bot.domain.payloads import NotifyPayload
from bot.domain.records import (
    DeadlineKind,
    DeliveryState,
    EffectKind,
    FireOutcome,
    NoticeKind,
    StoredElicitation,
    Writeback,
    WritebackState,
)
from bot.domain.refs import InboxRef
from bot.domain.views import source_name
from bot.domain.wording import one_line, sentence
from bot.domain.writes import (
    SYSTEM,
    Activation,
    AuditWrite,
    Close,
    CopyUpdate,
    Effect,
    NewCopy,
    PlannedDeadline,
    Settle,
    WriteSet,
)

__all__ = [
    "FiringWrites",
    "Plan",
    "PlannedDeadline",
    "PlannedDelivery",
    "activation",
    "claim_writes",
    "close_writes",
    "display_hash",
    "fall_back",
    "firing_writes",
    "intake_writes",
    "needs_copies",
    "plan",
    "plan_deadlines",
    "plan_deliveries",
    "posted_writes",
    "revision_writes",
    "sending_writeback",
    "writeback_round",
    "writeback_writes",
]


@dataclass(frozen=True)
class PlannedDelivery:
    destination: str
    position: int
    post_now: bool
    """False: it waits for the follow-up of the delivery before it."""


@dataclass(frozen=True)
class Plan:
    deliveries: tuple[PlannedDelivery, ...]
    deadlines: tuple[PlannedDeadline, ...]


@dataclass(frozen=True)
class FiringWrites:
    """What a fired deadline writes, and what the firing amounts to."""

    writes: WriteSet
    outcome: FireOutcome
    """``fired``, ``deferred``, ``waiting``, ``skipped`` or ``idle``; a close the store finds
    already done is ``idle``."""
    again_at: datetime | None = None
    """``waiting``: the store puts the row back, pending, due then, with ``again_detail``."""
    again_detail: Mapping[str, Any] | None = None


def plan_deliveries(route: Route) -> tuple[PlannedDelivery, ...]:
    """With a follow-up only the first destination is posted now; without, every one is."""
    return tuple(
        PlannedDelivery(
            destination, position, post_now=position == 0 or route.followup_seconds == 0
        )
        for position, destination in enumerate(dict.fromkeys(route.destinations))
    )


def plan_deadlines(e: Elicitation) -> tuple[PlannedDeadline, ...]:
    """Remind, escalate and expire from the elicitation (follow-ups wait for an accepted post)."""
    d = e.deadlines
    planned = [
        PlannedDeadline(kind, at)
        for kind, at in (
            (DeadlineKind.REMIND, d.remind_at),
            (DeadlineKind.ESCALATE, d.escalate_at),
            (DeadlineKind.EXPIRE, d.expires_at),
        )
        if at is not None
    ]
    return tuple(sorted(planned, key=lambda p: p.due_at))


def plan(e: Elicitation, route: Route) -> Plan:
    return Plan(deliveries=plan_deliveries(route), deadlines=plan_deadlines(e))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
"""``json.dumps(value, sort_keys=True, separators=(",", ":"))``, without building an encoder
per call."""


def display_hash(e: Elicitation) -> str:
    """A digest of what a person sees: when it changes, every delivered copy is updated."""
    return hashlib.sha256(_CANONICAL(e.display_fields()).encode()).hexdigest()


# --------------------------------------------------------------------------- intake


def intake_writes(
    e: Elicitation, route: Route, now: datetime, audit: Mapping[str, Any] | None = None
) -> WriteSet:
    """A new elicitation: its copies, its deadlines, or (already expired) its close. The web inbox
    copy is posted the moment the intake commits (the inbox reads the store); past its expiry on
    arrival, it is closed at once with the timeout decision and no copy ever posted."""
    audits = (AuditWrite("intake", detail=audit),)
    planned = plan_deliveries(route)
    if dl.expired_at_intake(e, now):
        skipped = tuple(
            NewCopy(p.destination, p.position, dl.PRIMARY, DeliveryState.SKIPPED) for p in planned
        )
        return WriteSet(audits=audits, copies=skipped, close=_timeout(e, now, "expired at intake"))
    states = [
        DeliveryState.POSTED
        if _inbox(p.destination) and p.post_now
        else DeliveryState.PLANNED
        if p.post_now
        else DeliveryState.WAITING
        for p in planned
    ]
    copies = tuple(
        Copy(-1, p.destination, p.position, dl.PRIMARY, state)
        for p, state in zip(planned, states, strict=True)
    )
    new: list[NewCopy] = []
    for c in copies:
        inbox = c.state is DeliveryState.POSTED
        new.append(
            NewCopy(
                c.destination,
                c.position,
                dl.PRIMARY,
                c.state,
                ref=InboxRef(e.key) if inbox else None,
                posted=inbox,
                post=c.state is DeliveryState.PLANNED,
                followup_at=dl.followup_due(route, c, copies, now) if inbox else None,
            )
        )
    return WriteSet(
        audits=audits,
        copies=tuple(new),
        deadlines=(*plan_deadlines(e), *dl.subject_deadlines(e)),
    )


def revision_writes(
    e: Elicitation, now: datetime, audit: Mapping[str, Any] | None = None
) -> WriteSet:
    """The same elicitation, and what people see changed (the store has written it): its pending
    intake deadlines are planned again, every copy is updated, and a revision to an expiry already
    past closes it at once."""
    return WriteSet(
        audits=(AuditWrite("revised", detail=audit),),
        replace=frozenset(dl.PLANNED_AT_INTAKE),
        deadlines=(*plan_deadlines(e), *dl.subject_deadlines(e)),
        refresh=True,
        close=_timeout(e, now, "expired at revision") if dl.expired_at_intake(e, now) else None,
    )


def close_writes(
    status: Status, answer: Answer | None, detail: Mapping[str, Any] | None
) -> WriteSet:
    """Expire or cancel (a system decision may come with an answer)."""
    return WriteSet(close=Close(status, answer, detail))


def claim_writes(by: str, until: datetime) -> WriteSet:
    """Someone is on it (the store has recorded the claim): every copy shows it, and a
    ``claim_lapse`` deadline updates them again when it runs out."""
    return WriteSet(
        audits=(AuditWrite("claimed", by, None, {"until": until.isoformat()}),),
        replace=frozenset({DeadlineKind.CLAIM_LAPSE}),
        deadlines=(PlannedDeadline(DeadlineKind.CLAIM_LAPSE, until),),
        refresh=True,
    )


# --------------------------------------------------------------------------- copies


def activation(
    key: ElicitationKey,
    route: Route,
    copy: Copy,
    copies: Sequence[Copy],
    now: datetime,
    audit: AuditWrite | None = None,
) -> Activation:
    """A waiting destination's turn: a post, or (the web inbox) posted at once with its
    follow-up running from now."""
    if _inbox(copy.destination):
        return Activation(
            copy.id,
            copy.destination,
            DeliveryState.POSTED,
            ref=InboxRef(key),
            posted=True,
            followup_at=dl.followup_due(route, copy, copies, now),
            audit=audit,
        )
    return Activation(copy.id, copy.destination, DeliveryState.PLANNED, post=True, audit=audit)


def posted_writes(
    route: Route,
    *,
    delivery_id: int,
    destination: str,
    pending: bool,
    stale: bool,
    copies: Sequence[Copy],
    now: datetime,
    seed: bool = False,
) -> WriteSet:
    """A post the platform accepted: ``stale`` (answered or revised meanwhile) brings the copy up to
    date; while ``pending`` the next destination's follow-up is planned (``copies``: read when
    :func:`needs_copies` says so), and with ``seed`` its reactions are seeded next."""
    updates = (CopyUpdate(delivery_id, destination),) if stale else ()
    seeds = (Effect(EffectKind.SEED, destination, delivery_id),) if seed and pending else ()
    accepted = next((c for c in copies if c.id == delivery_id), None)
    due = (
        dl.followup_due(route, accepted, copies, now) if pending and accepted is not None else None
    )
    followup = (
        ()
        if due is None
        else (PlannedDeadline(DeadlineKind.FOLLOWUP, due, {"after": delivery_id}),)
    )
    return WriteSet(updates=updates, deadlines=followup, effects=seeds)


def needs_copies(route: Route, *, pending: bool) -> bool:
    """Whether :func:`posted_writes` looks at the copies (a store may skip reading them)."""
    return pending and route.followup_seconds > 0


def fall_back(
    key: ElicitationKey, route: Route, copies: Sequence[Copy], failed_id: int, now: datetime
) -> WriteSet:
    """A primary copy failed for good: the next waiting destination gets it now."""
    failed = next((c for c in copies if c.id == failed_id), None)
    if failed is None or failed.purpose != dl.PRIMARY:
        return WriteSet()
    nxt = dl.next_waiting(copies)
    if nxt is None:
        return WriteSet()
    audit = AuditWrite("fallback", detail={"from": failed.destination, "to": nxt.destination})
    return WriteSet(activations=(activation(key, route, nxt, copies, now, audit),))


# --------------------------------------------------------------------------- firing


def firing_writes(ctx: FireContext, firing: Firing, deadline_id: int) -> FiringWrites:
    """What a fired deadline writes: its audit, then a wait for a copy on its way (the row is due
    again a little later), a deferral (a new row at the claim's lapse takes its place), a skip
    (the audit alone: nothing to send it to), a close, or its notices, escalation copies,
    activation and refresh."""
    key = ctx.elicitation.key
    audits = (
        ()
        if firing.audit is None
        else (
            AuditWrite(
                firing.audit, SYSTEM, None, {"due_at": ctx.due_at.isoformat(), **firing.detail}
            ),
        )
    )
    if firing.wait_until is not None:
        since = firing.waiting_since or ctx.due_at
        detail = {**(ctx.detail or {}), dl.WAITING_SINCE: since.isoformat()}
        return FiringWrites(WriteSet(audits=audits), FireOutcome.WAITING, firing.wait_until, detail)
    if firing.defer_to is not None:
        again = PlannedDeadline(ctx.kind, firing.defer_to, {"deferred": deadline_id})
        return FiringWrites(WriteSet(audits=audits, deadlines=(again,)), FireOutcome.DEFERRED)
    if firing.skipped:
        return FiringWrites(WriteSet(audits=audits), FireOutcome.SKIPPED)
    if firing.close is not None:
        close = Close(firing.close.status, firing.close.answer, {"deadline": ctx.kind.value})
        return FiringWrites(WriteSet(audits=audits, close=close), FireOutcome.FIRED)
    effects = tuple(
        Effect(
            EffectKind.NOTIFY,
            n.destination,
            n.delivery_id,
            NotifyPayload(NoticeKind.REMINDER, "", n.text, n.thread, n.mentions),
        )
        for n in firing.notices
    )
    escalations = tuple(escalation_copy(key, post) for post in firing.escalations)
    activations = (
        ()
        if firing.activate is None
        else (activation(key, ctx.route, firing.activate, ctx.copies, ctx.now),)
    )
    acted = bool(firing.notices or firing.escalations or firing.activate or firing.refresh)
    writes = WriteSet(
        audits=audits,
        copies=escalations,
        activations=activations,
        effects=effects,
        refresh=firing.refresh,
        new_version=firing.refresh,
    )
    return FiringWrites(writes, FireOutcome.FIRED if acted else FireOutcome.IDLE)


def escalation_copy(key: ElicitationKey, post: dl.EscalationPost) -> NewCopy:
    """A new, answerable copy in an escalation destination (the store adds it once)."""
    inbox = _inbox(post.destination)
    return NewCopy(
        post.destination,
        post.position,
        dl.ESCALATION,
        DeliveryState.POSTED if inbox else DeliveryState.PLANNED,
        ref=InboxRef(key) if inbox else None,
        posted=inbox,
        post=not inbox,
        escalation=post.escalation,
    )


def _inbox(destination: str) -> bool:
    return destination == dl.WEB


def _timeout(e: Elicitation, now: datetime, reason: str) -> Close:
    closing = dl.timeout_closing(e, now)
    return Close(closing.status, closing.answer, {"reason": reason})


# --------------------------------------------------------------------------- write-backs


def writeback_round(stored_writeback: Writeback | None) -> int:
    """The round the next outcome written back is: one more than the last."""
    return 1 if stored_writeback is None else stored_writeback.round + 1


def sending_writeback(
    previous: Writeback | None,
    *,
    cancelled: Sequence[int] = (),
    skipped: Sequence[int] = (),
) -> Writeback:
    """What a close (an answer, an expiry, a cancel) records: its outcome is on its way, as the
    next round; ``cancelled`` and ``skipped``: the deadlines and waiting copies the close put
    aside, revived if the upstream refuses the answer and the question reopens."""
    return Writeback(
        WritebackState.SENDING,
        writeback_round(previous),
        cancelled=tuple(cancelled),
        skipped=tuple(skipped),
    )


def writeback_writes(
    stored: StoredElicitation,
    copies: Sequence[Copy],
    round_: int,
    *,
    error: str | None,
    reopen: bool,
    gave_up: bool = False,
) -> WriteSet:
    """The write-back of round ``round_`` is done: accepted (``error`` None) or refused for good.

    Fenced on that round still sending (a stale completion writes nothing). Refused: an answered
    elicitation whose upstream is still open (``reopen``) is open again, else marked failed; every
    copy says so, the person who answered is told privately where they answered; it is audited."""
    wb = stored.writeback
    if wb is None:
        wb = Writeback(WritebackState.SENDING, 1)  # closed before write-backs were recorded
    if wb.round != round_ or wb.state is not WritebackState.SENDING:
        return WriteSet()
    if error is None:
        accepted = replace(wb, state=WritebackState.ACCEPTED, cancelled=(), skipped=())
        return WriteSet(settle=Settle(accepted), refresh=True)
    answer = stored.answer
    reopened = reopen and not gave_up and stored.status is Status.ANSWERED
    settled = replace(
        wb,
        state=WritebackState.REFUSED,
        error=error,
        reopened=reopened,
        refused=answer,
        gave_up=gave_up,
    )
    audit = AuditWrite(
        "writeback_gave_up" if gave_up else "writeback_refused",
        SYSTEM,
        None,
        {"error": error[:500], "reopened": reopened},
    )
    effects: tuple[Effect, ...] = ()
    if answer is not None and answer.respondent.partition(":")[0] in ("slack", "matrix"):
        thread = next((c.ref for c in copies if answered_on(c, answer.via)), None)
        text = refused_notice(stored.elicitation, settled)
        notice = NotifyPayload(NoticeKind.REFUSAL, answer.respondent, text, thread)
        effects = (Effect(EffectKind.NOTIFY, answer.via, payload=notice),)
    return WriteSet(
        audits=(audit,),
        effects=effects,
        settle=Settle(settled, reopen=reopened),
        refresh=True,
    )


def answered_on(copy: Copy, via: str) -> bool:
    """Whether an answer given ``via`` (the channel or room it came from) was given on this
    posted copy: its destination, or where its message is (a direct message's destination names
    the person, the answer its room or channel)."""
    return copy.ref is not None and via in (copy.destination, copy.ref.place)


def refused_notice(e: Elicitation, wb: Writeback) -> str:
    """The private message to the person whose answer the upstream refused."""
    upstream = source_name(e)
    what = "" if wb.refused is None else f" ({describe_answer(e, wb.refused)})"
    error = one_line(wb.error or "no reason given")
    if wb.gave_up:
        return (
            f"{upstream[:1].upper()}{upstream[1:]} could not be reached to deliver your "
            f"answer{what}: {error} It may not have arrived; tell the people who are waiting "
            "on it."
        )
    then = (
        "The question is open again: answer it again."
        if wb.reopened
        else "The question is closed there, so it cannot be answered again here."
    )
    return f"Your answer{what} was not accepted by {upstream}: {sentence(error)} {then}"

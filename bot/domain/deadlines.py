"""Deadlines: what each due time does, the schedule a message shows, and the "I'm on it" claim.

Pure (aware UTC in, values out). The store fires each ``deadline`` row once, in the transaction
that reads the elicitation as it stands, so a closed elicitation never reminds.

A reminder or escalation due while a copy is still on its way waits, backing off from
:data:`COPY_RETRY` to :data:`COPY_RETRY_MAX` so a copy that never posts does not spin, and at most
:data:`COPY_WAIT_CAP` (an escalation means "not answered by T"). A reminder with no copy to go to
is skipped and audited, never "fired" with nothing sent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.domain.deadline_values import (
    CLAIM_LAPSE,
    ESCALATE,
    ESCALATION,
    EXPIRE,
    FOLLOWUP,
    PAUSED_BY_CLAIM,
    PLANNED_AT_INTAKE,
    PRIMARY,
    REMIND,
    SUBJECT_EXPIRED,
    SYSTEM,
    Closing,
    EscalationPost,
    FireContext,
    Firing,
    ScheduleStep,
    ThreadNotice,
)
from bot.domain.model import (
    Answer,
    Destination,
    Elicitation,
    Meaning,
    Option,
    Route,
    Status,
)
from bot.domain.policy import ApproverKind
from bot.domain.quorum import Vote, approvers_of, current
from bot.domain.records import WEB, Claim, Copy, DeliveryState, Escalation, Original, Timer
from bot.domain.wording import named
from bot.domain.writes import PlannedDeadline

# ``__all__`` names only what is re-exported; the functions below are public too.
__all__ = [
    "CLAIM_LAPSE",
    "ESCALATE",
    "ESCALATION",
    "EXPIRE",
    "FOLLOWUP",
    "PAUSED_BY_CLAIM",
    "PLANNED_AT_INTAKE",
    "PRIMARY",
    "REMIND",
    "SUBJECT_EXPIRED",
    "SYSTEM",
    "WEB",
    "Claim",
    "Closing",
    "Copy",
    "Escalation",
    "EscalationPost",
    "FireContext",
    "Firing",
    "Original",
    "ScheduleStep",
    "ThreadNotice",
    "Timer",
]

DEFAULT_CLAIM_MINUTES = 30.0
NEVER = datetime(9999, 1, 1, tzinfo=UTC)
"""The engine's "no implicit deadline": an expiry at or after it is never shown."""

COPY_RETRY = timedelta(seconds=5)
"""A deadline waiting for a copy on its way looks again this soon (a post takes a second)..."""
COPY_RETRY_MAX = timedelta(seconds=30)
"""...then as long again as it has waited so far, but never further apart than this."""
COPY_WAIT_CAP = timedelta(seconds=60)
"""How long copies already posted (a reminder) or an escalation wait for the copies on their way."""
WAITING_SINCE = "waiting_since"
"""The deadline detail key kept while it waits: when it first came due."""

_STEP_ORDER = {REMIND: 0, FOLLOWUP: 1, ESCALATE: 2, EXPIRE: 3}
# --------------------------------------------------------------------------- planning


def subject_deadlines(e: Elicitation) -> tuple[PlannedDeadline, ...]:
    """The approval subject's expiry: approving options go away then (every copy is updated)."""
    if e.subject is None or e.subject.expires_at is None:
        return ()
    return (PlannedDeadline(SUBJECT_EXPIRED, e.subject.expires_at),)


def expired_at_intake(e: Elicitation, now: datetime) -> bool:
    """Already past its expiry when it arrives: stored closed, never posted with buttons."""
    return e.deadlines.expires_at is not None and e.deadlines.expires_at <= now


def followup_due(
    route: Route, accepted: Copy, copies: Sequence[Copy], accepted_at: datetime
) -> datetime | None:
    """When the next destination gets it if nobody has answered; None: no follow-up (not a
    primary copy, no ``followup_seconds``, or no later destination waiting)."""
    if (
        route.followup_seconds == 0
        or accepted.purpose != PRIMARY
        or next_waiting(copies, after=accepted.position) is None
    ):
        return None
    return accepted_at + timedelta(seconds=route.followup_seconds)


def next_waiting(copies: Sequence[Copy], *, after: int = -1) -> Copy | None:
    """The first primary destination still waiting for its turn."""
    waiting = [
        c
        for c in copies
        if c.purpose == PRIMARY and c.state == DeliveryState.WAITING and c.position > after
    ]
    return min(waiting, key=lambda c: c.position) if waiting else None


def claim_until(now: datetime, minutes: float = DEFAULT_CLAIM_MINUTES) -> datetime:
    return now + timedelta(minutes=minutes)


# --------------------------------------------------------------------------- firing


def on_platform(identities: Collection[str], destination: str) -> tuple[str, ...]:
    """The identity keys on the destination's platform, in a stable order."""
    platform = Destination(destination).platform
    return tuple(sorted(i for i in set(identities) if i.split(":", 1)[0] == platform))


def timeout_option(e: Elicitation) -> Option | None:
    """The option the timeout rule chooses: ``on_timeout`` approve / deny matched on the option's
    own outcome first, then on its meaning. None: it simply expires."""
    wanted = (e.deadlines.on_timeout or "").strip().lower()
    if wanted not in ("approve", "deny"):
        return None
    meaning = Meaning.APPROVE if wanted == "approve" else Meaning.REJECT
    by_outcome = next((o for o in e.options if (o.outcome or "").lower() == wanted), None)
    return by_outcome or next((o for o in e.options if o.meaning is meaning), None)


def timeout_closing(e: Elicitation, now: datetime) -> Closing:
    """Expired; with ``on_timeout`` approve / deny, the system's decision is the answer."""
    option = timeout_option(e)
    if option is None:
        return Closing(Status.EXPIRED, None)
    subject = e.subject
    return Closing(
        Status.EXPIRED,
        Answer(
            option_ids=(option.id,),
            respondent=SYSTEM,
            via=SYSTEM,
            at=now,
            subject_digest=None if subject is None else subject.digest,
            subject_revision=None if subject is None else subject.revision,
        ),
    )


def reminder_text(e: Elicitation) -> str:
    return f"⏰ Reminder: “{named(e)}” is still waiting for an answer."


def reminders(
    e: Elicitation, route: Route, copies: Sequence[Copy], votes: Sequence[Vote] = ()
) -> tuple[ThreadNotice, ...]:
    """One notice in the thread of every live copy, mentioning who is :func:`still_wanted`."""
    text, wanted = reminder_text(e), still_wanted(e, route, votes)
    return tuple(
        ThreadNotice(
            delivery_id=c.id,
            destination=c.destination,
            thread=c.ref,
            text=text,
            mentions=on_platform(wanted, c.destination),
        )
        for c in copies
        if c.live and c.ref is not None
    )


def still_wanted(e: Elicitation, route: Route, votes: Sequence[Vote] = ()) -> tuple[str, ...]:
    """Whom a reminder mentions: with ``approvers``, the approvers named as people (else the
    route's ``mention``) who have not voted on the subject as it stands ("may approve" is who is
    wanted, not who gets pinged); without approvers, ``mention``."""
    if route.approvers is None:
        return route.mention
    voted = {v.respondent for v in current(e, votes)}
    people = [a.value for a in approvers_of(route.approvers) or () if a.kind is ApproverKind.PERSON]
    return tuple(p for p in (people or route.mention) if p not in voted)


def escalation_posts(
    route: Route, copies: Sequence[Copy], admins: Collection[str]
) -> tuple[EscalationPost, ...]:
    """A copy for each ``escalate_to`` destination not escalated to yet, mentioning its admins."""
    originals = tuple(
        Original(c.destination, c.ref)
        for c in copies
        if c.purpose == PRIMARY and c.state == DeliveryState.POSTED and c.ref is not None
    )
    done = {c.destination for c in copies if c.purpose == ESCALATION}
    posts: list[EscalationPost] = []
    for position, destination in enumerate(route.escalate_to):
        if destination in done:
            continue
        done.add(destination)
        posts.append(
            EscalationPost(
                destination, position, Escalation(on_platform(admins, destination), originals)
            )
        )
    return tuple(posts)


def waiting_since(ctx: FireContext) -> datetime:
    """When this deadline first came due and found a copy on its way (else: its due time)."""
    raw = (ctx.detail or {}).get(WAITING_SINCE)
    try:
        since = datetime.fromisoformat(raw) if isinstance(raw, str) else ctx.due_at
    except ValueError:
        return ctx.due_at
    return since if since.tzinfo is not None else since.replace(tzinfo=UTC)


def wait_for_copies(ctx: FireContext, coming: Sequence[Copy], *, capped: bool) -> Firing | None:
    """Wait for ``coming`` (copies on their way), or None: go now. ``capped``: never past
    :data:`COPY_WAIT_CAP` after it first came due. Only the first wait is audited."""
    if not coming:
        return None
    since = waiting_since(ctx)
    waited = ctx.now - since
    if capped and waited >= COPY_WAIT_CAP:
        return None
    again = ctx.now + min(COPY_RETRY_MAX, max(COPY_RETRY, waited))
    if capped:
        again = min(again, since + COPY_WAIT_CAP)
    first = WAITING_SINCE not in (ctx.detail or {})
    return Firing(
        wait_until=again,
        waiting_since=since,
        audit="waiting_for_copy" if first else None,
        detail={"kind": str(ctx.kind), "copies": [c.destination for c in coming]} if first else {},
    )


def free_instant(at: datetime, taken: Collection[datetime]) -> datetime:
    """``at``, or the first millisecond after it that ``taken`` holds no row at: a store keeps
    one deadline per elicitation, kind and due time, and a waiting row moves to a free one."""
    while at in taken:
        at += timedelta(milliseconds=1)
    return at


def _waited(ctx: FireContext) -> dict[str, Any]:
    """The audit detail of a deadline that waited for a copy: since when."""
    if WAITING_SINCE not in (ctx.detail or {}):
        return {}
    return {WAITING_SINCE: waiting_since(ctx).isoformat()}


def remind(ctx: FireContext) -> Firing:
    """A reminder: to every live copy once none is on its way (or, with some already live, once
    :data:`COPY_WAIT_CAP` has passed); with no copy to go to at all, skipped and audited."""
    coming = [c for c in ctx.copies if c.on_its_way]
    live = any(c.live for c in ctx.copies)
    wait = wait_for_copies(ctx, coming, capped=live)
    if wait is not None:
        return wait
    notices = reminders(ctx.elicitation, ctx.route, ctx.copies, ctx.votes)
    if not notices:
        return Firing(
            skipped=True,
            audit="reminder_skipped",
            detail={
                "reason": "no copy was posted in a chat",
                "copies": [[c.destination, c.state.value] for c in ctx.copies],
                **_waited(ctx),
            },
        )
    detail: dict[str, Any] = {"copies": len(notices), **_waited(ctx)}
    if coming:
        detail["not_posted"] = [c.destination for c in coming]
    return Firing(notices=notices, refresh=True, audit="reminded", detail=detail)


def escalate(ctx: FireContext, admins: Collection[str]) -> Firing:
    """An escalation: once the primary copies on their way are posted (so it links them), at most
    :data:`COPY_WAIT_CAP` late; then it goes with the originals it has."""
    posts = escalation_posts(ctx.route, ctx.copies, admins)
    coming = [c for c in ctx.copies if c.purpose == PRIMARY and c.on_its_way]
    wait = wait_for_copies(ctx, coming, capped=True) if posts else None
    if wait is not None:
        return wait
    detail: dict[str, Any] = {"to": [p.destination for p in posts], **_waited(ctx)}
    if posts and coming:
        detail["not_linked"] = [c.destination for c in coming]
    return Firing(escalations=posts, refresh=True, audit="escalated", detail=detail)


def fire(ctx: FireContext, *, admins: Collection[str] = frozenset()) -> Firing:
    """What the due deadline does now, decided on the state it is fired against."""
    if ctx.status is not Status.PENDING:
        return Firing()
    e, now, kind = ctx.elicitation, ctx.now, ctx.kind
    held = active_claim(ctx.claim, now)
    if kind in PAUSED_BY_CLAIM and held is not None:
        return Firing(
            defer_to=held.until, audit="deferred", detail={"kind": kind, "claimed_by": held.by}
        )
    if kind == REMIND:
        return remind(ctx)
    if kind == ESCALATE:
        return escalate(ctx, admins)
    if kind == FOLLOWUP:
        nxt = next_waiting(ctx.copies)
        return Firing(
            activate=nxt,
            refresh=True,
            audit="followed_up" if nxt is not None else None,
            detail={"to": nxt.destination} if nxt is not None else {},
        )
    if kind == EXPIRE:
        expires_at = e.deadlines.expires_at
        if expires_at is None or expires_at > now:
            return Firing()  # moved by a revision since this row was planned
        return Firing(close=timeout_closing(e, now))
    if kind == SUBJECT_EXPIRED:
        subject_expires = e.subject.expires_at if e.subject is not None else None
        if subject_expires is None or subject_expires > now:
            return Firing()
        return Firing(refresh=True, audit="subject_expired")
    if kind == CLAIM_LAPSE:
        lapsed = ctx.claim is not None and not ctx.claim.active(now)
        return Firing(refresh=lapsed, audit="claim_lapsed" if lapsed else None)
    return Firing()


# --------------------------------------------------------------------------- the schedule


def timeout_outcome(e: Elicitation) -> str | None:
    """``approve`` / ``deny`` when expiry records that decision; None when it just expires."""
    option = timeout_option(e)
    return None if option is None else (e.deadlines.on_timeout or "").strip().lower()


def schedule(
    e: Elicitation,
    route: Route,
    copies: Sequence[Copy],
    timers: Sequence[Timer],
    now: datetime,
    claim: Claim | None = None,
) -> tuple[ScheduleStep, ...]:
    """What will happen if nobody answers, from the pending deadlines (so the same after a
    restart); steps held by an active claim show when it lapses."""
    held = active_claim(claim, now)
    steps: list[ScheduleStep] = []
    for timer in timers:
        at, held_by = timer.due_at, None
        if timer.kind in PAUSED_BY_CLAIM and held is not None and held.until > at:
            at, held_by = held.until, held.who
        if timer.kind == REMIND:
            steps.append(ScheduleStep(REMIND, at))
        elif timer.kind == ESCALATE:
            targets = tuple(p.destination for p in escalation_posts(route, copies, ()))
            if targets:
                steps.append(ScheduleStep(ESCALATE, at, targets, held_by=held_by))
        elif timer.kind == FOLLOWUP:
            nxt = next_waiting(copies)
            if nxt is not None:
                steps.append(ScheduleStep(FOLLOWUP, at, (nxt.destination,), held_by=held_by))
        elif timer.kind == EXPIRE and at < NEVER:
            steps.append(ScheduleStep(EXPIRE, at, outcome=timeout_outcome(e)))
    return tuple(sorted(steps, key=lambda s: (s.at, _STEP_ORDER[s.kind])))


def destination_name(destination: str) -> str:
    """A short name for a destination: ``#C0ONCALL``, ``@U0ALICE``, ``!room:hs``, the web inbox."""
    if destination == WEB:
        return "the web inbox"
    d = Destination(destination)
    if d.platform == "slack":
        return f"@{d.target}" if d.target.startswith(("U", "W")) else f"#{d.target}"
    return d.target or destination


def when_text(at: datetime, now: datetime | None = None) -> str:
    """``14:00 UTC`` on the day of ``now`` (or with no ``now``), else ``2026-11-12 18:00 UTC``."""
    at = at.astimezone(UTC)
    if now is None or now.astimezone(UTC).date() == at.date():
        return at.strftime("%H:%M UTC")
    return at.strftime("%Y-%m-%d %H:%M UTC")


def schedule_line(
    steps: Sequence[ScheduleStep],
    *,
    now: datetime | None = None,
    name: Callable[[str], str] = destination_name,
) -> str:
    """``reminder 14:00 UTC · escalates to #oncall 15:00 UTC · expires 18:00 UTC → deny``."""
    parts: list[str] = []
    for step in steps:
        when = when_text(step.at, now)
        targets = ", ".join(name(t) for t in step.targets)
        if step.kind == REMIND:
            parts.append(f"reminder {when}")
        elif step.kind == FOLLOWUP:
            parts.append(f"next {targets} {when}")
        elif step.kind == ESCALATE:
            parts.append(f"escalates to {targets} {when}")
        elif step.kind == EXPIRE:
            parts.append(f"expires {when}" + (f" → {step.outcome}" if step.outcome else ""))
    return " · ".join(parts)


def claim_line(claim: Claim, now: datetime | None = None) -> str:
    """``Alice is on it (until 15:20 UTC)``."""
    return f"{claim.who} is on it (until {when_text(claim.until, now)})"


def active_claim(claim: Claim | None, now: datetime) -> Claim | None:
    return claim if claim is not None and claim.active(now) else None

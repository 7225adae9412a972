"""Deadline maths, pure: what fires when, what it does, the schedule a message shows, claims.

Times come from a FakeClock moved by ``advance``; nothing sleeps.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.domain import deadlines as dl
from bot.domain.actions import ClaimIt
from bot.domain.deadlines import Claim, Copy, FireContext, ScheduleStep, Timer
from bot.domain.judge import judge
from bot.domain.model import (
    Deadlines,
    Elicitation,
    Identity,
    Meaning,
    Option,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.records import DeadlineKind, DeliveryState, Purpose
from bot.domain.refs import InboxRef, MatrixRef, MessageRef, SlackRef
from bot.domain.wording import named
from tests.conftest import FakeClock
from tests.unit.domain.builders import (
    AGENT_BOT,
    AGENT_ID,
    ALICE,
    BOB,
    DENY,
    PEOPLE,
    elicitation,
    sp_approval,
)
from tests.unit.domain.test_judge import stored

SLACK = "slack:C0APPROVALS"
MATRIX = "matrix:!room:example.org"
ONCALL = "slack:C0ONCALL"
ONCALL_MX = "matrix:!oncall:example.org"
ROUTE = Route(
    destinations=(SLACK, MATRIX, "web"),
    followup_seconds=300,
    escalate_to=(ONCALL, ONCALL_MX),
    mention=("slack:U0ALICE", "matrix:@alice:example.org", "slack:U0BOB"),
)
ADMINS = frozenset({"slack:U0ADMIN", "matrix:@alice:example.org", "slack:U0ADMIN2"})


def ref_of(n: int, destination: str) -> MessageRef:
    """The ref of the n-th copy once posted (the web inbox's is its key)."""
    if destination == "web":
        return InboxRef("x")
    if destination.startswith("matrix:"):
        return MatrixRef(destination.removeprefix("matrix:"), f"ref-{n}")
    return SlackRef(destination.removeprefix("slack:"), f"ref-{n}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 11, 10, 9, 30, tzinfo=UTC))


def copies(*states: str, purpose: str = "primary") -> tuple[Copy, ...]:
    """Copies for ROUTE's destinations in order, in the given states (posted ones have refs)."""
    out = []
    for n, (destination, state) in enumerate(zip(ROUTE.destinations, states, strict=False)):
        ref = ref_of(n, destination) if state == "posted" else None
        out.append(Copy(n + 1, destination, n, Purpose(purpose), DeliveryState(state), ref))
    return tuple(out)


def ctx(
    kind: str,
    now: datetime,
    e: Elicitation | None = None,
    *,
    status: Status = Status.PENDING,
    route: Route = ROUTE,
    the_copies: tuple[Copy, ...] | None = None,
    claim: Claim | None = None,
) -> FireContext:
    return FireContext(
        kind=cast(DeadlineKind, kind),  # a kind no store writes stays possible
        due_at=now,
        now=now,
        elicitation=e if e is not None else elicitation(),
        status=status,
        route=route,
        copies=the_copies if the_copies is not None else copies("posted", "posted", "posted"),
        claim=claim,
    )


# --------------------------------------------------------------------------- reminders


def test_a_reminder_goes_to_the_thread_of_every_live_copy_mentioning_the_routes_people(
    clock: FakeClock,
) -> None:
    live = copies("posted", "posted", "posted")
    firing = dl.fire(ctx(dl.REMIND, clock.now(), the_copies=live))

    assert [(n.delivery_id, n.destination, n.thread) for n in firing.notices] == [
        (1, SLACK, ref_of(0, SLACK)),
        (2, MATRIX, ref_of(1, MATRIX)),
    ]  # the web inbox has no thread
    assert [n.mentions for n in firing.notices] == [
        ("slack:U0ALICE", "slack:U0BOB"),
        ("matrix:@alice:example.org",),
    ]
    assert all("still waiting for an answer" in n.text for n in firing.notices)
    assert firing.refresh, "the schedule line loses its reminder: every copy is updated"
    assert (firing.audit, firing.detail) == ("reminded", {"copies": 2})


def test_a_reminder_skips_copies_not_posted_and_mentions_nobody_when_none_are_named(
    clock: FakeClock,
) -> None:
    route = ROUTE.model_copy(update={"mention": ()})
    the_copies = copies("posted", "failed", "waiting")  # on its way: see test_deadlines_waiting

    [notice] = dl.fire(ctx(dl.REMIND, clock.now(), route=route, the_copies=the_copies)).notices

    assert (notice.destination, notice.mentions) == (SLACK, ())


@pytest.mark.parametrize("status", [Status.ANSWERED, Status.EXPIRED, Status.CANCELLED])
@pytest.mark.parametrize(
    "kind",
    [dl.REMIND, dl.ESCALATE, dl.FOLLOWUP, dl.EXPIRE, dl.SUBJECT_EXPIRED, dl.CLAIM_LAPSE],
)
def test_nothing_fires_on_a_closed_elicitation(clock: FakeClock, kind: str, status: Status) -> None:
    e = sp_approval().model_copy(
        update={"deadlines": Deadlines(expires_at=clock.now(), on_timeout="deny")}
    )
    lapsed = Claim("slack:U0ALICE", clock.now() - timedelta(seconds=1))

    assert dl.fire(ctx(kind, clock.advance(86_400), e, status=status, claim=lapsed)) == dl.Firing()


# --------------------------------------------------------------------------- escalation


def test_escalation_posts_to_each_destination_with_its_platforms_admins_and_the_originals(
    clock: FakeClock,
) -> None:
    firing = dl.fire(ctx(dl.ESCALATE, clock.now()), admins=ADMINS)

    assert [(p.destination, p.position) for p in firing.escalations] == [
        (ONCALL, 0),
        (ONCALL_MX, 1),
    ]
    assert [p.escalation.mentions for p in firing.escalations] == [
        ("slack:U0ADMIN", "slack:U0ADMIN2"),
        ("matrix:@alice:example.org",),
    ]
    originals = firing.escalations[0].escalation.originals
    assert [(o.destination, o.ref) for o in originals] == [
        (SLACK, ref_of(0, SLACK)),
        (MATRIX, ref_of(1, MATRIX)),
        ("web", InboxRef("x")),
    ]
    assert firing.refresh
    assert (firing.audit, firing.detail) == ("escalated", {"to": [ONCALL, ONCALL_MX]})


def test_escalation_never_posts_twice_to_one_destination(clock: FakeClock) -> None:
    done = (
        *copies("posted"),
        Copy(9, ONCALL, 0, dl.ESCALATION, DeliveryState.POSTED, ref_of(9, ONCALL)),
    )
    route = ROUTE.model_copy(update={"escalate_to": (ONCALL, ONCALL, ONCALL_MX)})

    firing = dl.fire(ctx(dl.ESCALATE, clock.now(), route=route, the_copies=done), admins=ADMINS)

    assert [p.destination for p in firing.escalations] == [ONCALL_MX]
    assert [o.destination for o in firing.escalations[0].escalation.originals] == [SLACK]


def test_an_active_claim_holds_escalation_and_follow_up_until_it_lapses(clock: FakeClock) -> None:
    start = clock.now()
    claim = Claim("slack:U0ALICE", start + timedelta(minutes=30), "Alice")

    for kind in (dl.ESCALATE, dl.FOLLOWUP):
        held = dl.fire(ctx(kind, clock.now(), claim=claim), admins=ADMINS)
        assert held.defer_to == claim.until
        assert (held.escalations, held.activate, held.refresh) == ((), None, False)
        assert held.detail == {"kind": kind, "claimed_by": "slack:U0ALICE"}

    clock.advance(30 * 60)  # the claim lapses exactly now: it no longer holds
    lapsed = dl.fire(ctx(dl.ESCALATE, clock.now(), claim=claim), admins=ADMINS)
    assert lapsed.defer_to is None
    assert len(lapsed.escalations) == 2


def test_a_claim_never_holds_a_reminder_or_the_expiry(clock: FakeClock) -> None:
    claim = Claim("slack:U0ALICE", clock.now() + timedelta(hours=1))
    e = elicitation(deadlines=Deadlines(expires_at=clock.now()))

    assert dl.fire(ctx(dl.REMIND, clock.now(), claim=claim)).notices
    assert dl.fire(ctx(dl.EXPIRE, clock.now(), e, claim=claim)).close == dl.Closing(
        Status.EXPIRED, None
    )


# --------------------------------------------------------------------------- follow-up


def test_a_follow_up_activates_the_first_waiting_destination(clock: FakeClock) -> None:
    the_copies = copies("posted", "waiting", "waiting")

    firing = dl.fire(ctx(dl.FOLLOWUP, clock.now(), the_copies=the_copies))

    assert firing.activate == the_copies[1]
    assert (firing.refresh, firing.audit, firing.detail) == (True, "followed_up", {"to": MATRIX})


def test_a_follow_up_with_nobody_waiting_does_nothing_but_refresh(clock: FakeClock) -> None:
    firing = dl.fire(ctx(dl.FOLLOWUP, clock.now(), the_copies=copies("posted", "failed")))

    assert (firing.activate, firing.audit) == (None, None)


def test_followup_due_after_acceptance_unless_off_last_or_an_escalation(clock: FakeClock) -> None:
    accepted_at = clock.advance(2)
    first, second, third = copies("posted", "waiting", "waiting")
    every = (first, second, third)

    assert dl.followup_due(ROUTE, first, every, accepted_at) == accepted_at + timedelta(seconds=300)
    off = ROUTE.model_copy(update={"followup_seconds": 0})
    assert dl.followup_due(off, first, every, accepted_at) is None
    last = Copy(3, "web", 2, dl.PRIMARY, DeliveryState.POSTED, InboxRef("x"))
    assert dl.followup_due(ROUTE, last, (first, second, last), accepted_at) is None
    escalation = Copy(7, ONCALL, 0, dl.ESCALATION, DeliveryState.POSTED, ref_of(7, ONCALL))
    assert dl.followup_due(ROUTE, escalation, (*every, escalation), accepted_at) is None
    # Only destinations after the accepted one count.
    assert dl.next_waiting(every, after=1) == third
    assert dl.next_waiting(every, after=2) is None


# --------------------------------------------------------------------------- expiry


def test_expiry_without_a_timeout_outcome_just_expires(clock: FakeClock) -> None:
    e = elicitation(deadlines=Deadlines(expires_at=clock.now(), on_timeout="expire"))

    assert dl.fire(ctx(dl.EXPIRE, clock.now(), e)).close == dl.Closing(Status.EXPIRED, None)


@pytest.mark.parametrize(
    ("on_timeout", "options", "chosen"),
    [
        ("deny", (Option(id="ok", label="OK", meaning=Meaning.APPROVE), DENY), "deny"),
        ("approve", (Option(id="ok", label="OK", meaning=Meaning.APPROVE), DENY), "ok"),
        # The option's own outcome wins over its meaning (handup: outcome approve / deny).
        (
            "deny",
            (
                Option(id="reject", label="Reject", meaning=Meaning.REJECT),
                Option(id="no", label="No", meaning=Meaning.CHOOSE, outcome="deny"),
            ),
            "no",
        ),
        ("Approve", (Option(id="a", label="A", meaning=Meaning.APPROVE, outcome="approve"),), "a"),
    ],
)
def test_expiry_records_the_timeout_decision_as_the_system(
    clock: FakeClock, on_timeout: str, options: tuple[Option, ...], chosen: str
) -> None:
    now = clock.advance(60)
    e = sp_approval().model_copy(
        update={
            "options": options,
            "deadlines": Deadlines(expires_at=now, on_timeout=on_timeout),
        }
    )

    closing = dl.fire(ctx(dl.EXPIRE, now, e)).close

    assert closing is not None
    assert closing.status is Status.EXPIRED
    answer = closing.answer
    assert answer is not None
    assert (answer.option_ids, answer.respondent, answer.via, answer.at) == (
        (chosen,),
        "system",
        "system",
        now,
    )
    assert e.subject is not None
    assert (answer.subject_digest, answer.subject_revision) == (e.subject.digest, 1)


def test_a_timeout_outcome_with_no_matching_option_just_expires(clock: FakeClock) -> None:
    e = elicitation(
        options=(DENY,), deadlines=Deadlines(expires_at=clock.now(), on_timeout="approve")
    )

    assert dl.fire(ctx(dl.EXPIRE, clock.now(), e)).close == dl.Closing(Status.EXPIRED, None)
    assert dl.timeout_outcome(e) is None


def test_an_expiry_moved_later_by_a_revision_does_not_fire(clock: FakeClock) -> None:
    e = elicitation(deadlines=Deadlines(expires_at=clock.now() + timedelta(seconds=1)))

    assert dl.fire(ctx(dl.EXPIRE, clock.now(), e)) == dl.Firing()
    assert dl.fire(ctx(dl.EXPIRE, clock.now(), elicitation())) == dl.Firing()


def test_expired_at_intake_means_at_or_before_now(clock: FakeClock) -> None:
    now = clock.now()
    for expires, expected in ((now - timedelta(seconds=1), True), (now, True)):
        assert dl.expired_at_intake(elicitation(deadlines=Deadlines(expires_at=expires)), now) is (
            expected
        )
    soon = elicitation(deadlines=Deadlines(expires_at=now + timedelta(seconds=1)))
    assert not dl.expired_at_intake(soon, now)
    assert not dl.expired_at_intake(elicitation(), now)


# --------------------------------------------------------------------------- subject, claims


def test_the_subjects_expiry_is_planned_and_refreshes_every_copy_once_passed(
    clock: FakeClock,
) -> None:
    e = sp_approval()
    assert e.subject is not None
    assert e.subject.expires_at is not None
    [planned] = dl.subject_deadlines(e)
    assert (planned.kind, planned.due_at) == (dl.SUBJECT_EXPIRED, e.subject.expires_at)
    assert dl.subject_deadlines(elicitation()) == ()

    early = e.subject.expires_at - timedelta(seconds=1)
    assert dl.fire(ctx(dl.SUBJECT_EXPIRED, early, e)) == dl.Firing()
    passed = dl.fire(ctx(dl.SUBJECT_EXPIRED, e.subject.expires_at, e))
    assert (passed.refresh, passed.notices, passed.close) == (True, (), None)


def test_a_claim_lapse_refreshes_only_when_the_claim_really_lapsed(clock: FakeClock) -> None:
    until = clock.advance(1800)
    renewed = Claim("slack:U0ALICE", until + timedelta(minutes=30))

    assert dl.fire(ctx(dl.CLAIM_LAPSE, until, claim=renewed)) == dl.Firing()
    lapsed = dl.fire(ctx(dl.CLAIM_LAPSE, until, claim=Claim("slack:U0ALICE", until)))
    assert (lapsed.refresh, lapsed.audit) == (True, "claim_lapsed")


def claim_refusal(e: Elicitation, status: Status, who: Identity, now: datetime) -> Refusal | None:
    """Who may say "I'm on it", as the one judgement of a claim answers it."""
    return judge(stored(e, status), ClaimIt(e.key, who, who.platform), PEOPLE, now).outcome.refusal


def test_who_may_claim(clock: FakeClock) -> None:
    e = elicitation()
    asker = Identity(platform="slack", user=AGENT_ID)
    now = clock.now()

    assert claim_refusal(e, Status.PENDING, ALICE, now) is None
    assert claim_refusal(e, Status.PENDING, BOB, now) is None
    for who, code in ((asker, RefusalCode.ASKER), (AGENT_BOT, RefusalCode.AGENT)):
        refusal = claim_refusal(e, Status.PENDING, who, now)
        assert refusal is not None
        assert refusal.code is code
    answered = claim_refusal(e, Status.ANSWERED, ALICE, now)
    assert answered is not None
    assert answered.code is RefusalCode.ALREADY_ANSWERED
    expired = claim_refusal(e, Status.EXPIRED, ALICE, now)
    assert expired is not None
    assert expired.code is RefusalCode.CLOSED
    assert dl.claim_until(clock.now()) == clock.now() + timedelta(minutes=30)
    assert dl.claim_until(clock.now(), 5) == clock.now() + timedelta(minutes=5)


# --------------------------------------------------------------------------- the schedule


def test_the_schedule_lists_what_is_left_in_time_order(clock: FakeClock) -> None:
    t0 = clock.now()
    e = elicitation(deadlines=Deadlines(on_timeout="deny"))
    timers = (
        Timer(dl.EXPIRE, t0 + timedelta(hours=8, minutes=30)),
        Timer(dl.REMIND, t0 + timedelta(hours=4, minutes=30)),
        Timer(dl.ESCALATE, t0 + timedelta(hours=5, minutes=30)),
        Timer(dl.FOLLOWUP, t0 + timedelta(minutes=5)),
        Timer(dl.SUBJECT_EXPIRED, t0 + timedelta(hours=1)),  # not a step: it only refreshes
        Timer(dl.CLAIM_LAPSE, t0 + timedelta(hours=2)),
    )

    steps = dl.schedule(e, ROUTE, copies("posted", "waiting", "waiting"), timers, t0)

    assert steps == (
        ScheduleStep(dl.FOLLOWUP, t0 + timedelta(minutes=5), (MATRIX,)),
        ScheduleStep(dl.REMIND, t0 + timedelta(hours=4, minutes=30)),
        ScheduleStep(dl.ESCALATE, t0 + timedelta(hours=5, minutes=30), (ONCALL, ONCALL_MX)),
        ScheduleStep(dl.EXPIRE, t0 + timedelta(hours=8, minutes=30), outcome="deny"),
    )
    assert dl.schedule_line(steps, now=t0) == (
        "next !room:example.org 09:35 UTC · reminder 14:00 UTC · "
        "escalates to #C0ONCALL, !oncall:example.org 15:00 UTC · expires 18:00 UTC → deny"
    )


def test_the_schedule_shows_a_held_escalation_at_the_claims_lapse(clock: FakeClock) -> None:
    t0 = clock.now()
    timers = (Timer(dl.ESCALATE, t0 + timedelta(minutes=10)), Timer(dl.REMIND, t0))
    claim = Claim("slack:U0ALICE", t0 + timedelta(minutes=30), "Alice")

    steps = dl.schedule(elicitation(), ROUTE, copies("posted"), timers, t0, claim)

    assert steps == (
        ScheduleStep(dl.REMIND, t0),
        ScheduleStep(dl.ESCALATE, claim.until, (ONCALL, ONCALL_MX), held_by="Alice"),
    )
    assert dl.claim_line(claim, t0) == "Alice is on it (until 10:00 UTC)"
    assert dl.active_claim(claim, t0) == claim
    # Lapsed: the escalation shows its own time again, and no one is on it.
    later = t0 + timedelta(minutes=31)
    assert dl.schedule(elicitation(), ROUTE, copies("posted"), timers, later, claim)[1] == (
        ScheduleStep(dl.ESCALATE, t0 + timedelta(minutes=10), (ONCALL, ONCALL_MX))
    )
    assert dl.active_claim(claim, later) is None
    assert dl.active_claim(None, later) is None


def test_the_schedule_leaves_out_steps_that_would_do_nothing(clock: FakeClock) -> None:
    t0 = clock.now()
    plain = Route(destinations=(SLACK,))
    timers = (
        Timer(dl.ESCALATE, t0 + timedelta(hours=1)),  # nowhere to escalate to
        Timer(dl.FOLLOWUP, t0 + timedelta(minutes=5)),  # no destination waits
        Timer(dl.EXPIRE, dl.NEVER),  # the engine's "no deadline"
    )

    assert dl.schedule(elicitation(), plain, copies("posted"), timers, t0) == ()
    assert dl.schedule_line(()) == ""


def test_schedule_lines_name_the_day_when_it_is_not_today(clock: FakeClock) -> None:
    t0 = clock.now()
    steps = (
        ScheduleStep(dl.EXPIRE, t0 + timedelta(days=2)),
        ScheduleStep(dl.ESCALATE, t0, ("slack:U0ADMIN", "web")),
    )

    assert dl.schedule_line(steps, now=t0) == (
        "expires 2026-11-12 09:30 UTC · escalates to @U0ADMIN, the web inbox 09:30 UTC"
    )
    assert dl.schedule_line(steps[:1]) == "expires 09:30 UTC"
    assert dl.schedule_line(steps[1:], name=str.upper) == (
        "escalates to SLACK:U0ADMIN, WEB 09:30 UTC"
    )


@given(
    offsets=st.lists(
        st.tuples(
            st.sampled_from([dl.REMIND, dl.ESCALATE, dl.FOLLOWUP, dl.EXPIRE]),
            st.integers(min_value=-3600, max_value=86_400),
        ),
        max_size=8,
    ),
    claim_minutes=st.one_of(st.none(), st.integers(min_value=-60, max_value=600)),
)
def test_schedule_is_sorted_and_a_claim_only_ever_pushes_steps_later(
    offsets: list[tuple[str, int]], claim_minutes: int | None
) -> None:
    t0 = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
    timers = [Timer(DeadlineKind(kind), t0 + timedelta(seconds=s)) for kind, s in offsets]
    claim = (
        None
        if claim_minutes is None
        else Claim("slack:U0ALICE", t0 + timedelta(minutes=claim_minutes))
    )
    the_copies = copies("posted", "waiting", "waiting")

    free = dl.schedule(elicitation(), ROUTE, the_copies, timers, t0)
    held = dl.schedule(elicitation(), ROUTE, the_copies, timers, t0, claim)

    assert [s.at for s in held] == sorted(s.at for s in held)
    assert len(free) == len(held)
    for kind in (dl.REMIND, dl.ESCALATE, dl.FOLLOWUP, dl.EXPIRE):
        before = sorted(s.at for s in free if s.kind == kind)
        after = sorted(s.at for s in held if s.kind == kind)
        if kind in dl.PAUSED_BY_CLAIM:
            assert all(a >= b for a, b in zip(after, before, strict=True))
        else:
            assert after == before
    for step in held:
        if step.held_by is not None:
            assert claim is not None
            assert step.at == claim.until > t0
            assert step.kind in dl.PAUSED_BY_CLAIM


def test_an_unknown_kind_does_nothing_and_long_titles_are_cut(clock: FakeClock) -> None:
    assert dl.fire(ctx("nudge", clock.now())) == dl.Firing()

    long = elicitation(title="", question="word " * 100)
    text = dl.reminder_text(long)
    assert text.startswith("⏰ Reminder: “word word")
    assert len(named(long)) == 150
    assert named(long).endswith("…")
    assert named(elicitation(title="", question="")) == "superpipeline:eli_1a2b3c4d5e6f7081"


def test_a_claim_without_a_display_name_shows_the_identity(clock: FakeClock) -> None:
    claim = Claim("matrix:@bob:example.org", clock.now() + timedelta(minutes=5))

    assert claim.who == "matrix:@bob:example.org"
    assert dl.claim_line(claim) == "matrix:@bob:example.org is on it (until 09:35 UTC)"
    assert dl.destination_name("matrix:#ops:example.org") == "#ops:example.org"
    assert dl.destination_name("slack:W0ENTERPRISE") == "@W0ENTERPRISE"

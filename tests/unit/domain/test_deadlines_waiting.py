"""Deadlines that wait for their copies, pure: a reminder or an escalation due while a copy is still
on its way (``planned``: queued, or ``posting``) re-plans itself until the copy is posted, and a
reminder with nothing to go to is skipped and audited, never "fired" with nothing sent.

Each test plays the rows a store would write: the deferral a firing plans becomes the next
:class:`FireContext` (its due time and detail), as the store hands it to the next firing.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from bot.domain import deadlines as dl
from bot.domain import planning
from bot.domain.deadlines import Claim, Copy, FireContext, Firing
from bot.domain.model import Deadlines, Route, Status
from bot.domain.records import DeadlineKind, DeliveryState, EffectKind, FireOutcome, Purpose
from bot.domain.refs import InboxRef, SlackRef
from bot.domain.writes import WriteSet
from tests.unit.domain.builders import NOW, elicitation

SLACK = "slack:C0APPROVALS"
SLACK_2 = "slack:C0SECOND"
ONCALL = "slack:C0ONCALL"
ROUTE = Route(destinations=(SLACK, SLACK_2), escalate_to=(ONCALL,), mention=("slack:U0ALICE",))
ADMINS = frozenset({"slack:U0ADMIN"})
S = DeliveryState


def copy(n: int, destination: str, state: DeliveryState, purpose: str = "primary") -> Copy:
    ref = None
    if state is S.POSTED:
        ref = InboxRef("k") if destination == "web" else SlackRef(destination[6:], f"ts-{n}")
    return Copy(n, destination, n - 1, Purpose(purpose), state, ref)


def ctx(
    kind: DeadlineKind,
    copies: tuple[Copy, ...],
    *,
    now: datetime = NOW,
    route: Route = ROUTE,
    claim: Claim | None = None,
) -> FireContext:
    return FireContext(kind, now, now, elicitation(), Status.PENDING, route, copies, claim)


def fire(c: FireContext, deadline_id: int = 1) -> tuple[Firing, planning.FiringWrites]:
    firing = dl.fire(c, admins=ADMINS)
    return firing, planning.firing_writes(c, firing, deadline_id)


def next_row(
    c: FireContext, written: planning.FiringWrites, copies: tuple[Copy, ...] | None = None
) -> FireContext:
    """The row put back (or planned by a deferral), fired when it is due, on ``copies`` as they
    stand then."""
    if written.again_at is not None:
        due, detail = written.again_at, written.again_detail
    else:
        [again] = written.writes.deadlines
        due, detail = again.due_at, again.detail
    return replace(
        c,
        due_at=due,
        now=due,
        detail=dict(detail or {}),
        copies=c.copies if copies is None else copies,
    )


# --------------------------------------------------------------------------- reminders


def test_a_reminder_due_while_its_only_copy_is_posting_waits_then_goes_once_it_is_posted() -> None:
    posting = (copy(1, SLACK, S.POSTING),)

    firing, written = fire(ctx(DeadlineKind.REMIND, posting), deadline_id=7)

    assert written.outcome is FireOutcome.WAITING, "not fired: there is nowhere to send it yet"
    assert (firing.notices, firing.refresh) == ((), False)
    assert written.writes == WriteSet(audits=written.writes.audits), "nothing but the audit"
    assert written.again_at == NOW + dl.COPY_RETRY
    assert written.again_detail == {"waiting_since": NOW.isoformat()}
    [audit] = written.writes.audits
    assert (audit.action, audit.detail) == (
        "waiting_for_copy",
        {"due_at": NOW.isoformat(), "kind": "remind", "copies": [SLACK]},
    )

    posted = (copy(1, SLACK, S.POSTED),)
    later = next_row(ctx(DeadlineKind.REMIND, posting), written, posted)
    firing, written = fire(later, deadline_id=8)

    assert written.outcome is FireOutcome.FIRED
    [notice] = written.writes.effects
    assert (notice.kind, notice.target, notice.delivery_id) == (EffectKind.NOTIFY, SLACK, 1)
    assert written.writes.refresh
    [audit] = written.writes.audits
    assert audit.action == "reminded"
    assert audit.detail == {
        "due_at": (NOW + dl.COPY_RETRY).isoformat(),
        "copies": 1,
        "waiting_since": NOW.isoformat(),
    }


def test_a_reminder_before_the_first_post_waits_too() -> None:
    _, written = fire(ctx(DeadlineKind.REMIND, (copy(1, SLACK, S.PLANNED),)))

    assert written.outcome is FireOutcome.WAITING


def test_a_copy_that_never_posts_is_looked_for_further_apart_and_audited_once() -> None:
    c = ctx(DeadlineKind.REMIND, (copy(1, SLACK, S.POSTING),))
    looks: list[datetime] = []
    audits: list[str] = []
    for n in range(12):
        _, written = fire(c, deadline_id=n)
        assert written.outcome is FireOutcome.WAITING
        audits += [a.action for a in written.writes.audits]
        c = next_row(c, written)
        looks.append(c.due_at)

    gaps = [(b - a).total_seconds() for a, b in zip([NOW, *looks], looks, strict=False)]
    assert gaps == [5, 5, 10, 20, 30, 30, 30, 30, 30, 30, 30, 30]
    assert audits == ["waiting_for_copy"], "one entry for the whole wait"
    assert c.detail == {"waiting_since": NOW.isoformat()}, "counted from the first due time"


def test_with_some_copies_posted_a_reminder_waits_for_the_rest_only_up_to_the_cap() -> None:
    copies = (copy(1, SLACK, S.POSTED), copy(2, SLACK_2, S.POSTING))
    c = ctx(DeadlineKind.REMIND, copies)
    looks = []
    while True:
        firing, written = fire(c)
        if written.outcome is not FireOutcome.WAITING:
            break
        c = next_row(c, written)
        looks.append(c.due_at)

    assert looks[-1] == NOW + dl.COPY_WAIT_CAP, "never later than the cap"
    assert written.outcome is FireOutcome.FIRED
    assert [n.destination for n in firing.notices] == [SLACK]
    [audit] = written.writes.audits
    assert audit.detail is not None
    assert audit.detail["not_posted"] == [SLACK_2]


def test_with_both_copies_posted_in_time_both_are_reminded_together() -> None:
    c = ctx(DeadlineKind.REMIND, (copy(1, SLACK, S.POSTED), copy(2, SLACK_2, S.PLANNED)))
    _, written = fire(c)
    both = (copy(1, SLACK, S.POSTED), copy(2, SLACK_2, S.POSTED))

    firing, written = fire(next_row(c, written, both))

    assert [n.destination for n in firing.notices] == [SLACK, SLACK_2]
    assert "not_posted" not in (written.writes.audits[0].detail or {})


def test_a_failed_copy_hands_its_reminder_to_the_destination_that_falls_back() -> None:
    # The first destination failed for good; the fallback queued the next one.
    c = ctx(DeadlineKind.REMIND, (copy(1, SLACK, S.FAILED), copy(2, SLACK_2, S.PLANNED)))
    _, written = fire(c)
    assert written.outcome is FireOutcome.WAITING

    firing, written = fire(
        next_row(c, written, (copy(1, SLACK, S.FAILED), copy(2, SLACK_2, S.POSTED)))
    )

    assert written.outcome is FireOutcome.FIRED
    assert [n.destination for n in firing.notices] == [SLACK_2]


def test_a_reminder_with_no_copy_to_go_to_is_skipped_and_says_why() -> None:
    failed = (copy(1, SLACK, S.FAILED), copy(2, SLACK_2, S.FAILED))

    firing, written = fire(ctx(DeadlineKind.REMIND, failed), deadline_id=3)

    assert written.outcome is FireOutcome.SKIPPED
    assert firing.skipped
    [audit] = written.writes.audits
    assert audit.action == "reminder_skipped"
    assert audit.detail == {
        "due_at": NOW.isoformat(),
        "reason": "no copy was posted in a chat",
        "copies": [[SLACK, "failed"], [SLACK_2, "failed"]],
    }
    assert written.writes == WriteSet(audits=written.writes.audits), "only the audit"


def test_the_web_inbox_alone_has_no_thread_a_reminder_there_is_skipped() -> None:
    inbox_only = Route(destinations=("web", SLACK), followup_seconds=300)
    copies = (copy(1, "web", S.POSTED), copy(2, SLACK, S.WAITING))  # Slack waits its turn

    _, written = fire(ctx(DeadlineKind.REMIND, copies, route=inbox_only))

    assert written.outcome is FireOutcome.SKIPPED


def test_a_reminder_that_waited_and_then_lost_its_copy_is_skipped_with_the_wait_recorded() -> None:
    c = ctx(DeadlineKind.REMIND, (copy(1, SLACK, S.POSTING),))
    _, written = fire(c)

    _, written = fire(next_row(c, written, (copy(1, SLACK, S.FAILED),)))

    assert written.outcome is FireOutcome.SKIPPED
    [audit] = written.writes.audits
    assert audit.detail is not None
    assert audit.detail["waiting_since"] == NOW.isoformat()


# --------------------------------------------------------------------------- escalation


def test_an_escalation_waits_for_the_originals_it_links_at_most_the_cap() -> None:
    c = ctx(DeadlineKind.ESCALATE, (copy(1, SLACK, S.POSTING),))
    firing, written = fire(c)
    assert written.outcome is FireOutcome.WAITING
    assert firing.escalations == ()

    # Posted in time: the escalation links it.
    firing, _ = fire(next_row(c, written, (copy(1, SLACK, S.POSTED),)))
    [post] = firing.escalations
    assert [o.destination for o in post.escalation.originals] == [SLACK]

    # Still not posted at the cap: it goes anyway (escalation is "not answered by T").
    stuck = replace(c, now=NOW + dl.COPY_WAIT_CAP, detail={"waiting_since": NOW.isoformat()})
    firing, written = fire(stuck)
    assert written.outcome is FireOutcome.FIRED
    [post] = firing.escalations
    assert (post.destination, post.escalation.originals) == (ONCALL, ())
    assert (written.writes.audits[0].detail or {})["not_linked"] == [SLACK]


def test_an_escalation_goes_at_once_when_no_copy_is_on_its_way() -> None:
    for copies in ((copy(1, SLACK, S.FAILED),), (copy(1, SLACK, S.POSTED),), ()):
        firing, written = fire(ctx(DeadlineKind.ESCALATE, copies))
        assert written.outcome is FireOutcome.FIRED
        assert [p.destination for p in firing.escalations] == [ONCALL]


def test_an_escalation_with_nothing_left_to_post_does_not_wait() -> None:
    done = (copy(1, SLACK, S.POSTING), copy(9, ONCALL, S.POSTED, purpose="escalation"))

    firing, _ = fire(ctx(DeadlineKind.ESCALATE, done))

    assert firing.wait_until is None
    assert firing.escalations == ()


def test_a_claim_holds_an_escalation_first_and_the_wait_for_copies_counts_from_its_lapse() -> None:
    until = NOW + timedelta(minutes=30)
    c = ctx(DeadlineKind.ESCALATE, (copy(1, SLACK, S.POSTING),), claim=Claim("slack:U0BOB", until))
    firing, written = fire(c, deadline_id=4)
    assert (firing.defer_to, firing.audit) == (until, "deferred")

    lapsed = next_row(c, written)
    firing, written = fire(lapsed, deadline_id=5)

    assert firing.wait_until == until + dl.COPY_RETRY
    assert written.again_detail == {"deferred": 4, "waiting_since": until.isoformat()}


# --------------------------------------------------------------------------- follow-up, expiry


def test_a_follow_up_and_an_expiry_never_wait_for_a_copy() -> None:
    route = ROUTE.model_copy(update={"followup_seconds": 60})
    copies = (copy(1, SLACK, S.POSTED), copy(2, SLACK_2, S.WAITING), copy(3, ONCALL, S.POSTING))

    followup = dl.fire(ctx(DeadlineKind.FOLLOWUP, copies, route=route))
    assert followup.activate == copies[1]

    e = elicitation(deadlines=Deadlines(expires_at=NOW))
    expiry = dl.fire(replace(ctx(DeadlineKind.EXPIRE, copies), elicitation=e))
    assert expiry.close is not None


# --------------------------------------------------------------------------- the wait itself


def test_a_stored_waiting_since_that_cannot_be_read_counts_from_the_due_time() -> None:
    c = ctx(DeadlineKind.REMIND, ())
    assert dl.waiting_since(replace(c, detail={"waiting_since": "soon"})) == NOW
    assert dl.waiting_since(replace(c, detail={"waiting_since": 12})) == NOW
    naive = replace(c, detail={"waiting_since": "2026-11-10T09:00:00"})
    assert dl.waiting_since(naive) == datetime(2026, 11, 10, 9, 0, tzinfo=UTC)


@given(
    waited=st.integers(min_value=-10, max_value=10_000),
    capped=st.booleans(),
)
def test_the_next_look_is_never_now_and_a_capped_wait_never_passes_its_cap(
    waited: int, capped: bool
) -> None:
    since = NOW - timedelta(seconds=waited)
    coming = (copy(2, SLACK_2, S.POSTING),)
    c = replace(ctx(DeadlineKind.REMIND, coming), detail={"waiting_since": since.isoformat()})

    wait = dl.wait_for_copies(c, coming, capped=capped)

    if wait is None:
        assert capped
        assert waited >= dl.COPY_WAIT_CAP.total_seconds()
        return
    assert wait.wait_until is not None
    assert wait.wait_until > NOW
    assert wait.wait_until - NOW <= dl.COPY_RETRY_MAX
    if capped:
        assert wait.wait_until <= since + dl.COPY_WAIT_CAP
    else:
        assert wait.wait_until - NOW >= dl.COPY_RETRY
    assert dl.wait_for_copies(c, (), capped=capped) is None, "nothing on its way: go now"


def test_a_row_put_back_takes_the_first_free_instant_of_its_kind() -> None:
    ms = timedelta(milliseconds=1)

    assert dl.free_instant(NOW, ()) == NOW
    assert dl.free_instant(NOW, {NOW, NOW + ms, NOW + 3 * ms}) == NOW + 2 * ms

"""What each store write does, decided without a store: intake, revision, a post accepted or
failed for good, a waiting copy's turn, a claim, and what a fired deadline writes."""

from __future__ import annotations

from datetime import timedelta

from bot.domain import deadlines as dl
from bot.domain import planning
from bot.domain.deadlines import Copy, FireContext, Firing
from bot.domain.model import Deadlines, ElicitationKey, Route, Status
from bot.domain.payloads import NotifyPayload
from bot.domain.records import DeadlineKind, DeliveryState, EffectKind, FireOutcome, NoticeKind
from bot.domain.refs import InboxRef, MatrixRef, SlackRef
from bot.domain.writes import (
    Activation,
    AuditWrite,
    Close,
    CopyUpdate,
    PlannedDeadline,
    WriteSet,
)
from tests.unit.domain.builders import NOW, elicitation

SLACK = "slack:C0APPROVALS"
MATRIX = "matrix:!room:example.org"
ONCALL = "slack:C0ONCALL"
POSTED, PLANNED, WAITING = DeliveryState.POSTED, DeliveryState.PLANNED, DeliveryState.WAITING


def at(seconds: float) -> Deadlines:
    return Deadlines(expires_at=NOW + timedelta(seconds=seconds))


def copy(n: int, destination: str, state: DeliveryState, **kw: object) -> Copy:
    purpose = kw.pop("purpose", dl.PRIMARY)
    ref = SlackRef("C0", f"{n}") if state is POSTED and destination != "web" else None
    return Copy(n, destination, n - 1, purpose, state, ref)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- intake


def test_intake_posts_every_destination_without_a_follow_up() -> None:
    e = elicitation(deadlines=Deadlines(remind_at=NOW + timedelta(minutes=5)))
    ws = planning.intake_writes(e, Route(destinations=(SLACK, MATRIX, SLACK)), NOW, {"in": 1})

    assert ws.audits == (AuditWrite("intake", detail={"in": 1}),)
    assert [(c.destination, c.position, c.state, c.post) for c in ws.copies] == [
        (SLACK, 0, PLANNED, True),
        (MATRIX, 1, PLANNED, True),
    ]
    assert ws.deadlines == (PlannedDeadline(DeadlineKind.REMIND, NOW + timedelta(minutes=5)),)
    assert ws.close is None


def test_with_a_follow_up_later_destinations_wait_and_the_inbox_is_posted_at_once() -> None:
    route = Route(destinations=("web", SLACK, MATRIX), followup_seconds=60)
    ws = planning.intake_writes(elicitation(), route, NOW)

    inbox, slack, matrix = ws.copies
    assert (inbox.state, inbox.ref, inbox.posted, inbox.post) == (
        POSTED,
        InboxRef(elicitation().key),
        True,
        False,
    )
    assert inbox.followup_at == NOW + timedelta(seconds=60)
    assert [(c.state, c.post, c.followup_at) for c in (slack, matrix)] == [
        (WAITING, False, None),
        (WAITING, False, None),
    ]


def test_an_inbox_alone_has_no_follow_up() -> None:
    ws = planning.intake_writes(
        elicitation(), Route(destinations=("web",), followup_seconds=60), NOW
    )
    assert [c.followup_at for c in ws.copies] == [None]


def test_expired_on_arrival_every_copy_is_skipped_and_the_timeout_decides() -> None:
    e = elicitation(deadlines=Deadlines(expires_at=NOW, on_timeout="deny"))
    ws = planning.intake_writes(e, Route(destinations=(SLACK, MATRIX)), NOW)

    assert {c.state for c in ws.copies} == {DeliveryState.SKIPPED}
    assert not any(c.post for c in ws.copies)
    assert ws.deadlines == ()
    assert ws.close is not None
    assert ws.close.status is Status.EXPIRED
    assert ws.close.answer is not None
    assert ws.close.answer.respondent == dl.SYSTEM
    assert ws.close.detail == {"reason": "expired at intake"}


def test_a_revision_replaces_the_intake_deadlines_and_refreshes() -> None:
    e = elicitation(deadlines=at(600))
    ws = planning.revision_writes(e, NOW, {"in": 2})

    assert ws.replace == frozenset(dl.PLANNED_AT_INTAKE)
    assert ws.deadlines == (PlannedDeadline(DeadlineKind.EXPIRE, NOW + timedelta(seconds=600)),)
    assert (ws.refresh, ws.new_version, ws.close) == (True, False, None)
    assert ws.audits == (AuditWrite("revised", detail={"in": 2}),)

    past = planning.revision_writes(elicitation(deadlines=at(-1)), NOW)
    assert past.close == Close(Status.EXPIRED, None, {"reason": "expired at revision"})


def test_a_claim_replaces_its_lapse_and_refreshes() -> None:
    until = NOW + timedelta(minutes=30)
    ws = planning.claim_writes("slack:U0ALICE", until)
    assert ws.replace == {DeadlineKind.CLAIM_LAPSE}
    assert ws.deadlines == (PlannedDeadline(DeadlineKind.CLAIM_LAPSE, until),)
    assert ws.refresh
    assert ws.audits == (
        AuditWrite("claimed", "slack:U0ALICE", None, {"until": until.isoformat()}),
    )


# --------------------------------------------------------------------------- copies

ROUTE = Route(destinations=(SLACK, MATRIX, "web"), followup_seconds=60)


def test_an_accepted_post_plans_the_follow_up_while_a_later_copy_waits() -> None:
    copies = (copy(1, SLACK, POSTED), copy(2, MATRIX, WAITING), copy(3, "web", WAITING))
    ws = planning.posted_writes(
        ROUTE, delivery_id=1, destination=SLACK, pending=True, stale=False, copies=copies, now=NOW
    )
    assert ws == WriteSet(
        deadlines=(
            PlannedDeadline(DeadlineKind.FOLLOWUP, NOW + timedelta(seconds=60), {"after": 1}),
        )
    )
    assert planning.needs_copies(ROUTE, pending=True)
    assert not planning.needs_copies(ROUTE, pending=False)


def test_a_stale_post_is_updated_and_a_closed_one_plans_nothing() -> None:
    ws = planning.posted_writes(
        ROUTE, delivery_id=1, destination=SLACK, pending=False, stale=True, copies=(), now=NOW
    )
    assert ws == WriteSet(updates=(CopyUpdate(1, SLACK),))


def test_a_failed_primary_falls_back_to_the_next_waiting_destination() -> None:
    copies = (copy(1, SLACK, DeliveryState.FAILED), copy(2, MATRIX, WAITING))
    ws = planning.fall_back(ElicitationKey("k"), ROUTE, copies, 1, NOW)

    assert ws.activations == (
        Activation(
            2,
            MATRIX,
            PLANNED,
            post=True,
            audit=AuditWrite("fallback", detail={"from": SLACK, "to": MATRIX}),
        ),
    )
    assert planning.fall_back(ElicitationKey("k"), ROUTE, copies[:1], 1, NOW).empty
    escalation = copy(1, ONCALL, DeliveryState.FAILED, purpose=dl.ESCALATION)
    assert planning.fall_back(ElicitationKey("k"), ROUTE, (escalation, copies[1]), 1, NOW).empty


def test_the_inbox_activated_is_posted_at_once_with_its_follow_up() -> None:
    copies = (copy(1, SLACK, POSTED), copy(2, "web", WAITING), copy(3, MATRIX, WAITING))
    act = planning.activation(ElicitationKey("k"), ROUTE, copies[1], copies, NOW)
    assert (act.state, act.ref, act.posted, act.post) == (POSTED, InboxRef("k"), True, False)
    assert act.followup_at == NOW + timedelta(seconds=60)


# --------------------------------------------------------------------------- firing


def ctx(kind: DeadlineKind, copies: tuple[Copy, ...] = ()) -> FireContext:
    return FireContext(kind, NOW, NOW, elicitation(), Status.PENDING, ROUTE, copies)


def test_a_deferral_plans_a_new_row_at_the_claims_lapse() -> None:
    later = NOW + timedelta(minutes=5)
    fired = planning.firing_writes(
        ctx(DeadlineKind.ESCALATE), Firing(defer_to=later, audit="deferred"), 7
    )
    assert fired.outcome is FireOutcome.DEFERRED
    assert fired.writes.deadlines == (
        PlannedDeadline(DeadlineKind.ESCALATE, later, {"deferred": 7}),
    )
    assert [a.action for a in fired.writes.audits] == ["deferred"]


def test_a_reminder_queues_a_typed_notice_per_live_copy_and_refreshes() -> None:
    slack = copy(1, SLACK, POSTED)
    firing = dl.fire(ctx(DeadlineKind.REMIND, (slack,)))
    fired = planning.firing_writes(ctx(DeadlineKind.REMIND, (slack,)), firing, 1)

    assert fired.outcome is FireOutcome.FIRED
    [effect] = fired.writes.effects
    assert (effect.kind, effect.target, effect.delivery_id) == (EffectKind.NOTIFY, SLACK, 1)
    notice = effect.payload
    assert isinstance(notice, NotifyPayload)
    assert (notice.kind, notice.user, notice.thread) == (NoticeKind.REMINDER, "", slack.ref)
    assert (fired.writes.refresh, fired.writes.new_version) == (True, True)
    [audit] = fired.writes.audits
    assert (audit.action, audit.actor) == ("reminded", dl.SYSTEM)
    assert audit.detail == {"due_at": NOW.isoformat(), "copies": 1}


def test_an_escalation_adds_answerable_copies_and_a_close_is_fenced_by_the_store() -> None:
    post = dl.EscalationPost(ONCALL, 0, dl.Escalation(("slack:U0ADMIN",)))
    fired = planning.firing_writes(ctx(DeadlineKind.ESCALATE), Firing(escalations=(post,)), 1)
    [new] = fired.writes.copies
    assert (new.destination, new.purpose, new.state, new.post) == (
        ONCALL,
        dl.ESCALATION,
        PLANNED,
        True,
    )
    assert new.escalation == post.escalation

    closing = dl.Closing(Status.EXPIRED, None)
    closed = planning.firing_writes(ctx(DeadlineKind.EXPIRE), Firing(close=closing), 2)
    assert closed.outcome is FireOutcome.FIRED
    assert closed.writes.close == Close(Status.EXPIRED, None, {"deadline": "expire"})
    assert planning.firing_writes(ctx(DeadlineKind.EXPIRE), Firing(), 3).outcome is (
        FireOutcome.IDLE
    )


def test_a_notice_payload_round_trips() -> None:
    notice = NotifyPayload(NoticeKind.REMINDER, "", "hi", SlackRef("C0", "1.2"), ("slack:U1",))
    data = notice.to_json()
    assert data == {
        "kind": "reminder",
        "user": "",
        "thread": {"channel": "C0", "ts": "1.2", "key": "C0/1.2"},
        "text": "hi",
        "mentions": ["slack:U1"],
    }
    assert NotifyPayload.from_json(data) == notice


def test_a_post_to_a_platform_that_seeds_queues_its_seed_while_pending_only() -> None:
    route = Route(destinations=(MATRIX,))
    seeded = planning.posted_writes(
        route,
        delivery_id=1,
        destination=MATRIX,
        pending=True,
        stale=False,
        copies=(),
        now=NOW,
        seed=True,
    )
    assert [(e.kind, e.target, e.delivery_id) for e in seeded.effects] == [
        (EffectKind.SEED, MATRIX, 1)
    ]
    for pending, seed in ((False, True), (True, False)):
        ws = planning.posted_writes(
            route,
            delivery_id=1,
            destination=MATRIX,
            pending=pending,
            stale=False,
            copies=(),
            now=NOW,
            seed=seed,
        )
        assert ws.effects == ()


def test_a_refused_answer_given_in_a_direct_message_is_told_in_that_copy_s_thread() -> None:
    """A DM copy's destination names the person; the answer names the room it came from."""
    dm = Copy(2, "matrix:@alice:example.org", 1, dl.PRIMARY, POSTED, MatrixRef("!dm:x", "$p"))
    channel = Copy(1, SLACK, 0, dl.PRIMARY, POSTED, SlackRef("C0APPROVALS", "1.1"))
    assert planning.answered_on(dm, "matrix:!dm:x")
    assert planning.answered_on(channel, SLACK)
    assert not planning.answered_on(dm, SLACK)
    assert not planning.answered_on(copy(3, MATRIX, PLANNED), MATRIX), "not posted: no thread"

"""A reminder mentions only the approvers who have not voted (rule 9): "may approve" is who is
wanted; without approvers, the route's ``mention`` people as before."""

from __future__ import annotations

from datetime import timedelta

from bot.domain.deadlines import reminders, still_wanted
from bot.domain.model import Route
from bot.domain.quorum import Vote
from bot.domain.records import Copy, DeliveryState, Purpose
from bot.domain.refs import MatrixRef, SlackRef
from tests.unit.domain.builders import CREATED, sp_approval, sp_options

SLACK, MATRIX = "slack:C0APPROVALS", "matrix:!room:example.org"
POSTED, PRIMARY = DeliveryState.POSTED, Purpose("primary")
COPIES = (
    Copy(1, SLACK, 0, PRIMARY, POSTED, SlackRef("C0APPROVALS", "1.1")),
    Copy(2, MATRIX, 1, PRIMARY, POSTED, MatrixRef("!room:example.org", "$e")),
)
APPROVERS = ("slack:U0BOB", "slack:U0CAROL", "matrix:@dana:example.org", "admins")


def voted(who: str, *, revision: int | None = None, digest: str | None = None) -> Vote:
    return Vote(
        person=who,
        respondent=who,
        option_id="allow_once",
        via=SLACK,
        at=CREATED + timedelta(minutes=1),
        revision=revision,
        digest=digest,
    )


def test_without_approvers_the_routes_mention_people_are_reminded() -> None:
    route = Route(destinations=(SLACK, MATRIX), mention=("slack:U0ALICE",))
    [slack, matrix] = reminders(sp_options(), route, COPIES)
    assert (slack.mentions, matrix.mentions) == (("slack:U0ALICE",), ())


def test_only_the_approvers_who_have_not_voted_are_mentioned_on_their_platform() -> None:
    route = Route(
        destinations=(SLACK, MATRIX), mention=("slack:U0ALICE",), approvers=APPROVERS, quorum=2
    )
    [slack, matrix] = reminders(sp_options(), route, COPIES, (voted("slack:U0BOB"),))
    assert slack.mentions == ("slack:U0CAROL",)
    assert matrix.mentions == ("matrix:@dana:example.org",)


def test_a_vote_on_an_older_revision_is_cleared_so_its_approver_is_wanted_again() -> None:
    e = sp_approval()
    assert e.subject is not None
    route = Route(destinations=(SLACK,), approvers=("slack:U0BOB",), quorum=2)
    stale = voted("slack:U0BOB", revision=e.subject.revision - 1, digest=e.subject.digest)
    fresh = voted("slack:U0BOB", revision=e.subject.revision, digest=e.subject.digest)
    assert still_wanted(e, route, (stale,)) == ("slack:U0BOB",)
    assert still_wanted(e, route, (fresh,)) == ()


def test_approvers_that_are_no_one_person_leave_the_mention_people_who_have_not_voted() -> None:
    route = Route(
        destinations=(SLACK,), mention=("slack:U0ALICE", "slack:U0BOB"), approvers=("admins",)
    )
    assert still_wanted(sp_options(), route, (voted("slack:U0BOB"),)) == ("slack:U0ALICE",)

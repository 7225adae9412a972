"""A route's quorum in the one judgement (answer rule 9, :mod:`bot.domain.votes`): votes until
N distinct eligible people approved, the N-th vote is the answer carrying every approval, one
eligible reject decides at once, a second vote by the same person is refused, a new revision
clears the votes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.domain.actions import Choose, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.judge import Judgement, RecordAnswer, RecordRefusal, judge
from bot.domain.model import (
    Elicitation,
    Identity,
    Meaning,
    Option,
    RefusalCode,
    Route,
    Scope,
    Status,
)
from bot.domain.quorum import person_of
from bot.domain.records import StoredElicitation, Writeback, WritebackState
from bot.domain.views import prompt_view
from bot.domain.votes import RecordVote
from bot.domain.wording import waiting_line
from tests.unit.domain.builders import CREATED, NOW, PEOPLE, elicitation, sp_approval

ONCE = Option(id="once", label="Allow once", meaning=Meaning.APPROVE, scope=Scope.ONCE)
RUN = Option(id="run", label="Allow for the run", meaning=Meaning.APPROVE, scope=Scope.RUN)
DENY = Option(id="deny", label="Deny", meaning=Meaning.REJECT)
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
BOB = Identity(platform="matrix", user="@bob:example.org", display_name="Bob")
CAROL = Identity(platform="slack", user="U0CAROL", display_name="Carol")
DAVE = Identity(platform="slack", user="U0DAVE", display_name="Dave")
ASKER = Identity(platform="slack", user="U0AGENTUSER")  # its principal is the asker
APPROVERS = ("slack:U0ALICE", "matrix:@bob:example.org", "slack:U0CAROL", "slack:U0AGENTUSER")
TWO = Route(approvers=APPROVERS, quorum=2)


def question() -> Elicitation:
    return elicitation(options=(ONCE, RUN, DENY))


def stored(e: Elicitation, version: int = 1) -> StoredElicitation:
    return StoredElicitation(
        elicitation=e,
        status=Status.PENDING,
        answer=None,
        version=version,
        route=Route(),
        created_at=CREATED,
        updated_at=CREATED,
    )


def choose(state: StoredElicitation, who: Identity, option: str, route: Route = TWO) -> Judgement:
    action = Choose(state.elicitation.key, who, f"{who.platform}:X", (option,), shown=SHOWN_WHOLE)
    return judge(state, action, PEOPLE, NOW, route=route)


def voted(state: StoredElicitation, write: object) -> StoredElicitation:
    """What the store does with a vote that wins."""
    assert isinstance(write, RecordVote)
    return replace(state, votes=(*state.votes, write.vote), version=state.version + 1)


def test_votes_until_the_quorum_then_the_last_vote_is_the_answer_with_every_approver() -> None:
    state = stored(question())
    first = choose(state, ALICE, "run")
    assert first.outcome.kind is OutcomeKind.VOTED
    assert (
        first.outcome.message
        == "Your approval is recorded (1 of 2); waiting for one more approver."
    )
    assert isinstance(first.write, RecordVote)
    assert first.write.version == 1
    state = voted(state, first.write)
    assert waiting_line(state.elicitation, state.votes) == (
        "Approved by Alice (1 of 2) — waiting for one more approver"
    )

    again = choose(state, ALICE, "once")
    assert isinstance(again.write, RecordRefusal)
    assert again.write.code is RefusalCode.ALREADY_VOTED
    assert again.outcome.message == "You already approved this; waiting for 1 more approver(s)."

    last = choose(state, BOB, "once")
    assert last.outcome.kind is OutcomeKind.ANSWERED
    assert isinstance(last.write, RecordAnswer)
    answer = last.write.answer
    assert answer.option_ids == ("once",)  # the least permissive of what they chose
    assert answer.respondent == "matrix:@bob:example.org"
    assert [(a.by, a.option) for a in answer.approvals] == [
        ("slack:U0ALICE", "run"),
        ("matrix:@bob:example.org", "once"),
    ]
    assert [a["by"] for a in last.write.audit["approvals"]] == [
        "slack:U0ALICE",
        "matrix:@bob:example.org",
    ]


def test_one_eligible_reject_decides_at_once_and_a_quorum_of_one_is_the_first_answer() -> None:
    state = stored(question())
    state = voted(state, choose(state, ALICE, "once").write)
    deny = choose(state, CAROL, "deny")
    assert isinstance(deny.write, RecordAnswer)
    assert deny.write.answer.option_ids == ("deny",)
    assert deny.write.answer.approvals == ()
    one = choose(stored(question()), ALICE, "once", Route(approvers=APPROVERS))
    assert isinstance(one.write, RecordAnswer)


def test_a_new_revision_or_digest_clears_the_votes() -> None:
    e = sp_approval()
    e = e.model_copy(update={"options": (ONCE, RUN, DENY)})
    state = stored(e)
    state = voted(state, choose(state, ALICE, "once").write)
    subject = e.subject
    assert subject is not None
    revised = e.model_copy(update={"subject": subject.model_copy(update={"revision": 2})})
    again = choose(replace(state, elicitation=revised), ALICE, "once")
    assert again.outcome.kind is OutcomeKind.VOTED  # the old vote no longer counts
    assert "(1 of 2)" in again.outcome.message
    redigested = e.model_copy(update={"subject": subject.model_copy(update={"digest": "sha256:x"})})
    # Every copy says the votes were cleared, for a new revision as for a new digest.
    for changed in (revised, redigested):
        assert waiting_line(changed, state.votes) == (
            "The request changed after Alice approved, so those approvals no longer count"
            " — waiting for 2 more approvers"
        )
    again = choose(replace(state, elicitation=redigested), ALICE, "once")
    assert again.outcome.kind is OutcomeKind.VOTED  # same revision, new digest: cleared too
    assert "(1 of 2)" in again.outcome.message


PEOPLE_POOL = (ALICE, BOB, CAROL, DAVE, ASKER)
ELIGIBLE = {"slack:U0ALICE", "matrix:@bob:example.org", "slack:U0CAROL"}


@settings(max_examples=150, deadline=None)
@given(
    quorum=st.integers(min_value=1, max_value=4),
    steps=st.lists(
        st.tuples(st.sampled_from(PEOPLE_POOL), st.sampled_from(["once", "run", "deny"])),
        max_size=12,
    ),
)
def test_the_decision_comes_exactly_when_n_distinct_eligible_people_approved(
    quorum: int, steps: list[tuple[Identity, str]]
) -> None:
    """Whatever order people act in: an answer is recorded exactly when the N-th distinct
    eligible person approves, or at the first eligible reject; the asker and non-approvers never
    count; nothing is decided twice."""
    route = Route(approvers=APPROVERS, quorum=quorum)
    state = stored(question())
    approved: list[str] = []
    for who, option in steps:
        judged = choose(state, who, option, route)
        eligible = who.key in ELIGIBLE
        if not eligible:
            assert isinstance(judged.write, RecordRefusal)
            continue
        if option == "deny":
            assert isinstance(judged.write, RecordAnswer)
            return
        person = person_of(who.key, PEOPLE)
        if person in approved:
            assert isinstance(judged.write, RecordRefusal)
            assert judged.write.code is RefusalCode.ALREADY_VOTED
            continue
        approved.append(person)
        if len(approved) == quorum:
            assert isinstance(judged.write, RecordAnswer)
            assert len(judged.write.answer.approvals) == (quorum if quorum > 1 else 0)
            assert judged.write.answer.respondent == who.key
            return
        assert isinstance(judged.write, RecordVote)
        state = voted(state, judged.write)
    assert len(approved) < quorum


def test_the_copies_tally_line_counts_distinct_approvers_to_the_quorum() -> None:
    route = Route(approvers=APPROVERS, quorum=3)
    state = stored(question())
    for who in (ALICE, BOB):
        judged = choose(state, who, "once", route)
        state = voted(state, judged.write)
        if who is ALICE:
            assert waiting_line(state.elicitation, state.votes) == (
                "Approved by Alice (1 of 3) — waiting for 2 more approvers"
            )
    view = prompt_view(state, None, link="/#k", now=NOW)
    assert view.waiting == "Approved by Alice and Bob (2 of 3) — waiting for one more approver"
    assert view.result is None
    closed = prompt_view(replace(state, status=Status.CANCELLED), None, link="/#k", now=NOW)
    assert closed.waiting is None
    assert waiting_line(state.elicitation, ()) is None


def test_a_decision_refused_upstream_reopens_with_its_votes_cleared() -> None:
    state = stored(question())
    state = voted(state, choose(state, ALICE, "once").write)
    last = choose(state, BOB, "once")
    assert isinstance(last.write, RecordAnswer)
    reopened = Writeback(WritebackState.REFUSED, reopened=True, refused=last.write.answer)
    state = replace(state, writeback=reopened)
    again = choose(state, ALICE, "once")
    assert again.outcome.kind is OutcomeKind.VOTED
    assert "(1 of 2)" in again.outcome.message
    assert prompt_view(state, None, link="/#k", now=NOW).waiting is None

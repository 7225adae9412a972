"""Rule 9's refusal (:func:`bot.domain.deciders.not_approver`): who may decide, by name, and told
once per question (:func:`bot.domain.judge.told_before`). Pure: names come in the Standing the
surface built; the store's "told before" is given as the shell would."""

from __future__ import annotations

from dataclasses import replace

from bot.domain.actions import Choose, ClaimIt, OutcomeKind
from bot.domain.deciders import TOLD_BEFORE, not_approver, readable
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.judge import Judgement, RecordAnswer, RecordRefusal, judge, told_before
from bot.domain.model import Identity, RefusalCode, Route, Status
from bot.domain.policy import Standing
from bot.domain.records import StoredElicitation
from tests.unit.domain.builders import CREATED, NOW, PEOPLE, sp_options

CAROL = Identity(platform="slack", user="U0CAROL", display_name="Carol")
ROUTE = Route(
    approvers=(
        "slack:U0BOB",
        "slack:S0DEPLOY",
        "matrix:@dave:example.org",
        "web:erin",
        "web-group:ops",
        "matrix-power:50",
        "admins",
    )
)
NAMES = {"slack:U0BOB": "Bob", "slack:S0DEPLOY": "@deploy-team", "matrix:@dave:example.org": "Dave"}


def stored() -> StoredElicitation:
    return StoredElicitation(
        elicitation=sp_options(),
        status=Status.PENDING,
        answer=None,
        version=1,
        route=ROUTE,
        created_at=CREATED,
        updated_at=CREATED,
    )


def test_the_refusal_names_each_approver_by_the_name_the_surface_found() -> None:
    refusal = not_approver(ROUTE, Standing(names=NAMES))
    print(refusal.message)
    assert refusal.code is RefusalCode.NOT_APPROVER
    assert refusal.message == (
        "Only the approvers of this route can decide: Bob, @deploy-team, Dave, erin, "
        "web-group:ops, members with power level 50 or more in the Matrix room they answer in, "
        "the workspace admins."
    )
    assert refusal.once


def test_a_name_not_found_falls_back_to_the_entry_and_web_users_are_named_without_web() -> None:
    """A failed lookup leaves an entry out of ``names`` (or blank): the id, never an error."""
    names = {"slack:U0BOB": "  ", "slack:S0DEPLOY": "@deploy-team"}
    text = readable(ROUTE.approvers or (), names)
    assert text.startswith("slack:U0BOB, @deploy-team, matrix:@dave:example.org, erin, ")
    assert readable(("slack:U0BOB",)) == "slack:U0BOB"


def test_names_are_words_only_they_never_decide_who_may() -> None:
    """A Standing differing only in names is the same standing (equality, eligibility)."""
    assert Standing(power=50, names=NAMES) == Standing(power=50)
    named = Standing(names={"slack:U0CAROL": "Carol"})
    choose = Choose(sp_options().key, CAROL, "slack:C0APPROVALS", ("allow_once",),
                    shown=SHOWN_WHOLE, standing=named)  # fmt: skip
    judged = judge(stored(), choose, PEOPLE, NOW, route=Route(approvers=("slack:U0BOB",)))
    assert isinstance(judged.write, RecordRefusal)
    member = Standing(groups=frozenset({"slack:S0DEPLOY"}), names=NAMES)
    ok = judge(stored(), replace(choose, standing=member), PEOPLE, NOW, route=ROUTE)
    assert isinstance(ok.write, RecordAnswer)


def test_an_unread_group_is_named_too_and_that_refusal_is_told_every_time() -> None:
    """A refusal saying a lookup failed asks to try again: not "told once"."""
    route = Route(approvers=("slack:S0DEPLOY", "slack:U0BOB"))
    standing = Standing(unknown=frozenset({"slack:S0DEPLOY"}), names=NAMES)
    refusal = not_approver(route, standing)
    assert refusal.message.startswith(
        "Only the approvers of this route can decide: @deploy-team, Bob. Whether you are in "
        "@deploy-team could not be checked just now"
    )
    assert not refusal.once
    assert not not_approver(route, Standing(names=NAMES), power_unknown=True).once


def test_a_refusal_told_before_says_only_a_short_reminder_and_is_still_audited() -> None:
    key = sp_options().key
    choose = Choose(key, CAROL, "slack:C0APPROVALS", ("deny",), shown=SHOWN_WHOLE,
                    standing=Standing(names=NAMES))  # fmt: skip
    first = judge(stored(), choose, PEOPLE, NOW, route=ROUTE)
    assert isinstance(first.write, RecordRefusal)
    assert first.write.once
    assert first.outcome.kind is OutcomeKind.REFUSED
    assert not first.outcome.repeated
    assert first.outcome.message.startswith("Only the approvers of this route can decide: Bob,")

    again = told_before(first)
    assert again.write == first.write, "the audit row is written all the same"
    assert again.outcome.kind is OutcomeKind.REFUSED
    assert again.outcome.repeated
    assert again.outcome.message == TOLD_BEFORE
    assert again.outcome.refusal is not None
    assert again.outcome.refusal.message == TOLD_BEFORE
    assert again.outcome.refusal.code is RefusalCode.NOT_APPROVER

    claim = judge(stored(), ClaimIt(key, CAROL, "slack"), PEOPLE, NOW, route=ROUTE)
    assert isinstance(claim.write, RecordRefusal)
    assert claim.write.once, "a claim by a non-approver is another attempt on the question"
    assert told_before(claim).outcome.repeated


def test_only_a_refusal_told_once_is_ever_shortened() -> None:
    """Other refusals (the asker, admin-only, a lookup that failed) and answers are told as
    they are, whatever the store says."""
    key = sp_options().key
    unread = Standing(unknown=frozenset({"slack:S0DEPLOY"}))
    choose = Choose(key, CAROL, "slack:C0APPROVALS", ("deny",), shown=SHOWN_WHOLE,
                    standing=unread)  # fmt: skip
    failed = judge(stored(), choose, PEOPLE, NOW, route=ROUTE)
    assert isinstance(failed.write, RecordRefusal)
    assert not failed.write.once
    assert told_before(failed) == failed
    answered = judge(stored(), choose, PEOPLE, NOW, route=Route())
    assert isinstance(answered.write, RecordAnswer)
    assert told_before(answered) == answered
    assert told_before(Judgement(answered.outcome)) == Judgement(answered.outcome)

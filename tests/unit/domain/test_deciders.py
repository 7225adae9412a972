"""Answer rule 9 on a route (:mod:`bot.domain.deciders` through ``rules.who_may_decide``):
only the approvers decide, rejecting by anyone when the route allows it, approving only on the
surfaces ``approve_on`` names."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from bot.domain.actions import ClaimIt, Reply, Submit
from bot.domain.judge import RecordAnswer, RecordClaim, RecordRefusal, judge
from bot.domain.model import Answer, Identity, Refusal, RefusalCode, Route, Status
from bot.domain.policy import Standing
from bot.domain.records import StoredElicitation
from bot.domain.rules import judge as judge_rules
from tests.unit.domain.builders import (
    ADMIN,
    BOB,
    CREATED,
    NOW,
    PEOPLE,
    attempt,
    sp_free_text,
    sp_options,
)

CAROL = Identity(platform="slack", user="U0CAROL", display_name="Carol")
ALICE_ON_MATRIX = Identity(platform="matrix", user="@alice2:example.org")
PEOPLE_LINKED = PEOPLE.model_copy(
    update={"principals": {**PEOPLE.principals, "matrix:@alice2:example.org": "usr_alice"}}
)
ONLY_BOB = Route(approvers=("matrix:@bob:example.org", "admins"))


def result(route: Route, *args: Any, **kwargs: Any) -> Answer | Refusal:
    e = sp_options()
    return judge_rules(e, attempt(*args, **kwargs), PEOPLE, NOW, route=route)


def test_a_route_without_approvers_lets_anyone_but_the_asker_decide() -> None:
    assert isinstance(result(Route(), CAROL, "allow_once"), Answer)


def test_only_the_approvers_decide_and_the_others_are_told_who_may() -> None:
    assert isinstance(result(ONLY_BOB, BOB, "allow_once"), Answer)
    assert isinstance(result(ONLY_BOB, ADMIN, "deny"), Answer)
    refusal = result(ONLY_BOB, CAROL, "deny")
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.NOT_APPROVER
    assert refusal.message == (
        "Only the approvers of this route can decide: matrix:@bob:example.org, "
        "the workspace admins."
    )
    assert result(ONLY_BOB, CAROL, "allow_once").code is RefusalCode.NOT_APPROVER  # type: ignore[union-attr]


def test_an_approver_is_the_same_person_on_another_surface_by_principal() -> None:
    route = Route(approvers=("slack:U0ALICE",))
    e = sp_options()
    linked = judge_rules(e, attempt(ALICE_ON_MATRIX, "deny"), PEOPLE_LINKED, NOW, route=route)
    assert isinstance(linked, Answer)
    unlinked = judge_rules(e, attempt(ALICE_ON_MATRIX, "deny"), PEOPLE, NOW, route=route)
    assert isinstance(unlinked, Refusal)


def test_anyone_may_reject_lets_others_reject_but_not_approve_or_write() -> None:
    route = ONLY_BOB.model_copy(update={"anyone_may_reject": True})
    assert isinstance(result(route, CAROL, "deny"), Answer)
    refusal = result(route, CAROL, "allow_once")
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.NOT_APPROVER
    e = sp_free_text()
    text = judge_rules(e, attempt(CAROL, text="main"), PEOPLE, NOW, route=route)
    assert isinstance(text, Refusal)
    assert text.code is RefusalCode.NOT_APPROVER


def test_only_an_approver_claims_even_where_anyone_may_reject() -> None:
    route = ONLY_BOB.model_copy(update={"anyone_may_reject": True})
    key = sp_options().key
    carol = judge(stored(), ClaimIt(key, CAROL, "slack"), PEOPLE, NOW, route=route)
    assert isinstance(carol.write, RecordRefusal)
    assert carol.write.code is RefusalCode.NOT_APPROVER
    bob = judge(stored(), ClaimIt(key, BOB, "matrix"), PEOPLE, NOW, route=route)
    assert isinstance(bob.write, RecordClaim)


def test_a_group_the_surface_could_not_read_counts_for_nobody_and_the_refusal_says_so() -> None:
    """Fail closed: a Slack user group whose members could not be read (``Standing.unknown``)
    is one the person is not in; they are told it could not be checked, on every path (a
    choice, a claim); an unread group the route does not name is not mentioned."""
    route = Route(approvers=("slack:S0DEPLOY", "slack:U0BOB"))
    unread = Standing(unknown=frozenset({"slack:S0DEPLOY", "slack:S0OTHER"}))
    member = Standing(groups=frozenset({"slack:S0DEPLOY"}))
    e = sp_options()
    chose = attempt(CAROL, "allow_once").model_copy(update={"standing": unread})
    refusal = judge_rules(e, chose, PEOPLE, NOW, route=route)
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.NOT_APPROVER
    print(refusal.message)
    assert refusal.message == (
        "Only the approvers of this route can decide: slack:S0DEPLOY, slack:U0BOB. Whether you "
        "are in slack:S0DEPLOY could not be checked just now, so it did not count: try again in "
        "a minute (if it keeps failing, tell an elicitbot admin)."
    )
    counted = attempt(CAROL, "allow_once").model_copy(update={"standing": member})
    assert isinstance(judge_rules(e, counted, PEOPLE, NOW, route=route), Answer)
    claim = ClaimIt(e.key, CAROL, "slack", standing=unread)
    claimed = judge(stored(), claim, PEOPLE, NOW, route=route)
    assert isinstance(claimed.write, RecordRefusal)
    assert claimed.outcome.message == refusal.message


def test_free_text_takes_the_first_eligible_answer_only() -> None:
    e = sp_free_text()
    refused = judge_rules(e, attempt(CAROL, text="main"), PEOPLE, NOW, route=ONLY_BOB)
    assert isinstance(refused, Refusal)
    assert isinstance(
        judge_rules(e, attempt(BOB, text="main"), PEOPLE, NOW, route=ONLY_BOB), Answer
    )


def test_approve_on_counts_approving_only_on_the_named_surfaces() -> None:
    route = Route(approve_on=("web",))
    refusal = result(route, CAROL, "allow_once")
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.APPROVE_ELSEWHERE
    assert refusal.message.startswith("Approving this request counts only in the web inbox")
    assert isinstance(result(route, CAROL, "allow_once", via="web"), Answer)
    assert isinstance(result(route, CAROL, "deny"), Answer)  # rejecting counts everywhere


def stored() -> StoredElicitation:
    return StoredElicitation(
        elicitation=sp_options(),
        status=Status.PENDING,
        answer=None,
        version=1,
        route=Route(),
        created_at=CREATED,
        updated_at=CREATED,
    )


def test_every_action_meets_the_route_policy_in_the_one_judgement() -> None:
    """A reply, a form, a claim: a non-approver is refused and only an audit row is written."""
    key = sp_options().key
    for action in (
        Reply(key, CAROL, "slack:C0APPROVALS", "deny"),
        Submit(key, CAROL, "web", option_ids=("deny",)),
        ClaimIt(key, CAROL, "slack"),
    ):
        judged = judge(stored(), action, PEOPLE, NOW, route=ONLY_BOB)
        assert isinstance(judged.write, RecordRefusal), action
        assert judged.write.code is RefusalCode.NOT_APPROVER
    assert isinstance(
        judge(stored(), ClaimIt(key, BOB, "matrix"), PEOPLE, NOW, route=ONLY_BOB).write, RecordClaim
    )
    reply = judge(
        stored(), Reply(key, BOB, "matrix:!room:example.org", "deny"), PEOPLE, NOW, route=ONLY_BOB
    )
    assert isinstance(reply.write, RecordAnswer)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"quorum": 0}, "quorum"),
        ({"approve_on": ("email",)}, "approve_on"),
        ({"approvers": ("bob",)}, "approvers"),
        ({"approvers": ()}, "approvers"),
    ],
)
def test_a_route_refuses_a_policy_it_cannot_enforce(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        Route(**changes)
    assert exc.value.errors()[0]["loc"] == (field,)

"""Answer rule 9: approver entries, eligibility and the quorum (bot.domain.policy, quorum)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.domain.model import Identity, People
from bot.domain.policy import (
    NO_STANDING,
    ApproverKind,
    Standing,
    check_approvers,
    check_quorum,
    check_surfaces,
    parse_approver,
)
from bot.domain.quorum import (
    Vote,
    approvers_of,
    current,
    decided_option,
    eligible,
    person_of,
    tally,
)
from tests.unit.domain.builders import (
    ADMIN,
    AGENT_ID,
    ALICE,
    BOB,
    CREATED,
    PEOPLE,
    sp_approval,
    sp_options,
)

FAST = settings(max_examples=200, deadline=None)


# --- entries ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("slack:U0BOB", ApproverKind.PERSON, "slack:U0BOB"),
        ("slack:W0GRID", ApproverKind.PERSON, "slack:W0GRID"),
        ("matrix:@bob:example.org", ApproverKind.PERSON, "matrix:@bob:example.org"),
        ("web:alice", ApproverKind.PERSON, "web:alice"),
        ("slack:S0DEPLOYERS", ApproverKind.SLACK_GROUP, "slack:S0DEPLOYERS"),
        ("matrix-power:50", ApproverKind.MATRIX_POWER, "50"),
        ("matrix-power:007", ApproverKind.MATRIX_POWER, "7"),
        ("web-group:ops", ApproverKind.WEB_GROUP, "web-group:ops"),
        ("admins", ApproverKind.ADMINS, ""),
    ],
)
def test_every_kind_of_entry_is_read(text: str, kind: ApproverKind, value: str) -> None:
    parsed = parse_approver(text)
    assert (parsed.kind, parsed.value, parsed.text) == (kind, value, text)


@pytest.mark.parametrize(
    "text",
    ["", "bob", "slack:", "slack:u0bob", "slack:C0CHANNEL", "matrix:!room:example.org",
     "matrix-power:", "matrix-power:high", "web-group:", "web:", "Admins", " admins", "discord:1"],
)  # fmt: skip
def test_an_unreadable_entry_is_refused_saying_what_fits(text: str) -> None:
    with pytest.raises(ValueError, match="is not an approver: use a person"):
        parse_approver(text)


def test_the_policy_keys_are_checked() -> None:
    assert check_approvers(None) is None
    assert check_approvers(["admins", "slack:S0OPS"]) == ("admins", "slack:S0OPS")
    with pytest.raises(ValueError, match="at least one approver"):
        check_approvers([])
    with pytest.raises(ValueError, match="names admins more than once"):
        check_approvers(["admins", "admins"])
    assert check_quorum(1) == 1
    for bad in (0, -1, 51):
        with pytest.raises(ValueError, match="from 1 to 50"):
            check_quorum(bad)
    assert check_surfaces(None) is None
    assert check_surfaces(["web"]) == ("web",)
    with pytest.raises(ValueError, match="'email': not a surface"):
        check_surfaces(["web", "email"])
    with pytest.raises(ValueError, match="more than once"):
        check_surfaces(["web", "web"])


# --- who may decide ------------------------------------------------------------------------------

BOB_SLACK = Identity(platform="slack", user="U0BOB", display_name="Bob")
CAROL_WEB = Identity(platform="web", user="carol", display_name="Carol")
BOB_KEYS = {"slack:U0BOB": "usr_bob", "matrix:@bob:example.org": "usr_bob"}
LINKED = PEOPLE.model_copy(update={"principals": {**PEOPLE.principals, **BOB_KEYS}})


def test_unset_approvers_let_anyone_decide() -> None:
    assert eligible(None, BOB_SLACK, NO_STANDING, PEOPLE)


def test_a_person_entry_admits_them_and_their_linked_identities() -> None:
    only_bob = approvers_of(["slack:U0BOB"])
    assert eligible(only_bob, BOB_SLACK, NO_STANDING, PEOPLE)
    assert not eligible(only_bob, ALICE, NO_STANDING, PEOPLE)
    assert not eligible(only_bob, BOB, NO_STANDING, PEOPLE), "not linked: another person"
    assert eligible(only_bob, BOB, NO_STANDING, LINKED), "linked by [people.principals]"


def test_groups_power_and_admins() -> None:
    policy = approvers_of(["slack:S0DEPLOYERS", "matrix-power:50", "web-group:ops", "admins"])
    assert eligible(policy, BOB_SLACK, Standing(groups=frozenset({"slack:S0DEPLOYERS"})), PEOPLE)
    assert not eligible(policy, BOB_SLACK, Standing(groups=frozenset({"slack:S0OTHER"})), PEOPLE)
    assert eligible(policy, BOB, Standing(power=50), PEOPLE)
    assert eligible(policy, BOB, Standing(power=100), PEOPLE)
    assert not eligible(policy, BOB, Standing(power=49), PEOPLE)
    assert not eligible(policy, BOB_SLACK, Standing(power=100), PEOPLE), "power is Matrix's"
    assert eligible(policy, CAROL_WEB, Standing(groups=frozenset({"web-group:ops"})), PEOPLE)
    assert not eligible(policy, CAROL_WEB, Standing(groups=frozenset({"web-group:dev"})), PEOPLE)
    assert eligible(policy, ADMIN, NO_STANDING, PEOPLE)
    assert not eligible(policy, ALICE, NO_STANDING, PEOPLE)


# --- the quorum ---------------------------------------------------------------------------------


def vote(person: str, option: str = "allow_once", *, minutes: int = 0, **more: object) -> Vote:
    values: dict[str, object] = {
        "person": person,
        "respondent": f"slack:{person}",
        "option_id": option,
        "via": "slack:C0APPROVALS",
        "at": CREATED + timedelta(minutes=minutes),
    }
    values.update(more)
    return Vote.model_validate(values)


def test_one_vote_per_person_and_only_approving_options_count() -> None:
    e = sp_options()
    t = tally(e, [vote("U1"), vote("U1", "allow_always"), vote("U2", "deny")], 2)
    assert [v.person for v in t.approvals] == ["U1"]
    assert (t.count, t.missing, t.reached) == (1, 1, False)
    assert t.has_voted("U1")
    assert not t.has_voted("U2")
    assert tally(e, [vote("U1"), vote("U3")], 2).reached


def test_a_new_revision_or_digest_clears_the_votes() -> None:
    e = sp_approval()
    assert e.subject is not None
    revision, digest = e.subject.revision, e.subject.digest
    old = vote("U1", revision=revision - 1, digest=digest)
    other = vote("U2", revision=revision, digest="sha256:other")
    now = vote("U3", revision=revision, digest=digest)
    assert current(e, [old, other, now]) == (now,)
    assert tally(e, [old, other, now], 2).count == 1


def test_the_least_permissive_approval_is_what_a_quorum_decides() -> None:
    e = sp_options()
    assert decided_option(e, [vote("U1", "allow_always"), vote("U2")]).id == "allow_once"
    assert decided_option(e, [vote("U1", "allow_always")]).id == "allow_always"
    with pytest.raises(ValueError, match="no counted vote"):
        decided_option(e, [])


people_ids = st.sampled_from(["U1", "U2", "U3", "U4", "U5", AGENT_ID])
ballots = st.lists(
    st.tuples(people_ids, st.sampled_from(["allow_once", "allow_always", "deny"])), max_size=12
)


@FAST
@given(ballots, st.integers(min_value=1, max_value=5))
def test_the_quorum_is_reached_exactly_at_n_distinct_approvers_never_the_asker(
    given_votes: list[tuple[str, str]], quorum: int
) -> None:
    e = sp_options()
    votes = [vote(p, o, minutes=i) for i, (p, o) in enumerate(given_votes)]
    approvers = {p for p, o in given_votes if o != "deny" and p != AGENT_ID}
    t = tally(e, votes, quorum)
    assert t.count == len(approvers)
    assert t.reached == (len(approvers) >= quorum)
    assert AGENT_ID not in {v.person for v in t.approvals}, "the asker never counts"
    assert len({v.person for v in t.approvals}) == t.count, "one vote per person"
    if t.reached:
        assert decided_option(e, t.approvals).approving


@FAST
@given(st.sampled_from(["slack:U0ALICE", "matrix:@bob:example.org", "web:carol"]))
def test_a_person_is_their_principal_when_linked(key: str) -> None:
    people = People(principals={key: "usr_x"})
    assert person_of(key, people) == "usr_x"
    assert person_of(key, People()) == key

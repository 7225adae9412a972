"""The tally line names who may still approve (answer rule 9, issue 23): the route's approver
entries minus the people who already voted, by :func:`bot.domain.deciders.readable`."""

from __future__ import annotations

from bot.domain.model import Status
from bot.domain.ports import PromptView
from bot.domain.quorum import Vote
from bot.domain.wording import still_approve, waiting_line
from tests.unit.domain.builders import NOW, sp_options

LINE = "Approved by Alice (1 of 2) — waiting for one more approver"
ROUTE = ("slack:U0ALICE", "matrix:@bob:example.org", "web:carol", "slack:S0DEPLOY")


def vote(respondent: str, person: str | None = None, name: str = "Alice") -> Vote:
    return Vote(
        person=person or respondent,
        respondent=respondent,
        display_name=name,
        option_id="allow_once",
        via=respondent.split(":", 1)[0] + ":C0A",
        at=NOW,
        needed=2,
    )


def test_who_voted_is_left_out_and_the_rest_are_named_readably() -> None:
    line = waiting_line(sp_options(), (vote("slack:U0ALICE"),), ROUTE)
    assert line == f"{LINE}: matrix:@bob:example.org, carol, slack:S0DEPLOY"
    assert "<@" not in (line or "")  # a readable id, never a Slack mention


def test_a_person_who_voted_on_another_surface_is_left_out_by_their_principal() -> None:
    # Alice voted from the web; her Slack entry is linked to the same principal.
    alice_on_web = vote("web:alice", person="usr_alice")
    principals = {"slack:U0ALICE": "usr_alice"}
    assert still_approve(ROUTE, (alice_on_web,), principals) == ROUTE[1:]
    # Without the link, her Slack entry is someone else as far as the tally knows.
    assert still_approve(ROUTE, (alice_on_web,), {}) == ROUTE
    # An entry whose identity voted is left out even when the vote names its principal.
    slack_alice = vote("slack:U0ALICE", person="usr_alice")
    assert still_approve(ROUTE, (slack_alice,), principals) == ROUTE[1:]


def test_groups_power_levels_and_admins_stay_after_a_member_voted() -> None:
    entries = ("slack:S0DEPLOY", "web-group:ops", "matrix-power:50", "admins", "web:carol")
    line = waiting_line(sp_options(), (vote("web:carol", name="Carol"),), entries)
    assert line == (
        "Approved by Carol (1 of 2) — waiting for one more approver: slack:S0DEPLOY, "
        "web-group:ops, members with power level 50 or more in the Matrix room they answer in, "
        "the workspace admins"
    )


def test_no_approvers_on_the_route_keeps_todays_line() -> None:
    assert waiting_line(sp_options(), (vote("slack:U0ALICE"),)) == LINE
    assert waiting_line(sp_options(), (vote("slack:U0ALICE"),), None) == LINE


def test_the_view_carries_the_routes_approvers_into_its_tally_line() -> None:
    view = PromptView(
        elicitation=sp_options(),
        status=Status.PENDING,
        answer=None,
        version=2,
        link="/#k",
        now=NOW,
        votes=(vote("web:alice", person="usr_alice"),),
        approvers=ROUTE,
        principals={"slack:U0ALICE": "usr_alice"},
    )
    assert view.waiting == f"{LINE}: matrix:@bob:example.org, carol, slack:S0DEPLOY"

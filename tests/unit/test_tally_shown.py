"""Every surface shows a quorum's tally on a waiting question (answer rule 9): the line comes
from the one wording table (:func:`bot.domain.wording.waiting_line`)."""

from __future__ import annotations

import json

from adapters.matrix.wording import timeline
from adapters.slack.render import render
from bot.domain.model import Status
from bot.domain.ports import PromptView
from bot.domain.quorum import Vote
from tests.unit.domain.builders import NOW, sp_options

LINE = "Approved by Alice (1 of 2) — waiting for one more approver"


WHO = ("slack:U0ALICE", "matrix:@bob:example.org", "web:carol", "slack:S0DEPLOY")
"""The route's approvers: Alice voted, so the line names the others (her entry left out)."""
STILL = f"{LINE}: matrix:@bob:example.org, carol, slack:S0DEPLOY"


def view(status: Status = Status.PENDING, approvers: tuple[str, ...] | None = None) -> PromptView:
    vote = Vote(
        person="usr_alice",
        respondent="slack:U0ALICE",
        display_name="Alice",
        option_id="allow_once",
        via="slack:C0A",
        at=NOW,
        needed=2,
    )
    e = sp_options()
    return PromptView(
        elicitation=e,
        status=status,
        answer=None,
        version=2,
        link="/#k",
        now=NOW,
        votes=(vote,),
        approvers=approvers,
        principals={"slack:U0ALICE": "usr_alice"},
    )


def test_slack_and_matrix_copies_show_the_tally_while_waiting() -> None:
    assert view().waiting == LINE
    assert LINE in timeline(view())
    _, blocks = render(view())
    assert LINE in json.dumps(blocks, ensure_ascii=False)


def test_every_copy_names_who_may_still_approve_at_1_of_2() -> None:
    """Slack, Matrix and the web card show who of the route's approvers may still approve:
    readable ids (no names are known at render time), never a Slack mention."""
    from adapters.matrix.render import message_content
    from adapters.web.cards import card_view

    v = view(approvers=WHO)
    assert v.waiting == STILL
    _, blocks = render(v)
    tally = [b for b in blocks if STILL in json.dumps(b, ensure_ascii=False)]
    print("Slack at 1 of 2, Block Kit:", json.dumps(tally, indent=2, ensure_ascii=False))
    assert tally
    assert "<@" not in json.dumps(tally, ensure_ascii=False)  # approvers are not pinged
    content = message_content(v)
    print("Matrix at 1 of 2, HTML:", content["formatted_body"])
    assert STILL in content["body"]
    assert STILL in content["formatted_body"]
    assert card_view(v).waiting == STILL


def test_a_closed_copy_shows_no_tally() -> None:
    assert view(Status.CANCELLED).waiting is None
    assert "Approved by" not in timeline(view(Status.CANCELLED))


def test_every_copy_says_a_new_digest_cleared_the_votes() -> None:
    """A new digest of the approval subject (same revision) clears the votes: the Slack blocks,
    the Matrix message and the web card (the same ``view.waiting``) say so."""
    from adapters.matrix.render import message_content
    from tests.unit.domain.builders import sp_approval

    e = sp_approval()
    assert e.subject is not None
    old = Vote(
        person="slack:U0ALICE",
        respondent="slack:U0ALICE",
        display_name="Alice",
        option_id="allow_once",
        via="slack:C0A",
        at=NOW,
        revision=e.subject.revision,
        digest="sha256:" + "0" * 64,  # given on the digest before this one
        needed=2,
    )
    v = PromptView(
        elicitation=e, status=Status.PENDING, answer=None, version=3, link="/#k", now=NOW,
        votes=(old,),
    )  # fmt: skip
    cleared = (
        "The request changed after Alice approved, so those approvals no longer count"
        " — waiting for 2 more approvers"
    )
    assert v.waiting == cleared
    _, blocks = render(v)
    tally = [b for b in blocks if cleared in json.dumps(b, ensure_ascii=False)]
    print(json.dumps(tally, indent=2, ensure_ascii=False))  # the Block Kit of the line
    assert tally
    content = message_content(v)
    print(content["formatted_body"])  # the Matrix HTML
    assert cleared in content["body"]
    assert "Approved by" not in json.dumps(blocks, ensure_ascii=False)

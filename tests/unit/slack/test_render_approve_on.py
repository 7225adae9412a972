"""A Slack copy of a request whose route counts approving only in the web inbox
(``approve_on = ["web"]``): an "Approve in the web inbox" link button where the approving buttons
were, in the message, a cut message and the review modal; the reply modal offers no approving
option; every rendering valid Block Kit; without ``approve_on`` nothing changes."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from adapters.slack import render
from adapters.slack.modals.reply import reply_modal
from adapters.slack.review.modal import meta_for, pages_of, review_modal
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import AnswerMode, Status
from bot.domain.ports import PromptView
from tests.showcase import NOW, deploy_elicitation, long_elicitation
from tests.slack_fake import block_kit_problems, view_problems

LINK = "https://inbox.example.com/#deploy"


def view_of(e: Any, **changes: Any) -> PromptView:
    view = PromptView(e, Status.PENDING, None, 1, LINK, NOW, approve_on=("web",))
    return replace(view, **changes)


def elements(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [el for b in blocks if b["type"] == "actions" for el in b["elements"]]


def labels(blocks: list[dict[str, Any]]) -> list[str]:
    return [el["text"]["text"] for el in elements(blocks) if el["type"] == "button"]


def web_links(blocks: list[dict[str, Any]]) -> list[str]:
    return [el["url"] for el in elements(blocks) if el["action_id"] == render.WEB_LINK_ACTION]


def test_the_message_puts_the_link_where_approve_was_and_keeps_deny() -> None:
    e = deploy_elicitation()
    before = render.render(view_of(e, approve_on=None))[1]
    assert "Approve" in labels(before)
    text, blocks = render.render(view_of(e))
    print(json.dumps(blocks, indent=2, ensure_ascii=False))
    assert block_kit_problems(blocks, text) == []
    assert web_links(blocks) == [LINK]
    assert "Approve" not in labels(blocks)
    assert "Deny" in labels(blocks)
    # The link stands first in the row, where the approving button stood.
    assert labels(blocks).index("Approve in the web inbox") == labels(before).index("Approve")
    # Approving counts on Slack too: exactly as without approve_on.
    assert render.render(view_of(e, approve_on=("slack", "web")))[1] == before


def test_a_cut_message_and_its_review_link_to_the_inbox_and_never_offer_approve() -> None:
    view = view_of(long_elicitation())
    assert not render.shown(view).whole
    text, blocks = render.render(view)
    assert block_kit_problems(blocks, text) == []
    assert web_links(blocks) == [LINK]
    assert "Review…" in labels(blocks)
    meta = meta_for(view, channel="C0APPROVALS", message_ts="1.000100", thread_ts=None)
    last = replace(meta, page=len(pages_of(view)) - 1)
    for m in (meta, last):
        modal = review_modal(view, m)
        assert view_problems(modal) == []
        assert web_links(modal["blocks"]) == [LINK]
        assert "Approve" not in labels(modal["blocks"])
    said = json.dumps(review_modal(view, meta)["blocks"], ensure_ascii=False)
    assert "Approving this request counts only in the web inbox." in said


def test_a_multiple_choice_gets_the_link_as_its_own_row_and_a_relative_link_none() -> None:
    e = deploy_elicitation().model_copy(update={"answer_mode": AnswerMode.MULTI_CHOICE})
    text, blocks = render.render(view_of(e))
    assert block_kit_problems(blocks, text) == []
    assert web_links(blocks) == [LINK]
    relative = render.render(view_of(deploy_elicitation(), link="/#deploy"))[1]
    assert web_links(relative) == []  # Slack opens no relative address: the line still says
    assert "Approve" not in labels(relative)
    said = json.dumps(relative, ensure_ascii=False)
    assert "Approving this request counts only in the web inbox." in said


def test_the_reply_modal_offers_no_approving_option() -> None:
    e = deploy_elicitation().model_copy(update={"answer_mode": AnswerMode.CHOICE_OR_TEXT})
    modal = reply_modal(view_of(e), channel="C0APPROVALS", message_ts="1.0", shown=SHOWN_WHOLE)
    assert view_problems(modal) == []
    offered = json.dumps(modal["blocks"], ensure_ascii=False)
    assert "Deny" in offered
    plain = json.dumps(
        reply_modal(
            view_of(e, approve_on=None), channel="C0APPROVALS", message_ts="1.0", shown=SHOWN_WHOLE
        )["blocks"],
        ensure_ascii=False,
    )
    assert '"Approve"' in plain
    assert '"Approve"' not in offered

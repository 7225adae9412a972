"""adapters/slack/review/modal.py: what a review modal showed is decided from our own metadata and
a fresh rendering, never from the payload; approving only on the last page; the file holds all."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from adapters.slack import render
from adapters.slack.modals.reply import closes_all, reply_modal
from adapters.slack.review.modal import (
    OPTION_ACTION,
    PAGE_ACTION,
    ReviewMeta,
    content_hash,
    file_modal,
    file_text,
    meta_for,
    pages_of,
    read_meta,
    read_review_click,
    reply_shown,
    review_modal,
    review_shown,
)
from bot.domain.disclosure import SHOWN_WHOLE, decisive
from bot.domain.model import AnswerMode, Identity, Status
from bot.domain.ports import PromptView
from tests.showcase import NOW, deploy_elicitation, long_elicitation
from tests.slack_fake import view_problems

ALICE = Identity(platform="slack", user="U0ALICE", team="T0ACME")


def view_of(e: object, **changes: object) -> PromptView:
    view = PromptView(
        elicitation=e,  # type: ignore[arg-type]
        status=Status.PENDING,
        answer=None,
        version=1,
        link="http://127.0.0.1:8787/#x",
        now=NOW,
    )
    return replace(view, **changes)  # type: ignore[arg-type]


def meta_of(view: PromptView) -> ReviewMeta:
    return meta_for(view, channel="C0APPROVALS", message_ts="1.000100", thread_ts=None)


def buttons(modal: dict[str, object]) -> list[dict[str, object]]:
    return [
        el
        for b in modal["blocks"]  # type: ignore[attr-defined]
        if b["type"] == "actions"
        for el in b["elements"]
        if el["type"] == "button"
    ]


def test_approving_is_whole_only_on_the_last_page_of_the_unchanged_request() -> None:
    view = view_of(long_elicitation())
    meta = meta_of(view)
    last = len(pages_of(view)) - 1
    assert last > 0

    assert not review_shown(meta, view).whole
    assert review_shown(replace(meta, page=last), view) == SHOWN_WHOLE
    changed = long_elicitation().model_copy(update={"question": "Something else entirely."})
    assert not review_shown(replace(meta, page=last), view_of(changed)).whole
    assert not review_shown(replace(meta, page=last, pages=last), view).whole


def test_every_page_keeps_to_the_modal_limits_and_approve_is_on_the_last_only() -> None:
    view = view_of(long_elicitation())
    meta = meta_of(view)
    pages = len(pages_of(view))
    for page in range(pages):
        modal = review_modal(view, replace(meta, page=page))
        assert view_problems(modal) == [], page
        assert read_meta(modal["private_metadata"]) == replace(meta, page=page, pages=pages)
        labels = {b["text"]["text"] for b in buttons(modal)}  # type: ignore[index]
        assert "Deny" in labels
        assert ("Approve" in labels) is (page == pages - 1)


def test_a_click_reads_the_metadata_we_wrote_not_the_value() -> None:
    view = view_of(long_elicitation())
    modal = review_modal(view, meta_of(view))
    body = {"view": {**modal, "id": "V1", "hash": "h1"}, "trigger_id": "t1"}
    action = {"action_id": f"{OPTION_ACTION}.0", "value": json.dumps({"o": "approve", "p": 99})}

    click = read_review_click(body, action, ALICE)

    assert click is not None
    assert click.meta.page == 0
    assert (click.view_id, click.view_hash) == ("V1", "h1")
    assert not review_shown(click.meta, view).whole
    assert read_review_click({"view": {"private_metadata": "{}"}}, action, ALICE) is None
    assert PAGE_ACTION.startswith("elicitbot.review.")


def test_the_file_holds_every_decisive_string_whole_and_the_modal_names_it() -> None:
    e = long_elicitation()
    view = view_of(e)
    text = file_text(view)
    for piece in decisive(e):
        for t in piece.texts:
            assert t in text, piece.where

    attached = file_modal(view, meta_of(view), state="attached")
    assert view_problems(attached) == []
    meta = read_meta(attached["private_metadata"])
    assert meta is not None
    assert meta.file is not None
    assert meta.file in json.dumps(attached["blocks"], ensure_ascii=False)
    attaching = file_modal(view, meta_of(view), state="attaching")
    assert "Approve" not in {b["text"]["text"] for b in buttons(attaching)}  # type: ignore[index]


def test_a_reply_modal_opened_from_a_whole_review_counts_as_whole_while_unchanged() -> None:
    e = deploy_elicitation()
    view = view_of(e)
    revision = e.subject.revision if e.subject is not None else None

    assert reply_shown({"w": content_hash(e), "r": revision}, view) == SHOWN_WHOLE
    long_view = view_of(long_elicitation())
    assert not reply_shown({"w": content_hash(e), "r": revision}, long_view).whole
    assert not reply_shown({"w": True, "r": revision}, long_view).whole


def test_a_reply_modal_pushed_from_the_last_page_offers_approve_and_closes_both() -> None:
    e = long_elicitation().model_copy(update={"answer_mode": AnswerMode.CHOICE_OR_TEXT})
    view = view_of(e)
    revision = e.subject.revision if e.subject is not None else None

    def labels(modal: dict[str, Any]) -> set[str]:
        [choice] = [b for b in modal["blocks"] if b.get("block_id") == "elicitbot.choice"]
        return {o["text"]["text"] for o in choice["element"]["options"]}

    cut = reply_modal(view, channel="C1", message_ts="1.1", shown=render.shown(view))
    whole = reply_modal(
        view,
        channel="C1",
        message_ts="1.1",
        shown=SHOWN_WHOLE,
        reviewed=content_hash(e),
        pushed=True,
    )

    assert labels(cut) == {"Deny"}
    assert labels(whole) == {"Approve", "Deny"}
    meta = json.loads(whole["private_metadata"])
    assert closes_all(meta)
    assert not closes_all(json.loads(cut["private_metadata"]))
    assert reply_shown(meta, view) == SHOWN_WHOLE
    assert meta["r"] == revision
    assert not reply_shown(json.loads(cut["private_metadata"]), view).whole


def test_a_review_pins_the_subject_digest_it_was_built_on() -> None:
    """Rule 2 by digest: the review's metadata carries the subject digest it showed, read back
    for the decision its buttons make (None without a subject)."""
    from tests.unit.domain.builders import sp_approval

    e = sp_approval()
    assert e.subject is not None
    v = PromptView(e, Status.PENDING, None, 1, "http://127.0.0.1:8787/#x", NOW)
    meta = meta_of(v)
    assert meta.digest == e.subject.digest
    assert json.loads(meta.encode())["d"] == e.subject.digest
    assert read_meta(meta.encode()) == meta
    plain = deploy_elicitation().model_copy(update={"subject": None})
    bare = meta_of(PromptView(plain, Status.PENDING, None, 1, "/#x", NOW))
    assert bare.digest is None
    assert "d" not in json.loads(bare.encode())

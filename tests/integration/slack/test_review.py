"""Slack end to end, answer rule 2 (issue 12: what you see is what you approve), on the fake Web
API with real signed requests (see :mod:`tests.integration.slack.rig`).

- The long request (a 40 KB diff among 40 preview items) is posted with no approving button and
  a **Review…** button; a crafted approve click on the message, or a thread reply naming approve,
  is refused with the reason; Review opens a modal (``views.open``) whose pages together show
  every decisive string, paged with ``views.update``; approving is offered on the last page only,
  and approving there answers (the message rewritten, the answer written back upstream).
- Beyond what a modal holds, the whole request goes to the message's thread as a file, once.
- The deploy request fits its message: Approve is there and answers.

The review modal's pages go to ``test-output/slack-review-modal.json``.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.render import REVIEW_ACTION
from adapters.slack.review import modal as review_modal
from bot.domain.disclosure import decisive
from bot.domain.model import Elicitation, Meaning, Status
from tests.integration.slack.rig import (
    ALICE,
    BOB,
    C1,
    Rig,
    button,
    buttons,
    has_actions,
    texts,
    view_buttons,
)
from tests.showcase import (
    deploy_elicitation,
    elicitation_of,
    long_diff,
    long_question,
    long_request,
)

OUTPUT = Path(__file__).resolve().parents[3] / "test-output"
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_MARKS = re.compile(r"[*_~`]")


def _norm(text: str) -> str:
    """For comparing what was shown with what was sent: entities undone, Markdown marks and
    invisible separators (a neutralised fence) dropped, whitespace runs as one space."""
    text = _MARKS.sub("", _INVISIBLE.sub("", html.unescape(text)))
    return " ".join(text.split())


def assert_shows_everything(e: Elicitation, shown: list[str], where: str) -> None:
    """Every decisive string, line by line in its order, is in ``shown`` (blocks may split a
    long text between them, never cut it)."""
    joined = _norm("\n".join(shown))
    for piece in decisive(e):
        for text in piece.texts:
            at = 0
            for line in filter(None, (_norm(line) for line in text.splitlines())):
                found = joined.find(line, at)
                assert found >= 0, f"{where}: {piece.where} line {line[:80]!r} is not shown"
                at = found + len(line)


def approving_ids(e: Elicitation) -> set[str]:
    return {o.id for o in e.options if o.meaning is Meaning.APPROVE}


def option_of(b: dict[str, Any]) -> str | None:
    value = json.loads(b.get("value") or "{}")
    return value.get("o") if isinstance(value, dict) else None


async def open_review(rig: Rig, message: dict[str, Any]) -> str:
    [review] = [b for b in buttons(message) if b["action_id"] == REVIEW_ACTION]
    response = await rig.click(message, review)
    await rig.slack.idle()
    assert response.status_code == 200
    assert response.text == ""
    return str(rig.fake.views()[-1]["id"])


async def page_through(rig: Rig, view_id: str, e: Elicitation) -> list[dict[str, Any]]:
    """Every page of the review, moving with "Next page →": approving only on the last page,
    rejecting on every one."""
    pages: list[dict[str, Any]] = []
    while True:
        page = rig.fake.view(view_id)
        assert page is not None
        pages.append(page)
        offered = {option_of(b) for b in view_buttons(page)}
        assert "deny" in offered, "rejecting is offered on every page"
        forward = [b for b in view_buttons(page) if b["text"]["text"].startswith("Next page")]
        if not forward:
            return pages
        assert not offered & approving_ids(e), f"approve on page {len(pages)}"
        await rig.modal_click(view_id, forward[0])
        await rig.slack.idle()


def write_modal(pages: list[dict[str, Any]]) -> None:
    """What a person sees: every page to test-output/, the last one printed (pytest -s)."""
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "slack-review-modal.json").write_text(
        json.dumps(pages, indent=2, ensure_ascii=False), "utf-8"
    )
    print(json.dumps(pages[-1], indent=2, ensure_ascii=False))


async def test_the_long_request_is_approved_only_after_the_review_showed_all_of_it(
    rig: Rig,
) -> None:
    e = elicitation_of(long_request(), now=rig.clock.now())
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    approve = sorted(approving_ids(e))[0]
    revision = e.subject.revision if e.subject is not None else None

    # The message: no approving button, a Review… button, and Deny.
    assert not any(option_of(b) in approving_ids(e) for b in buttons(message))
    assert any(b["action_id"] == REVIEW_ACTION for b in buttons(message))
    assert any(option_of(b) == "deny" for b in buttons(message))

    # A crafted approve click on the message (the value forged) is refused, and says Review.
    forged = {
        "type": "button",
        "action_id": "elicitbot.option.0",
        "block_id": "elicitbot.options.0",
        "text": {"type": "plain_text", "text": "Approve"},
        "value": json.dumps({"e": key, "o": approve, "r": revision, "shown": "whole"}),
    }
    await rig.click(message, forged, user=BOB)
    # ... as is a thread reply naming it.
    await rig.reply(message, "approve", user=ALICE, event_id="Ev0LONG1")
    await rig.drain()
    assert await rig.status(key) is Status.PENDING
    [refused] = rig.ephemerals(BOB)
    assert "Review" in refused["text"], refused["text"]
    assert any("Review" in x["text"] for x in rig.ephemerals(ALICE))

    # Review: the modal. Approving from its first page, forged, is refused there too.
    view_id = await open_review(rig, message)
    crafted = {**forged, "action_id": f"{review_modal.OPTION_ACTION}.0"}
    crafted["value"] = json.dumps({"o": approve, "r": revision})
    await rig.modal_click(view_id, crafted)
    await rig.drain()
    assert await rig.status(key) is Status.PENDING
    first = rig.fake.view(view_id)
    assert first is not None
    assert any("cannot choose" in t for t in texts(first["blocks"])), texts(first["blocks"])

    pages = await page_through(rig, view_id, e)
    assert len(pages) > 1, "the long request takes more than one page"

    shown = [t for p in pages for t in texts(p["blocks"])]
    assert_shows_everything(e, shown, "the review's pages")
    write_modal(pages)

    # The last page offers Approve; it answers.
    last = pages[-1]
    [ok] = [b for b in view_buttons(last) if option_of(b) == approve]
    await rig.modal_click(view_id, ok)
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.option_ids == (approve,)
    assert [d.view.elicitation.key for d in rig.sink.delivered] == [key]
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert not has_actions(rewritten)
    assert any(c.params.get("ts") == message["ts"] for c in rig.fake.calls_to("chat.update"))
    done = rig.fake.view(view_id)
    assert done is not None
    # The review says the answer is on its way (it was, when the review was updated), never
    # "Answered": the message says that once handup has it.
    assert [t[:10] for t in texts(done["blocks"]) if "Answered" in t or "⏳" in t] == [
        "⏳ Sending "
    ]
    assert not view_buttons(done)


def huge_request() -> Elicitation:
    request = long_request()
    request["id"] = "req_huge_prices"
    request["previews"][2]["inline"] = long_diff(400_000)
    return elicitation_of(request)


async def test_beyond_a_modal_the_whole_request_is_a_file_in_the_thread_once(rig: Rig) -> None:
    e = huge_request()
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    approve = sorted(approving_ids(e))[0]

    view_id = await open_review(rig, message)
    [shared] = rig.fake.files()
    assert (shared["channel"], shared["thread_ts"]) == (C1, message["ts"])
    assert_shows_everything(e, [shared["content"]], "the file")
    assert any(
        f["name"] == shared["filename"] for m in rig.thread(message) for f in m.get("files", [])
    )
    modal = rig.fake.view(view_id)
    assert modal is not None
    said = " ".join(texts(modal["blocks"]))
    assert f"The whole request is in the file *{shared['filename']}*" in said
    assert any(option_of(b) == approve for b in view_buttons(modal))

    # Review again, here and in a process that never saw the upload (it finds the file in the
    # thread): the same file, not a second one.
    await open_review(rig, message)
    rig.slack.review._attached.clear()
    second = await open_review(rig, message)
    assert len(rig.fake.files()) == 1
    assert len(rig.fake.calls_to("files.getUploadURLExternal")) == 1

    reopened = rig.fake.view(second)
    assert reopened is not None
    [ok] = [b for b in view_buttons(reopened) if option_of(b) == approve]
    await rig.modal_click(second, ok)
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED


async def test_the_deploy_request_fits_its_message_and_approve_there_answers(rig: Rig) -> None:
    e = deploy_elicitation(now=rig.clock.now())
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    print(json.dumps(message["blocks"], indent=2, ensure_ascii=False)[:6000])

    assert_shows_everything(e, texts(message["blocks"]), "the message")
    assert not any(b["action_id"] == REVIEW_ACTION for b in buttons(message))
    await rig.click(message, button(message, "approve"))
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.option_ids == ("approve",)


@pytest.mark.parametrize("size", [100_000, 900_000], ids=["100KB", "900KB"])
async def test_a_long_question_is_cut_in_the_message_and_whole_behind_review(
    rig: Rig, size: int
) -> None:
    """No spec bounds a question: the message cuts it and offers Review…, whose pages (or,
    beyond what a modal holds, the file in the thread) reach every character of it."""
    key = await rig.intake_fixture("options", question=long_question(size))
    await rig.drain()
    message = rig.message(key)
    view = await rig.service.view(key)
    assert view is not None
    e = view.elicitation
    assert len(e.question) == size
    print(json.dumps(message["blocks"], indent=2, ensure_ascii=False)[:4000])

    assert any(b["action_id"] == REVIEW_ACTION for b in buttons(message))
    assert not any(option_of(b) in approving_ids(e) for b in buttons(message))
    assert any("does not show everything" in t for t in texts(message["blocks"]))

    view_id = await open_review(rig, message)
    files = rig.fake.files()
    if files:  # beyond a modal: the whole question in one file in the thread
        [shared] = files
        assert (shared["channel"], shared["thread_ts"]) == (C1, message["ts"])
        assert e.question in shared["content"]
        modal = rig.fake.view(view_id)
        assert modal is not None
        assert "The whole request is in the file" in " ".join(texts(modal["blocks"]))
    else:
        pages = await page_through(rig, view_id, e)
        assert len(pages) > 1
        assert_shows_everything(e, [t for p in pages for t in texts(p["blocks"])], "the review")
    assert (size > 120_000) == bool(files), "a modal pages 100 KB; 900 KB goes as a file"

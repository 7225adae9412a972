"""adapters/slack/wording.py through render: "Answered" only once the upstream accepted the answer;
"Sending…" until then; what the upstream refused, on a question open again and on one that failed.
Also the secret modal's way to a longer secret."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.slack.markup.blocks import escape
from adapters.slack.modals.reply import reply_modal
from adapters.slack.render import render
from adapters.slack.wording import NOTE_TEXT, just_answered, result_line, thread_note
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Answer, AnswerMode, Elicitation, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from bot.domain.views import writeback_note
from tests.slack_fake import block_kit_problems, view_problems
from tests.unit.domain.builders import NOW, answer, elicitation, sp_options

LINK = "http://127.0.0.1:8787/#superpipeline:eli_1a2b3c4d5e6f7081"
REASON = "option allow_once is retired."


def view_of(
    e: Elicitation,
    status: Status,
    result: Answer | None = None,
    writeback: Writeback | None = None,
) -> PromptView:
    return PromptView(e, status, result, 2, LINK, NOW, writeback=writeback)


def alice(*options: str, **more: Any) -> Answer:
    return answer(option_ids=options, display_name="Alice", **more)


def mrkdwn(blocks: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(blocks)
    return found


def has_buttons(blocks: list[dict[str, Any]]) -> bool:
    return any(b["type"] == "actions" for b in blocks)


def test_until_the_upstream_accepts_the_message_says_sending_never_answered() -> None:
    sending = Writeback(WritebackState.SENDING)
    text, blocks = render(view_of(sp_options(), Status.ANSWERED, alice("allow_once"), sending))

    assert blocks[-1]["text"]["text"] == (
        "⏳ Sending Alice’s answer — Allow once — to SuperPipeline…"  # noqa: RUF001
    )
    assert not has_buttons(blocks)
    assert not any("Answered" in t for t in [text, *mrkdwn(blocks)])
    assert block_kit_problems(blocks, text) == []

    accepted = Writeback(WritebackState.ACCEPTED)
    _, after = render(view_of(sp_options(), Status.ANSWERED, alice("allow_once"), accepted))
    assert after[-1]["text"]["text"].startswith("✅ Answered by Alice — Allow once — ")


def test_the_timeout_outcome_is_sending_too() -> None:
    decided = Answer(option_ids=("deny",), respondent="system", via="system", at=NOW)
    sending = Writeback(WritebackState.SENDING)

    line = result_line(view_of(sp_options(), Status.ANSWERED, decided, sending))

    assert line == "⏳ Sending the timeout outcome — Deny — to SuperPipeline…"


def test_a_refused_answer_reopens_with_the_reason_above_the_buttons() -> None:
    refused = Writeback(
        WritebackState.REFUSED,
        error=f"{REASON} Ask <!channel> & <@U0BOSS>",
        reopened=True,
        refused=alice("allow_once"),
    )
    view = view_of(sp_options(), Status.PENDING, None, refused)
    text, blocks = render(view)

    assert block_kit_problems(blocks, text) == []
    [note_at] = [i for i, b in enumerate(blocks) if "⚠️" in json.dumps(b, ensure_ascii=False)]
    first_buttons = next(i for i, b in enumerate(blocks) if b["type"] == "actions")
    assert note_at < first_buttons, "the reason comes before the buttons"
    note = blocks[note_at]
    assert note["type"] == "section"
    said = writeback_note(view)  # the domain's sentence, escaped
    assert said is not None
    assert note["text"]["text"] == escape(said)
    assert "Alice" in said
    assert "open again" in said
    assert "Ask &lt;!channel&gt; &amp; &lt;@U0BOSS&gt;" in note["text"]["text"]
    assert has_buttons(blocks)


def test_a_refused_answer_on_a_question_closed_upstream_says_not_accepted() -> None:
    closed = "The question was resolved upstream by usr_bob before this answer arrived. " * 40
    refused = Writeback(WritebackState.REFUSED, error=closed, reopened=False, refused=alice("deny"))
    view = view_of(sp_options(), Status.ANSWERED, alice("deny"), refused)
    text, blocks = render(view)

    assert block_kit_problems(blocks, text) == []
    result, note = blocks[-2], blocks[-1]
    assert result["text"]["text"] == (
        "❌ Not accepted by SuperPipeline: Alice’s answer — Deny — "  # noqa: RUF001
        "2026-11-10 09:31 UTC via Slack"
    )
    said = writeback_note(view)
    assert said is not None
    assert note["text"]["text"].startswith(escape(said)[:200])
    assert "The question was resolved upstream" in note["text"]["text"]
    assert len(note["text"]["text"]) <= NOTE_TEXT
    assert not has_buttons(blocks)
    assert not any("Answered" in t for t in [text, *mrkdwn(blocks)])

    never = Writeback(WritebackState.REFUSED, error="HTTP 503", gave_up=True, refused=alice("deny"))
    line = result_line(view_of(sp_options(), Status.ANSWERED, alice("deny"), never))
    assert line.startswith("❔ Not confirmed by SuperPipeline: Alice’s answer — Deny — ")  # noqa: RUF001


def test_the_thread_note_claims_no_acceptance_whatever_was_read_before() -> None:
    earlier = Writeback(
        WritebackState.REFUSED, round=1, error=REASON, reopened=True, refused=alice("allow_once")
    )
    before = view_of(sp_options(), Status.PENDING, None, earlier)

    note = thread_note(before, alice("deny"))

    assert note == (
        "📨 Alice answered — Deny — 2026-11-10 09:31 UTC via Slack; sending it to SuperPipeline."
    )
    now = just_answered(before, alice("deny"))
    assert now.writeback == Writeback(WritebackState.SENDING, 2)
    assert result_line(now).startswith("⏳ Sending Alice’s answer — Deny")  # noqa: RUF001


@pytest.mark.parametrize(("limit", "says"), [(10_000, True), (3000, False), (200, False)])
def test_a_secret_longer_than_slack_takes_goes_to_the_private_web_form(
    limit: int, says: bool
) -> None:
    e = elicitation(
        source="pinework",
        source_id="qst_0secret",
        answer_mode=AnswerMode.SECRET,
        options=(),
        question="Paste the signing key.",
        max_length=limit,
    )
    modal = reply_modal(
        view_of(e, Status.PENDING), channel="C1", message_ts="1.1", shown=SHOWN_WHOLE
    )

    assert view_problems(modal) == []
    [box] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert box["element"]["max_length"] == min(limit, 3000)
    line = f"Longer than 3,000 characters? Use the private web form: <{LINK}>"
    assert (line in mrkdwn(modal["blocks"])) is says

"""adapters/slack/render.py: escaping, Block Kit limits, buttons, withheld approvals, results.

Limits are checked with the fake Slack API's own validator
(:func:`tests.slack_fake.block_kit_problems`), the code that answers ``invalid_blocks`` in the
integration tests, and against our cumulative text budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.slack.markup.blocks import escape, link
from adapters.slack.render import (
    MAX_TOTAL_TEXT,
    OPTION_ACTION,
    REVIEW_ACTION,
    SELECT_ACTION,
    render,
)
from bot.domain.model import (
    Answer,
    AnswerMode,
    Context,
    Elicitation,
    Meaning,
    Option,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.wording import shorten_digest
from tests.slack_fake import MAX_MESSAGE_TEXT, block_kit_problems, block_text_length
from tests.unit.domain.builders import (
    NOW,
    answer,
    elicitation,
    sp_approval,
    sp_free_text,
    sp_options,
)

LINK = "http://127.0.0.1:8787/#superpipeline:eli_1a2b3c4d5e6f7081"
HOSTILE = (
    "Ping <!channel> and <!here>, <@U0BOSS>, <#C0GENERAL>, <http://evil.example|bank login> & co"
)


def view(
    e: Elicitation,
    status: Status = Status.PENDING,
    result: Answer | None = None,
    *,
    link: str = LINK,
) -> PromptView:
    return PromptView(elicitation=e, status=status, answer=result, version=1, link=link, now=NOW)


def text_objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every text object (``{"type": plain_text|mrkdwn, "text": ...}``) in the blocks."""
    if isinstance(node, dict):
        if node.get("type") in ("plain_text", "mrkdwn") and isinstance(node.get("text"), str):
            yield node
        for value in node.values():
            yield from text_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from text_objects(value)


def mrkdwn(blocks: list[dict[str, Any]]) -> list[str]:
    return [t["text"] for t in text_objects(blocks) if t["type"] == "mrkdwn"]


def buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        el
        for b in blocks
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
        for el in b["elements"]
        if el["type"] == "button"
    ]


def option_buttons(blocks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Option buttons by option id (parsed from their JSON value)."""
    return {
        json.loads(b["value"])["o"]: b
        for b in buttons(blocks)
        if b["action_id"].startswith(OPTION_ACTION)
    }


def assert_valid(text: str, blocks: list[dict[str, Any]]) -> None:
    assert block_kit_problems(blocks, text) == []
    assert block_text_length(blocks) <= MAX_TOTAL_TEXT
    assert 0 < len(text) <= MAX_MESSAGE_TEXT


# --------------------------------------------------------------------------- escaping


FORBIDDEN = ("<!channel>", "<!here>", "<!everyone>", "<@U0BOSS>", "<#C0GENERAL>", "<http://evil")


def test_agent_text_cannot_ping_or_forge_links() -> None:
    e = elicitation(
        question=HOSTILE,
        context=Context(board_name=HOSTILE, card_title="<!everyone>", stage_key="<!here>"),
        asker="<@U0BOSS>",
        options=(Option(id="ok", label=HOSTILE),),
    ).model_copy(
        update={
            "subject": sp_approval(
                preview=(
                    PreviewItem(type="text", label=HOSTILE, text=HOSTILE),
                    PreviewItem(type="field", label="<!channel>", value="<!here>"),
                    PreviewItem(type="link", label="<http://evil.example|bank>", url=HOSTILE),
                    PreviewItem(type="link", label="Docs", url="https://ok.example/a|forged"),
                )
            ).subject
        }
    )

    text, blocks = render(view(e))

    for shown in [text, *mrkdwn(blocks)]:
        for forbidden in FORBIDDEN:
            assert forbidden not in shown, (forbidden, shown)
    assert "&lt;!channel&gt;" in text
    question = blocks[1]["text"]["text"]
    assert question == escape(HOSTILE)
    assert "&lt;http://evil.example|bank login&gt; &amp; co" in question
    # Agent text in plain_text (header, button labels) is shown as typed: Slack never parses it.
    assert {t["type"] for t in text_objects(blocks) if "<!" in t["text"]} <= {"plain_text"}
    assert all(t.get("verbatim") is True for t in text_objects(blocks) if t["type"] == "mrkdwn")
    assert_valid(text, blocks)


def test_answered_result_escapes_the_answer_text() -> None:
    e = sp_free_text()
    result = answer(text="<!channel> done & dusted", display_name="<!here>")

    text, blocks = render(view(e, Status.ANSWERED, result))

    for shown in [text, *mrkdwn(blocks)]:
        assert "<!channel>" not in shown
        assert "<!here>" not in shown
    assert "“&lt;!channel&gt; done &amp; dusted”" in blocks[-1]["text"]["text"]


def test_a_link_preview_shows_the_url_itself_never_a_label() -> None:
    e = sp_approval()
    _, blocks = render(view(e))

    assert "📎 *Draft*\n<https://example.com/draft>" in mrkdwn(blocks)
    assert link("https://ok.example/?a=1&b=2") == "<https://ok.example/?a=1&amp;b=2>"
    assert link("https://ok.example/a|forged") == "https://ok.example/a|forged"
    assert link("javascript:alert(1)") == "javascript:alert(1)"
    assert link("https://x.example/<!channel>") == "https://x.example/&lt;!channel&gt;"


# --------------------------------------------------------------------------- limits


def _long_options(n: int, label_length: int, **changes: Any) -> tuple[Option, ...]:
    meanings = (Meaning.APPROVE, Meaning.REJECT, Meaning.CHOOSE)
    return tuple(
        Option(
            id=f"opt_{i:03d}_" + "x" * 40,
            label=(f"{i} 🎉 Ünïcödé " * 40)[:label_length],
            meaning=meanings[i % 3],
            admin_only=i % 5 == 0,
            **changes,
        )
        for i in range(n)
    )


QUESTION_50KB = ("Résumé 🚀 of the plan, with <tags> & ampersands; 日本語のテキスト。\n" * 800)[
    :50_000
]


def oversize(**changes: Any) -> Elicitation:
    e = sp_approval(
        preview=tuple(
            PreviewItem(type=kind, label="L" * 300, text="🧪&<>" * 2000, value="v" * 5000, url=url)
            for kind, url in [
                ("text", None),
                ("field", None),
                ("link", "https://example.com/" + "p" * 4000),
                ("code", None),
                ("markdown", None),
            ]
            * 4
        ),
        digest="sha256:" + "f" * 5000,
        id="sub_" + "s" * 400,
        preview_complete=True,
    )
    fields: dict[str, Any] = {
        "title": "T🎯" * 200,
        "question": QUESTION_50KB,
        "options": _long_options(40, 300),
        "context": Context(
            board_name="B&" * 500, card_title="C" * 1000, stage_key="S" * 400, run_id="R" * 400
        ),
        "asker": "agt_" + "a" * 600,
    }
    fields.update(changes)
    return e.model_copy(update=fields)


@pytest.mark.parametrize(
    ("name", "e"),
    [
        ("40 options, single choice", oversize()),
        ("20 options as buttons", oversize(options=_long_options(20, 300))),
        ("40 options, multiple choice", oversize(answer_mode=AnswerMode.MULTI_CHOICE)),
        ("150 options", oversize(options=_long_options(150, 300))),
        ("choice or text", oversize(answer_mode=AnswerMode.CHOICE_OR_TEXT)),
        ("all ampersands", oversize(question="&" * 50_000)),
        ("all emoji", oversize(question="👩‍👩‍👧‍👦" * 12_000)),
        ("free text", oversize(answer_mode=AnswerMode.FREE_TEXT, options=())),
    ],
)
def test_oversize_questions_stay_inside_block_kit_limits(name: str, e: Elicitation) -> None:
    for status, result in [
        (Status.PENDING, None),
        (
            Status.ANSWERED,
            answer(
                option_ids=tuple(o.id for o in e.options),
                text="✍️ " * 20_000,
                display_name="N" * 500,
            ),
        ),
        (Status.EXPIRED, None),
    ]:
        text, blocks = render(view(e, status, result, link=LINK + "x" * 200))
        assert_valid(text, blocks)


def test_long_text_is_cut_in_code_points_with_a_link_to_the_full_text() -> None:
    _, blocks = render(view(oversize()))

    question = blocks[1]["text"]["text"]
    assert len(question) <= 3000
    assert len(question) > 2800, "the cut keeps as much as fits"
    assert question.endswith(f"… (full text: <{LINK}>)")
    assert question.startswith("Résumé 🚀 of the plan, with &lt;tags&gt; &amp; ampersands")
    header = blocks[0]["text"]["text"]
    assert len(header) == 150
    assert header.endswith("…")


def test_a_cut_never_ends_inside_an_entity() -> None:
    for pad in range(6):
        e = sp_options().model_copy(update={"question": "x" * pad + "&" * 4000})
        _, blocks = render(view(e))
        body = blocks[1]["text"]["text"].split("…")[0]
        assert body.replace("&amp;", "").strip("x") == "", body[-12:]


def test_more_than_twenty_options_become_a_select() -> None:
    e = oversize()
    _, blocks = render(view(e))
    # The oversize message cannot hold everything: its approving options are withheld.
    offered = [o for o in e.options if not o.approving]

    [select] = [
        el
        for b in blocks
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
        for el in b["elements"]
        if el["type"] != "button"
    ]
    assert select["type"] == "static_select"
    assert select["action_id"] == SELECT_ACTION
    assert len(select["options"]) == len(offered) == 26
    values = [json.loads(o["value"]) for o in select["options"]]
    assert [v["o"] for v in values] == [o.id for o in offered]
    assert {v["r"] for v in values} == {1}
    assert option_buttons(blocks) == {}


def test_beyond_a_hundred_options_the_rest_are_in_the_web_inbox() -> None:
    # 180 options, 60 of them approving (withheld: the message cannot hold everything).
    e = oversize(options=_long_options(180, 30))

    text, blocks = render(view(e))

    [select] = [
        el
        for b in blocks
        if b["type"] == "actions" and b["block_id"] not in ("elicitbot.claim", REVIEW_ACTION)
        for el in b["elements"]
    ]
    assert len(select["options"]) == 100
    assert f"20 more options are offered in the web inbox (<{LINK}>)." in mrkdwn(blocks)
    assert_valid(text, blocks)


def test_an_acknowledgement_gets_one_button() -> None:
    e = sp_options().model_copy(update={"answer_mode": AnswerMode.ACKNOWLEDGE, "options": ()})

    _, blocks = render(view(e))

    [ack] = buttons(blocks)
    assert (ack["text"]["text"], ack["action_id"]) == ("Acknowledge", "elicitbot.ack")


def test_buttons_come_at_most_five_to_an_actions_block() -> None:
    e = sp_options().model_copy(update={"options": _long_options(20, 12)})

    _, blocks = render(view(e))

    actions = [b for b in blocks if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"]
    assert [len(b["elements"]) for b in actions] == [5, 5, 5, 5]
    assert len(option_buttons(blocks)) == 20


# --------------------------------------------------------------------------- buttons


def test_buttons_carry_style_admin_mark_and_a_json_value() -> None:
    e = sp_approval()
    digest = e.subject.digest if e.subject is not None else None

    _, blocks = render(view(e))

    shown = option_buttons(blocks)
    assert list(shown) == ["allow_once", "allow_always", "deny"]
    assert shown["allow_once"]["style"] == "primary"
    assert shown["allow_always"]["style"] == "primary"
    assert shown["deny"]["style"] == "danger"
    assert shown["allow_once"]["text"]["text"] == "Allow once"
    assert shown["allow_always"]["text"]["text"] == "Always allow (admin)"
    for option_id, button in shown.items():
        # the subject revision and digest the message shows (rule 2)
        assert json.loads(button["value"]) == {"e": e.key, "o": option_id, "r": 1, "d": digest}
    assert len({b["action_id"] for b in buttons(blocks)}) == 3


def test_a_choose_option_has_no_style_and_no_subject_revision() -> None:
    e = sp_options().model_copy(
        update={"options": (Option(id="a", label="A"), Option(id="b", label="B", admin_only=True))}
    )

    _, blocks = render(view(e))

    shown = option_buttons(blocks)
    assert "style" not in shown["a"]
    assert shown["b"]["text"]["text"] == "B (admin)"
    assert json.loads(shown["a"]["value"]) == {"e": e.key, "o": "a", "r": None}


def test_a_long_admin_label_keeps_its_mark_inside_75_characters() -> None:
    e = sp_options().model_copy(
        update={"options": (Option(id="a", label="Z" * 300, admin_only=True),)}
    )

    _, blocks = render(view(e))

    label = option_buttons(blocks)["a"]["text"]["text"]
    assert len(label) == 75
    assert label.endswith("… (admin)")


def test_incomplete_preview_withholds_approving_buttons_and_says_why() -> None:
    e = sp_approval(preview_complete=False)

    text, blocks = render(view(e))

    assert list(option_buttons(blocks)) == ["deny"]
    shown = "\n".join(mrkdwn(blocks))
    assert "The preview is incomplete, so approving is not offered." in shown
    assert "preview incomplete" in shown
    assert_valid(text, blocks)


def test_expired_subject_withholds_approving_buttons_and_says_why() -> None:
    e = sp_approval(expires_at=NOW - timedelta(minutes=1))

    _, blocks = render(view(e))

    assert list(option_buttons(blocks)) == ["deny"]
    assert "The approval subject expired at 2026-11-10 09:30 UTC." in "\n".join(mrkdwn(blocks))


def test_the_digest_is_shortened() -> None:
    e = sp_approval()

    _, blocks = render(view(e))

    assert e.subject is not None
    assert shorten_digest(e.subject.digest) == "sha256:4f2a0c1e…"
    [line] = [t for t in mrkdwn(blocks) if t.startswith("Subject ")]
    assert "digest `sha256:4f2a0c1e…`" in line
    assert e.subject.digest not in line


def test_free_text_and_secret_questions_get_a_reply_button() -> None:
    _, free = render(view(sp_free_text()))
    _, secret = render(view(sp_free_text().model_copy(update={"answer_mode": AnswerMode.SECRET})))

    assert [b["text"]["text"] for b in buttons(free)] == ["Reply…"]
    assert [b["text"]["text"] for b in buttons(secret)] == ["Answer privately…"]
    assert json.loads(buttons(free)[0]["value"])["e"] == sp_free_text().key


def test_context_names_board_card_stage_run_and_asker() -> None:
    _, blocks = render(view(sp_options()))

    assert blocks[0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Research this", "emoji": True},
    }
    assert blocks[2]["elements"][0]["text"] == (
        "Board: Developer Experience · Card: Research this · Stage: research · "
        "Run: run_0123456789abcdef · Asked by: agt_9e8d7c6b5a493827"
    )


# --------------------------------------------------------------------------- closed


def test_answered_view_shows_the_result_and_no_actions() -> None:
    e = sp_approval()
    result = answer(option_ids=("allow_once",), display_name="Alice")

    text, blocks = render(view(e, Status.ANSWERED, result))

    assert [b for b in blocks if b["type"] == "actions"] == []
    assert blocks[-1]["text"]["text"] == (
        "✅ Answered by Alice — Allow once — 2026-11-10 09:31 UTC via Slack"
    )
    assert "Answered by" in text
    assert "preview incomplete" not in "\n".join(mrkdwn(blocks))
    assert_valid(text, blocks)


def test_an_answer_from_the_web_inbox_names_the_person() -> None:
    result = Answer(
        option_ids=("deny",), respondent="web:alice", display_name="Alice", via="web", at=NOW
    )

    _, blocks = render(view(sp_options(), Status.ANSWERED, result))

    assert blocks[-1]["text"]["text"] == (
        "✅ Answered by Alice — Deny — 2026-11-10 09:31 UTC via the web inbox"
    )


@pytest.mark.parametrize(
    ("status", "expected"),
    [(Status.EXPIRED, "⌛ Expired"), (Status.CANCELLED, "🚫 Cancelled")],
)
def test_expired_and_cancelled_views_have_no_actions(status: Status, expected: str) -> None:
    text, blocks = render(view(sp_options(), status))

    assert [b for b in blocks if b["type"] == "actions"] == []
    assert blocks[-1]["text"]["text"].startswith(expected)
    assert_valid(text, blocks)


def test_a_pending_message_shows_what_happens_next_and_who_is_on_it() -> None:
    from dataclasses import replace

    from bot.domain.deadlines import Claim, ScheduleStep
    from bot.domain.records import DeadlineKind

    steps = (
        ScheduleStep(DeadlineKind.REMIND, NOW + timedelta(hours=1)),
        ScheduleStep(DeadlineKind.ESCALATE, NOW + timedelta(hours=2), targets=("slack:C0ONCALL",)),
        ScheduleStep(DeadlineKind.EXPIRE, NOW + timedelta(hours=8), outcome="deny"),
    )
    pending = replace(
        view(sp_options()),
        schedule=steps,
        claim=Claim(by="slack:U0ALICE", name="Alice", until=NOW + timedelta(minutes=30)),
    )
    _, blocks = render(pending)
    [line] = [t for t in mrkdwn(blocks) if t.startswith("⏱")]
    assert "reminder" in line
    assert "escalates" in line
    assert "expires" in line
    assert "deny" in line
    assert "Alice is on it" in line
    # Slack date formatting: each reader sees the reminder in their own time zone.
    stamp = int((NOW + timedelta(hours=1)).timestamp())
    assert f"reminder <!date^{stamp}^{{date_short_pretty}} {{time}}|" in line
    assert "#C0ONCALL" in line

    answered = replace(pending, status=Status.ANSWERED, answer=answer(option_ids=("deny",)))
    _, after = render(answered)
    assert not [t for t in mrkdwn(after) if t.startswith("⏱")]


def test_values_keep_the_digest_within_slacks_limits() -> None:
    """Button values (≤ 2000) and select option values (≤ 150) carry the subject digest shown;
    the shorter forms keep it, and only past the limit even by index is it left out."""
    from adapters.slack.markup.blocks import MAX_BUTTON_VALUE, MAX_OPTION_VALUE, select_value
    from adapters.slack.render import option_value

    d = "sha256:" + "ab" * 32
    assert json.loads(option_value("k", "yes", 0, 2, d)) == {"e": "k", "o": "yes", "r": 2, "d": d}
    long_key = option_value("k" * 1990, "yes", 0, 2, d)
    assert json.loads(long_key) == {"o": "yes", "r": 2, "d": d}
    by_index = option_value("k", "y" * 1990, 4, 2, d)
    assert json.loads(by_index) == {"i": 4, "r": 2, "d": d}
    assert json.loads(option_value("k", "yes", 0, 2, "x" * 2000)) == {"i": 0, "r": 2}
    assert json.loads(option_value("k", "yes", 0, 2)) == {"e": "k", "o": "yes", "r": 2}
    assert json.loads(select_value("allow_once", 0, 1, d)) == {"o": "allow_once", "r": 1, "d": d}
    assert json.loads(select_value("o" * 100, 3, 1, d)) == {"i": 3, "r": 1, "d": d}
    assert json.loads(select_value("o" * 100, 3, 1, "x" * 150)) == {"o": "o" * 100, "r": 1}
    for value in (long_key, by_index):
        assert len(value) <= MAX_BUTTON_VALUE
    assert len(select_value("o" * 100, 3, 1, d)) <= MAX_OPTION_VALUE

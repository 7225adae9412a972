"""adapters/slack/modals/form.py: a form (several questions) in Slack — one input per question in
the reply modal, the submission as the core's per-question answers, the message's button and
hint. Limits are checked with the fake Slack API's own validator (:func:`view_problems`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from adapters.slack.modals.form import FormPick, form_answers, form_errors, read_form
from adapters.slack.modals.reply import reply_modal
from adapters.slack.render import REPLY_ACTION, render
from adapters.slack.translate import parse_submission, read_submission, submission_errors, submit
from adapters.sources.handup import validation
from adapters.sources.handup.elicitation import to_elicitation
from bot.domain import forms
from bot.domain.actions import Submit
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    AnswerMode,
    Elicitation,
    ElicitationKey,
    FormQuestion,
    Identity,
    Option,
    Status,
)
from bot.domain.ports import PromptView
from tests.slack_fake import block_kit_problems, view_problems
from tests.unit.domain.builders import NOW, answer, elicitation

ROOT = Path(__file__).resolve().parents[3]
HANDUP: dict[str, Any] = json.loads(
    (ROOT / "tests" / "fixtures" / "sources" / "handup.json").read_text(encoding="utf-8")
)["valid"]
LINK = "http://127.0.0.1:8787/#handup:hr_form"
KEY = ElicitationKey("handup:hr_form")
ALICE = Identity(platform="slack", user="U0ALICE", team="T0ACME", display_name="alice")


def release_form(summary: str = "", **question_changes: dict[str, Any]) -> Elicitation:
    """The handup fixture "form" (channel: one of two, beta recommended; targets: one or more
    of three; notes: written), with ``question_changes`` by question id."""
    data = copy.deepcopy(HANDUP["form"])
    if summary:
        data["summary"] = summary
    for q in data["input"]["questions"]:
        q.update(question_changes.get(q["id"], {}))
    return to_elicitation(validation.check(data, []), request_id="hr_form", now=NOW)


def view_of(e: Elicitation, status: Status = Status.PENDING, **changes: Any) -> PromptView:
    return PromptView(e, status, changes.pop("result", None), 1, LINK, NOW, **changes)


def modal_of(e: Elicitation) -> dict[str, Any]:
    return reply_modal(view_of(e), channel="C0APPROVALS", message_ts="1.000100", shown=SHOWN_WHOLE)


def inputs(modal: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}


def submitted(modal: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A view_submission's ``view`` for ``modal`` with these state values."""
    return {**modal, "id": "V0FORM", "state": {"values": values}}


def option_named(block: dict[str, Any], label: str) -> dict[str, Any]:
    [found] = [o for o in block["element"]["options"] if o["text"]["text"].endswith(label)]
    return dict(found)


# --------------------------------------------------------------------------- the modal


def test_a_form_modal_has_one_input_per_question_with_the_recommended_option_chosen() -> None:
    modal = modal_of(release_form("Cutting 4.2 today: <b>three</b> choices & a note."))
    print(json.dumps(modal, indent=2, ensure_ascii=False))
    out = ROOT / "test-output"
    out.mkdir(exist_ok=True)
    (out / "slack-form-modal.json").write_text(
        json.dumps(modal, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )

    assert view_problems(modal) == []
    # The request's own words, escaped; its questions are the inputs, not repeated as text.
    assert modal["blocks"][1]["text"]["text"] == (
        "Cutting 4.2 today: &lt;b&gt;three&lt;/b&gt; choices &amp; a note."
    )
    blocks = inputs(modal)
    assert list(blocks) == [
        "elicitbot.form.1.choice",
        "elicitbot.form.2.choice",
        "elicitbot.form.3.text",
    ]
    channel, targets, notes = blocks.values()
    assert channel["label"]["text"] == "1. Channel — Which channel?"
    assert channel["element"]["type"] == "static_select"
    assert [o["text"]["text"] for o in channel["element"]["options"]] == ["stable", "⭐ beta"]
    assert channel["element"]["initial_option"] == option_named(channel, "beta")
    assert channel["optional"] is False
    assert targets["label"]["text"] == "2. Which targets?"
    assert targets["element"]["type"] == "multi_static_select"
    assert "initial_options" not in targets["element"]
    assert notes["label"]["text"] == "3. Release notes?"
    assert notes["element"]["type"] == "plain_text_input"
    assert (notes["optional"], notes["element"]["min_length"]) == (False, 1)
    assert notes["element"]["max_length"] == 3000
    assert json.loads(modal["private_metadata"])["f"] == 3
    assert any("⭐ marks the recommended option" in t for t in _texts(modal["blocks"]))


def test_options_with_free_text_get_both_inputs_and_descriptions_show() -> None:
    long = "Ships to every user at once, with no staged rollout and no way back " * 3
    e = release_form(
        channel={
            "allow_free_text": True,
            "options": [{"label": "stable", "description": long}, {"label": "beta"}],
        },
        targets={"options": [{"label": "linux", "description": "x86_64 and arm64"}]},
    )
    modal = modal_of(e)

    assert view_problems(modal) == []
    blocks = inputs(modal)
    assert list(blocks) == [
        "elicitbot.form.1.choice",
        "elicitbot.form.1.text",
        "elicitbot.form.2.choice",
        "elicitbot.form.3.text",
    ]
    # Either input answers the question: both optional, one of them needed (checked before ack).
    assert (
        blocks["elicitbot.form.1.choice"]["optional"],
        blocks["elicitbot.form.1.text"]["optional"],
    ) == (True, True)
    stable = option_named(blocks["elicitbot.form.1.choice"], "stable")
    assert len(stable["description"]["text"]) == 75
    assert " ".join(long.split()) in blocks["elicitbot.form.1.choice"]["hint"]["text"]
    linux = option_named(blocks["elicitbot.form.2.choice"], "linux")
    assert linux["description"]["text"] == "x86_64 and arm64"


def test_the_largest_form_stays_within_block_kit_limits() -> None:
    question = "Which of these should the release include, and why? " * 100
    form = tuple(
        FormQuestion(
            id=f"q{n}",
            header=f"Question {n}",
            question=question,
            multi=n % 2 == 0,
            allow_free_text=True,
            options=tuple(
                Option(
                    id=f"{n}-{i}-" + "x" * 200,
                    label=f"{n}-{i}-" + "x" * 200,
                    description="d" * 500,
                    recommended=i == 3,
                )
                for i in range(150)
            ),
        )
        for n in range(1, 11)
    )
    e = elicitation(
        source="handup", answer_mode=AnswerMode.FREE_TEXT, options=(), form=form, max_length=10_000
    )
    modal = modal_of(e)

    assert view_problems(modal) == []
    assert len(modal["blocks"]) <= 100
    first = inputs(modal)["elicitbot.form.1.choice"]
    assert first["label"]["text"] == "1. Question 1"  # the question is too long for a label
    assert len(first["element"]["options"]) == 100
    assert first["hint"]["text"].startswith(f"50 more options are in the web inbox: {LINK}. ")
    assert " ".join(question.split())[:1000] in first["hint"]["text"]
    assert inputs(modal)["elicitbot.form.2.choice"]["element"]["initial_options"]
    text = inputs(modal)["elicitbot.form.1.text"]
    assert text["element"]["max_length"] == 3000
    assert "a longer answer (up to 10,000)" in text["hint"]["text"]


# --------------------------------------------------------------------------- the submission


def test_a_form_submission_is_a_submit_with_every_answer_by_question_id() -> None:
    e = release_form()
    modal = modal_of(e)
    blocks = inputs(modal)
    values = {
        "elicitbot.form.1.choice": {
            "value": {
                "type": "static_select",
                "selected_option": option_named(blocks["elicitbot.form.1.choice"], "beta"),
            }
        },
        "elicitbot.form.2.choice": {
            "value": {
                "type": "multi_static_select",
                "selected_options": [
                    option_named(blocks["elicitbot.form.2.choice"], "linux"),
                    option_named(blocks["elicitbot.form.2.choice"], "macos"),
                ],
            }
        },
        "elicitbot.form.3.text": {"value": {"type": "plain_text_input", "value": "Ship it."}},
    }
    view = submitted(modal, values)
    meta, text, chosen = parse_submission(view)
    assert submission_errors(meta, text, view) == {}
    body = {"user": {"id": "U0ALICE", "team_id": "T0ACME", "name": "alice"}, "view": view}
    s = read_submission(body, meta, text, chosen)
    assert s is not None

    made = submit(s, KEY, e, shown=SHOWN_WHOLE)

    expected = {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "Ship it."},
    }
    assert made == Submit(
        KEY,
        ALICE,
        "slack:C0APPROVALS",
        fields={"answers": expected},
        revision=0,
        shown=SHOWN_WHOLE,
    )
    assert forms.check_answers(e.form, made.fields["answers"]) == expected


def test_an_option_the_form_does_not_have_stays_wrong_for_the_core_to_refuse() -> None:
    e = release_form()
    answers = form_answers(e, {1: FormPick((7,)), 2: FormPick((0,)), 3: FormPick((), "  ")})

    assert answers == {
        "channel": {"selected": ["#7"], "text": None},
        "targets": {"selected": ["linux"], "text": None},
    }
    problem = forms.check_answers(e.form, answers)
    assert isinstance(problem, forms.FormProblem)
    assert problem.message == "“#7” is not an option of question 1 (Channel)."
    assert read_form({}, 2) == {1: FormPick(), 2: FormPick()}


def test_an_unanswered_question_is_refused_on_its_own_input_before_the_ack() -> None:
    e = release_form(channel={"allow_free_text": True})
    modal = modal_of(e)
    meta = json.loads(modal["private_metadata"])
    nothing = submitted(modal, {"elicitbot.form.3.text": {"value": {"value": "   "}}})
    too_long = submitted(
        modal,
        {
            "elicitbot.form.1.text": {"value": {"value": "own channel"}},
            "elicitbot.form.2.choice": {"value": {"selected_options": [{"value": '{"i":0}'}]}},
            "elicitbot.form.3.text": {"value": {"value": "x" * 3001}},
        },
    )

    assert form_errors(nothing, meta["l"]) == {
        "elicitbot.form.1.choice": "Choose an option, or write an answer below.",
        "elicitbot.form.2.choice": "Choose an option.",
        "elicitbot.form.3.text": "Write an answer; it cannot be empty.",
    }
    assert submission_errors(meta, None, too_long) == {
        "elicitbot.form.3.text": "Your answer is 3,001 characters; the limit is 3,000."
    }


# --------------------------------------------------------------------------- the message


def test_a_forms_message_opens_the_form_and_says_how_to_reply_in_the_thread() -> None:
    text, blocks = render(view_of(release_form()))

    assert block_kit_problems(blocks, text) == []
    buttons = [
        el
        for b in blocks
        if b["type"] == "actions"
        for el in b["elements"]
        if el["type"] == "button"
    ]
    [answer_button] = [b for b in buttons if b["action_id"] == REPLY_ACTION]
    assert (answer_button["text"]["text"], answer_button.get("style")) == ("Answer…", "primary")
    assert blocks[-1]["elements"][0]["text"] == (
        "Use *Answer…* for the form, or reply in this message's thread with each question's "
        "number and your answer: `1: stable; 2: linux, macos; 3: your words`"
    )
    # The example is what a thread reply must look like.
    reply = forms.parse_form_reply(release_form().form, "1: stable; 2: linux, macos; 3: your words")
    assert reply is not None


def test_a_forms_result_says_each_answer() -> None:
    e = release_form()
    given = {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "Ship <it> & tell @here"},
    }
    result = answer(display_name="Alice", fields={"answers": given})

    text, blocks = render(view_of(e, Status.ANSWERED, result=result))

    assert blocks[-1]["text"]["text"] == (
        "✅ Answered by Alice — Channel: beta · Which targets?: linux, macos · "
        "Release notes?: “Ship &lt;it&gt; &amp; tell @here” — 2026-11-10 09:31 UTC via Slack"
    )
    assert block_kit_problems(blocks, text) == []


def _texts(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["text"]] if isinstance(node.get("text"), str) else []
        return own + [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []

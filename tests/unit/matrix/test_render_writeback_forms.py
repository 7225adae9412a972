"""adapters/matrix/render.py, wording.py and form.py for issue 13: what a prompt says while the
answer is on its way upstream and after the upstream refused it, a form (several questions) and
a multiple choice. The form message's HTML goes to ``test-output/matrix-form-message.html``.
"""

from __future__ import annotations

import copy
import html
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS, reaction_keys
from adapters.matrix.markup.form import example, own_text
from adapters.matrix.render import message_content, shown
from adapters.matrix.wording import how_to
from adapters.sources.handup import validation
from adapters.sources.handup.elicitation import to_elicitation
from bot.domain import forms
from bot.domain.model import Answer, AnswerMode, Elicitation, Option, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from bot.domain.views import writeback_note
from tests.unit.domain.builders import NOW, elicitation

REPO = Path(__file__).resolve().parents[3]
OUTPUT = REPO / "test-output"
FIXTURES = json.loads((REPO / "tests" / "fixtures" / "sources" / "handup.json").read_text("utf-8"))
LINK = "http://127.0.0.1:8787/#k"
ALICE = Answer(
    option_ids=("deny",),
    respondent="matrix:@alice:localhost",
    display_name="Alice",
    via="matrix:!room:localhost",
    at=NOW,
)


def view(
    e: Elicitation,
    status: Status = Status.PENDING,
    answer: Answer | None = None,
    writeback: Writeback | None = None,
) -> PromptView:
    return PromptView(e, status, answer, 3, LINK, NOW, writeback=writeback)


def handup(case: str = "form", **changes: Any) -> Elicitation:
    data = copy.deepcopy(FIXTURES["valid"][case])
    data.update(changes)
    checked = validation.check(data, ["https://handup.example.org/hooks"])
    return to_elicitation(checked, request_id="hr_form", now=NOW)


def lines(v: PromptView) -> list[str]:
    return str(message_content(v)["body"]).split("\n")


# --------------------------------------------------------------------------- the write-back


def test_while_the_answer_is_sent_the_copy_says_sending_never_answered() -> None:
    v = view(elicitation(), Status.ANSWERED, ALICE, Writeback(WritebackState.SENDING))
    content = message_content(v)

    assert lines(v)[1] == "⏳ Sending Alice’s answer — Deny — to SuperPipeline…"  # noqa: RUF001
    assert "Answered" not in content["body"]
    assert "Answered" not in content["formatted_body"]
    assert reaction_keys(v, shown=shown(v)) == ()


def test_once_the_upstream_accepted_it_the_copy_says_answered() -> None:
    for writeback in (Writeback(WritebackState.ACCEPTED), None):
        v = view(elicitation(), Status.ANSWERED, ALICE, writeback)
        assert lines(v)[1] == ("✅ Answered by Alice — Deny — 2026-11-10 09:31 UTC via Matrix"), (
            writeback
        )


def test_a_refused_answer_reopens_the_copy_with_the_reason_above_the_options() -> None:
    refused = Writeback(
        WritebackState.REFUSED,
        error="option <b>deny</b> is retired",
        reopened=True,
        refused=ALICE,
    )
    v = view(elicitation(), Status.PENDING, None, refused)
    content = message_content(v)
    body = lines(v)

    note = writeback_note(v)
    assert note is not None
    assert note.endswith("The question is open again: answer it again.")
    assert body[1] == note, "right under the title"
    assert body.index(note) < next(i for i, line in enumerate(body) if line.startswith(KEYCAPS[0]))
    assert "<b>deny</b>" not in content["formatted_body"], "the upstream's words are escaped"
    assert "option &lt;b&gt;deny&lt;/b&gt; is retired" in content["formatted_body"]
    assert "Answered" not in content["body"]
    assert reaction_keys(v, shown=shown(v)), "answerable again: the keycaps are seeded"


def test_a_refusal_from_a_closed_upstream_says_not_accepted_after_the_result() -> None:
    failed = Writeback(WritebackState.REFUSED, error="Resolved upstream by usr_bob.", refused=ALICE)
    v = view(elicitation(), Status.ANSWERED, ALICE, failed)
    body = lines(v)

    assert body[1] == (
        "❌ Not accepted by SuperPipeline: Alice’s answer — Deny — "  # noqa: RUF001
        "2026-11-10 09:31 UTC via Matrix"
    )
    assert body[2] == writeback_note(v)
    assert "Resolved upstream by usr_bob." in body[2]
    assert "Answered" not in message_content(v)["body"]


def test_an_answer_never_confirmed_says_not_confirmed() -> None:
    lost = Writeback(WritebackState.REFUSED, error="HTTP 503.", refused=ALICE, gave_up=True)
    v = view(elicitation(), Status.ANSWERED, ALICE, lost)
    body = lines(v)
    assert body[1].startswith("❔ Not confirmed by SuperPipeline: Alice’s answer — Deny")  # noqa: RUF001
    assert body[2] == writeback_note(v)
    assert "Answered" not in message_content(v)["body"]


def test_a_timeout_decision_on_its_way_says_so() -> None:
    system = ALICE.model_copy(update={"respondent": "system", "display_name": None})
    v = view(elicitation(), Status.ANSWERED, system, Writeback(WritebackState.SENDING))
    assert lines(v)[1] == "⏳ Sending the timeout outcome — Deny — to SuperPipeline…"


# --------------------------------------------------------------------------- a form


def test_a_form_lists_each_question_with_its_options_numbered_and_says_how_to_answer() -> None:
    e = handup()
    v = view(e)
    content = message_content(v)
    body = content["body"]
    markup = content["formatted_body"]
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "matrix-form-message.html").write_text(
        "<!doctype html><meta charset=utf-8><title>Matrix: a handup form</title>\n"
        f"{markup}\n<hr><pre>{html.escape(json.dumps(content, indent=1, ensure_ascii=False))}"
        "</pre>\n",
        "utf-8",
    )

    assert body.split("\n")[1:10] == [
        "1. Channel — Which channel? (choose one)",
        "   1) stable",
        "   2) beta (recommended)",
        "2. Which targets? (choose one or more)",
        "   1) linux",
        "   2) macos",
        "   3) windows",
        "3. Release notes? (type your answer)",
        "Risk: low · Asked by: handup:agent",
    ], "the questions once (the question text restating them is left out), then the context"
    assert "- stable" not in body
    assert "For example: 1: beta; 2: linux, macos; 3: your own words" in body
    assert "reply in this message's thread" in body
    assert "react" not in body, "keycaps cannot answer a form"
    assert reaction_keys(v, shown=shown(v)) == ()
    assert markup.count("<ol>") == 3  # the questions, and the options of the two with options
    assert "<li>beta <i>(recommended)</i></li>" in markup
    assert "Which targets? <i>(choose one or more)</i>" in markup


def test_the_example_a_form_shows_is_an_answer_the_core_reads() -> None:
    e = handup()
    reply = example(e.form).replace("your own words", "ship it Friday")
    answers = forms.parse_form_reply(e.form, reply)
    assert forms.check_answers(e.form, answers) == {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "ship it Friday"},
    }


def test_a_forms_summary_stays_and_options_with_a_typed_answer_say_so() -> None:
    data = copy.deepcopy(FIXTURES["valid"]["form"])
    data["summary"] = "Pick the **release** settings."
    data["input"]["questions"][0]["allow_free_text"] = True
    e = handup(**data)
    body = message_content(view(e))["body"]

    assert own_text(e) == "Pick the **release** settings."
    assert "Pick the **release** settings." in body
    assert "1. Channel — Which channel? (choose one, or type your own answer)" in body


def test_a_paragraph_that_says_more_than_its_question_is_kept() -> None:
    e = handup()
    extra = e.question.replace("   - stable", "   - stable\n   Note: stable ships Mondays")
    kept = own_text(e.model_copy(update={"question": extra}))
    assert kept.startswith("1. **Channel**")
    assert "stable ships Mondays" in kept
    assert "2. Which targets?" not in kept


def test_an_answered_form_shows_each_answer_by_question_number() -> None:
    e = handup()
    answers = {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "ship it Friday"},
    }
    answer = ALICE.model_copy(update={"option_ids": (), "fields": {"answers": answers}})
    v = view(e, Status.ANSWERED, answer, Writeback(WritebackState.ACCEPTED))
    assert lines(v)[1] == (
        "✅ Answered by Alice — Channel: beta · Which targets?: linux, macos · "
        "Release notes?: “ship it Friday” — "
        "2026-11-10 09:31 UTC via Matrix"
    )


# --------------------------------------------------------------------------- a multiple choice

TARGETS = (
    Option(id="linux", label="linux"),
    Option(id="macos", label="macos", recommended=True),
    Option(id="windows", label="windows"),
)


@pytest.mark.parametrize("mode", [AnswerMode.MULTI_CHOICE, AnswerMode.SINGLE_CHOICE])
def test_a_multiple_choice_seeds_its_keycaps_then_the_submit_reaction(mode: AnswerMode) -> None:
    e = elicitation(answer_mode=mode, options=TARGETS)
    v = view(e)
    keys = reaction_keys(v, shown=shown(v))
    text = how_to(e)
    if mode is AnswerMode.MULTI_CHOICE:
        assert keys == (*KEYCAPS[:3], ACK_KEY)
        assert f"then react with {ACK_KEY} to submit" in text
        assert "take a reaction back to remove it" in text
        assert "(for example: 1, 3)" in text
    else:
        assert keys == KEYCAPS[:3]
        assert ACK_KEY not in text
    assert view(e, Status.EXPIRED).status is Status.EXPIRED
    assert reaction_keys(view(e, Status.EXPIRED), shown=shown(v)) == ()


def test_an_expired_outcome_on_its_way_says_so_without_answered() -> None:
    e = elicitation(deadlines={"expires_at": NOW - timedelta(minutes=1), "on_timeout": "deny"})
    system = ALICE.model_copy(update={"respondent": "system", "display_name": None})
    v = view(e, Status.EXPIRED, system, Writeback(WritebackState.SENDING))
    assert lines(v)[1] == (
        "⌛ Expired — nobody answered by 2026-11-10 09:30 UTC — outcome: Deny — "
        "sending it to SuperPipeline…"
    )

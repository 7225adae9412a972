"""Matrix end to end for issue 13 on the real Synapse: a multiple choice answered by toggling
keycaps and submitting with ✅, and a three-question handup form answered by one thread reply
(the rig: tests/integration/matrix/rig.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from adapters.matrix.intake.reactions import ACK_KEY
from adapters.sources.handup import validation
from adapters.sources.handup.document import request_document
from adapters.sources.handup.elicitation import to_elicitation
from bot.domain import forms
from bot.domain.model import AnswerMode, ElicitationKey, Option, Status
from tests.integration.matrix.rig import ONE, THREE, TWO, Rig, name_of, until
from tests.unit.domain.builders import elicitation

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sources" / "handup.json"
TARGETS = (
    Option(id="linux", label="linux"),
    Option(id="macos", label="macos"),
    Option(id="windows", label="windows"),
)


async def posted(rig: Rig, key: ElicitationKey) -> str:
    """Post ``key``'s copy and seed its reactions (the post's ``seed`` effect, next); returns
    its event id."""
    assert await rig.bot.dispatcher.run_once() == 1
    assert await rig.bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    assert delivery.state == "posted", delivery
    assert delivery.ref is not None
    return str(delivery.ref.key)


async def selection_notice(rig: Rig, root: str) -> str:
    """What alice's selection notice in the thread of ``root`` says now (its latest edit)."""
    timeline = await rig.timeline()
    [notice] = [
        e
        for e in await rig.notices(root)
        if e["content"]["body"].startswith(f"{rig.cast.alice.user_id}: Your choice so far")
    ]
    edits = [
        e
        for e in timeline
        if e["content"].get("m.relates_to", {}).get("rel_type") == "m.replace"
        and e["content"]["m.relates_to"]["event_id"] == notice["event_id"]
    ]
    latest = edits[-1]["content"]["m.new_content"] if edits else notice["content"]
    assert latest["m.mentions"] == {}
    return str(latest["body"])


async def test_keycaps_toggle_choices_and_the_check_mark_submits_them(rig: Rig) -> None:
    e = elicitation(
        question="Which targets should the release build?",
        answer_mode=AnswerMode.MULTI_CHOICE,
        options=TARGETS,
    )
    key = await rig.intake_elicitation(e)
    prompt = await posted(rig, key)
    assert sorted(await rig.seeded(prompt)) == sorted([ONE, TWO, THREE, ACK_KEY])
    alice = rig.cast.alice

    await rig.hs.react(alice, rig.room, prompt, ONE)
    three = await rig.hs.react(alice, rig.room, prompt, THREE)
    await rig.hs.react(rig.cast.bob, rig.room, prompt, THREE)  # bob's choice is his own
    await rig.settle(rig.cast.bob)
    assert "1. linux, 3. windows" in await selection_notice(rig, prompt)
    await rig.hs.redact(alice, rig.room, three)
    await rig.hs.react(alice, rig.room, prompt, TWO)
    await rig.settle(rig.cast.bob)

    assert await rig.status(key) is Status.PENDING, "nothing is recorded before ✅"
    assert [a for a in await rig.store.audit(key) if a.action == "answer"] == []
    assert await selection_notice(rig, prompt) == (
        f"{alice.user_id}: Your choice so far: 1. linux, 2. macos — react ✅ to submit "
        "(take a number's reaction back to remove it)."
    )

    await rig.hs.react(alice, rig.room, prompt, ACK_KEY)
    answer = await rig.answered(key)

    assert (answer.option_ids, answer.respondent) == (("linux", "macos"), alice.key)
    await rig.bot.listener.drain()
    assert await until(
        lambda: _says(rig, prompt, "Submitted: 1. linux, 2. macos."), "the notice says submitted"
    )
    confirmations = [
        n["content"]["body"]
        for n in await rig.notices(prompt)
        if "Recorded" in n["content"]["body"]
    ]
    assert confirmations == [f"{alice.user_id}: ✅ Recorded: linux, macos. Thank you."]
    assert await rig.bot.dispatcher.drain() >= 1
    [delivered] = rig.sink.delivered
    assert delivered.view.answer is not None
    assert delivered.view.answer.option_ids == ("linux", "macos")


async def _says(rig: Rig, prompt: str, text: str) -> bool:
    return (await selection_notice(rig, prompt)).endswith(text)


def handup_form(rig: Rig) -> Any:
    data = copy.deepcopy(json.loads(FIXTURES.read_text("utf-8"))["valid"]["form"])
    checked = validation.check(data, ["https://handup.example.org/hooks"])
    return to_elicitation(checked, request_id="hr_matrix_form", now=rig.clock.now())


async def test_a_three_question_form_is_answered_by_one_thread_reply(rig: Rig) -> None:
    e = handup_form(rig)
    assert len(e.form) == 3
    key = await rig.intake_elicitation(e)
    prompt = await posted(rig, key)
    event = await rig.hs.event(rig.cast.alice, rig.room, prompt)
    body = event["content"]["body"]
    assert "2. Which targets? (choose one or more)" in body
    assert "For example: 1: beta; 2: linux, macos; 3: your own words" in body
    assert await rig.seeded(prompt) == [], "keycaps cannot answer a form"
    alice = rig.cast.alice

    await rig.hs.reply_in_thread(alice, rig.room, prompt, "beta please")
    [help_notice] = await rig.wait_notices(prompt, 1)
    assert help_notice["content"]["body"] == f"{alice.user_id}: {forms.form_help(e.form)}"
    assert await rig.status(key) is Status.PENDING

    await rig.hs.reply_in_thread(
        alice, rig.room, prompt, "1: beta\n2: linux, macos\n3: ship it Friday"
    )
    answer = await rig.answered(key)

    assert answer.fields["answers"] == {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "ship it Friday"},
    }
    assert await rig.bot.dispatcher.drain() >= 2  # the write-back, then the edit
    [delivered] = rig.sink.delivered
    document = request_document(delivered.view)
    assert validation.schema_problems(document) == []
    assert document["decision"]["fields"]["answers"] == answer.fields["answers"]
    [edit] = await rig.edits(prompt)
    assert (
        f"✅ Answered by {name_of(alice)} — Channel: beta · Which targets?: linux, macos · "
        "Release notes?: “ship it Friday”" in edit["content"]["m.new_content"]["body"]
    )

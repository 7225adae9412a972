"""Matrix end to end: posting, answering by reaction, reply and edit, refusals, secrets and
"I'm on it" (the rig: tests/integration/matrix/rig.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from adapters.matrix.intake.reactions import KEYCAPS
from adapters.matrix.render import MARKER
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import AnswerMode, Attempt, Identity, Status
from bot.domain.refs import MatrixRef
from bot.domain.rules import USE_PRIVATE_FORM
from bot.outbox import writeback_key
from tests.integration.matrix.rig import ONE, THREE, TWO, Rig, name_of, refusal_of, until
from tests.unit.domain.builders import elicitation
from tests.unit.sources.superpipeline_fixtures import VALID

# --------------------------------------------------------------------------- posting


@pytest.mark.parametrize(
    ("case", "reactions"),
    [
        ("options", [ONE, TWO, THREE]),
        ("approval-request", [ONE, TWO, THREE]),
        ("free-text", []),
        ("no-options-no-question", []),
    ],
)
async def test_every_superpipeline_fixture_is_posted_once_with_its_reactions(
    rig: Rig, case: str, reactions: list[str]
) -> None:
    key, event_id = await rig.post(case)

    event = await rig.hs.event(rig.cast.alice, rig.room, event_id)
    content = event["content"]
    assert event["sender"] == rig.cast.bot.user_id
    assert content[MARKER] == {"key": key, "version": 1}
    assert content["m.mentions"] == {}
    assert content["format"] == "org.matrix.custom.html"
    question = VALID[case]["question"]
    assert question in content["body"]
    assert f"Web inbox: http://127.0.0.1:8787/#{key}" in content["body"]
    for number, option in enumerate(VALID[case]["options"]):
        assert f"{KEYCAPS[number]} {option['label']}" in content["body"]
    assert sorted(await rig.seeded(event_id)) == sorted(reactions)
    assert len(await rig.prompts(key)) == 1
    assert await rig.status(key) is Status.PENDING


# --------------------------------------------------------------------------- answering


async def test_a_reaction_answers_once_edits_the_prompt_and_tells_the_thread(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.alice, rig.room, event_id, ONE)
    answer = await rig.answered(key)

    assert (answer.option_ids, answer.respondent) == (("allow_once",), rig.cast.alice.key)
    assert answer.via == rig.destination
    [confirmation] = await rig.wait_notices(event_id, 1)
    assert confirmation["content"]["body"] == (
        f"{rig.cast.alice.user_id}: ✅ Recorded: Allow once. Thank you."
    )
    assert confirmation["content"]["m.mentions"] == {}

    # The write-back, then (once the upstream took it) the edit.
    assert await rig.bot.dispatcher.drain() == 2
    [edit] = await rig.edits(event_id)
    new = edit["content"]["m.new_content"]
    assert (
        f"✅ Answered by {name_of(rig.cast.alice)} — Allow once — 2026-11-10 09:30 UTC via Matrix"
        in new["body"]
    )
    current = await rig.bot.service.view(key)
    assert current is not None
    assert new[MARKER] == {"key": key, "version": current.version}
    assert "react with" not in new["body"]
    [delivered] = rig.sink.delivered
    assert delivered.idempotency_key == writeback_key(key)

    # Later reactions are told who answered; taking the reaction back changes nothing.
    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    [_, told] = await rig.wait_notices(event_id, 2)
    assert refusal_of(told, rig.cast.bob).startswith(
        f"Already answered by {name_of(rig.cast.alice)} (Allow once)"
    )
    [alice_reaction] = [
        e["event_id"]
        for e in await rig.timeline()
        if e["type"] == "m.reaction" and e["sender"] == rig.cast.alice.user_id
    ]
    await rig.hs.redact(rig.cast.alice, rig.room, alice_reaction)
    await rig.hs.react(rig.cast.alice, rig.room, event_id, ONE)  # the same key again
    await rig.settle(rig.cast.bob)
    assert len(await rig.notices(event_id)) == 2, "a reaction made again is not a new attempt"
    assert await rig.answered(key) == answer
    assert len([a for a in await rig.store.audit(key) if a.action == "answer"]) == 1
    assert len(rig.sink.delivered) == 1


@pytest.mark.parametrize(
    ("case", "body", "fallback", "expected"),
    [
        (
            "free-text",
            "main, please",
            "Which branch should I base this on?",
            (None, "main, please"),
        ),
        ("options", "deny", "May I run the migration?", ("deny", None)),
        ("options", "3", None, ("deny", None)),
        ("no-options-no-question", "looks fine", None, (None, "looks fine")),
        ("approval-request", "Allow once", None, ("allow_once", None)),
    ],
)
async def test_a_thread_reply_answers_with_the_fallback_stripped(
    rig: Rig, case: str, body: str, fallback: str | None, expected: tuple[str | None, str | None]
) -> None:
    key, event_id = await rig.post(case)

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, body, fallback=fallback)
    answer = await rig.answered(key)

    option, text = expected
    assert answer.option_ids == ((option,) if option else ())
    assert answer.text == text
    assert answer.respondent == rig.cast.bob.key
    subject = VALID[case].get("approvalSubject")
    assert answer.subject_digest == (subject["digest"] if subject else None)
    [confirmation] = await rig.wait_notices(event_id, 1)
    assert "✅ Recorded" in confirmation["content"]["body"]
    reply_id = next(
        e["event_id"]
        for e in await rig.timeline()
        if e["sender"] == rig.cast.bob.user_id and e["type"] == "m.room.message"
    )
    assert confirmation["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": reply_id}
    assert await rig.bot.dispatcher.drain() == 2
    [edit] = await rig.edits(event_id)
    assert f"✅ Answered by {name_of(rig.cast.bob)} — " in edit["content"]["m.new_content"]["body"]


async def test_a_reply_naming_nothing_gets_help_and_the_question_stays_open(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "what would this do?")
    [help_] = await rig.wait_notices(event_id, 1)

    text = refusal_of(help_, rig.cast.bob)
    assert text.startswith("To answer, reply with the number, id or label of one option:")
    assert "2. Always allow (allow_always) (workspace admins only)" in text
    assert await rig.status(key) is Status.PENDING
    assert [a.action for a in await rig.store.audit(key)].count("refusal") == 0


async def test_the_agents_account_is_refused_with_a_threaded_mention(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.agent, rig.room, event_id, THREE)
    await rig.hs.reply_in_thread(rig.cast.agent, rig.room, event_id, "deny")
    await rig.hs.reply_in_thread(rig.cast.agent, rig.room, event_id, "please tell me how")
    notices = await rig.wait_notices(event_id, 3)

    for notice in notices:
        assert refusal_of(notice, rig.cast.agent) == (
            "You asked this question, so you cannot answer it."
        )
    assert await rig.status(key) is Status.PENDING
    refusals = [a for a in await rig.store.audit(key) if a.action == "refusal"]
    assert [(r.actor, r.code) for r in refusals] == [(rig.cast.agent.key, "asker")] * 3

    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    assert (await rig.answered(key)).respondent == rig.cast.bob.key


async def test_a_non_admin_is_refused_an_admin_only_option_and_an_admin_is_not(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.bob, rig.room, event_id, TWO)
    [refused] = await rig.wait_notices(event_id, 1)
    assert refusal_of(refused, rig.cast.bob) == "Only a workspace admin can choose “Always allow”."
    assert await rig.status(key) is Status.PENDING

    await rig.hs.reply_in_thread(rig.cast.alice, rig.room, event_id, "always allow")
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("allow_always",), rig.cast.alice.key)


async def test_two_people_at_once_one_wins_and_the_other_is_told_who(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await asyncio.gather(
        rig.hs.react(rig.cast.alice, rig.room, event_id, ONE),
        rig.hs.react(rig.cast.bob, rig.room, event_id, THREE),
    )
    answer = await rig.answered(key)
    notices = await rig.wait_notices(event_id, 2)

    winner, loser = (
        (rig.cast.alice, rig.cast.bob)
        if answer.respondent == rig.cast.alice.key
        else (rig.cast.bob, rig.cast.alice)
    )
    [told] = [n for n in notices if n["content"]["m.mentions"]]
    assert refusal_of(told, loser).startswith(f"Already answered by {name_of(winner)} (")
    assert len([a for a in await rig.store.audit(key) if a.action == "answer"]) == 1
    assert await rig.bot.dispatcher.drain() == 2
    assert len(await rig.edits(event_id)) == 1


async def test_an_edit_is_a_new_attempt_only_while_open_and_never_changes_the_answer(
    rig: Rig,
) -> None:
    key, event_id = await rig.post("options")

    reply = await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "hmm")
    await rig.wait_notices(event_id, 1)  # how to answer
    await rig.hs.edit(rig.cast.alice, rig.room, reply, "3")  # not hers to edit: ignored
    await rig.hs.edit(rig.cast.bob, rig.room, reply, "deny")
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("deny",), rig.cast.bob.key)

    await rig.hs.edit(rig.cast.bob, rig.room, reply, "allow once")
    await rig.settle(rig.cast.bob)
    assert await rig.answered(key) == answer
    assert len(await rig.notices(event_id)) == 2, "help, then the recorded edit; nothing after"


async def test_a_slack_answer_edits_the_matrix_copy(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    alice_on_slack = Identity(platform="slack", user="U0ALICE", display_name="Alice")

    outcome = await rig.bot.service.answer(
        key,
        Attempt(
            shown=SHOWN_WHOLE,
            respondent=alice_on_slack,
            option_ids=("deny",),
            via="slack:C0APPROVALS",
        ),
    )
    assert outcome.won
    assert await rig.bot.dispatcher.drain() == 2

    [edit] = await rig.edits(event_id)
    assert (
        "✅ Answered by Alice — Deny — 2026-11-10 09:30 UTC via Slack"
        in (edit["content"]["m.new_content"]["body"])
    )
    await rig.hs.react(rig.cast.bob, rig.room, event_id, ONE)
    [told] = await rig.wait_notices(event_id, 1)
    assert refusal_of(told, rig.cast.bob).startswith("Already answered by Alice (Deny)")
    assert "via Slack" in told["content"]["body"]


async def test_a_secret_typed_in_a_thread_is_not_taken_and_is_taken_out_of_the_room(
    rig: Rig, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    canary = "CANARY-s3cr3t-7f41d2"
    key = await rig.intake_elicitation(
        elicitation(
            source_id="sec_1",
            question="Paste the deploy token",
            answer_mode=AnswerMode.SECRET,
            options=(),
        )
    )
    assert await rig.bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    assert isinstance(delivery.ref, MatrixRef)
    root = delivery.ref.event_id

    reply = await rig.hs.reply_in_thread(rig.cast.bob, rig.room, root, canary)
    [told] = await rig.wait_notices(root, 1)

    assert refusal_of(told, rig.cast.bob) == USE_PRIVATE_FORM

    async def redacted() -> bool:
        event = await rig.hs.event(rig.cast.alice, rig.room, reply)
        return not event["content"]

    await until(redacted, "the secret redacted")
    assert await rig.status(key) is Status.PENDING
    assert canary not in json.dumps(await rig.store.audit(key), default=str)
    database = Path(rig.url.removeprefix("sqlite:///"))
    for path in database.parent.glob(database.name + "*"):
        assert canary.encode() not in path.read_bytes(), path
    logged = capsys.readouterr()
    for text in (logged.out, logged.err, caplog.text):
        assert canary not in text
        assert rig.cast.bot.access_token not in text


async def test_im_on_it_in_the_thread_claims_the_question(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "!elicitbot claim")
    [notice] = await rig.wait_notices(event_id, 1)

    assert "is on it until" in notice["content"]["body"]
    view = await rig.bot.service.view(key)
    assert view is not None
    assert view.claim is not None
    assert view.claim.by == rig.cast.bob.key
    assert await rig.status(key) is Status.PENDING


async def test_a_raised_hand_reaction_claims_the_question(rig: Rig) -> None:
    key, event_id = await rig.post("options")

    await rig.hs.react(rig.cast.bob, rig.room, event_id, "🙋")
    [notice] = await rig.wait_notices(event_id, 1)

    assert "is on it until" in notice["content"]["body"]
    view = await rig.bot.service.view(key)
    assert view is not None
    assert view.claim is not None
    assert view.answer is None

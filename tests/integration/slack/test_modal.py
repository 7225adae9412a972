"""Slack interactivity end to end: multiple choice, the reply modal, oversize questions and the
secret canary (see :mod:`tests.integration.slack.rig`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import structlog

from adapters.slack.render import REPLY_ACTION, SUBMIT_ACTION
from bot.domain.model import (
    AnswerMode,
    Meaning,
    Option,
    Status,
)
from tests.integration.slack.rig import (
    AGENT,
    ALICE,
    BOB,
    C1,
    Rig,
    action_button,
    button,
    last_text,
    text_value,
)
from tests.slack_fake import SlackCall
from tests.unit.domain.builders import elicitation

# --------------------------------------------------------------------------- choices and modal


async def test_multiple_choice_is_answered_from_the_messages_selection(rig: Rig) -> None:
    options = tuple(Option(id=f"o{i}", label=f"Region {i}") for i in range(1, 5))
    key = await rig.intake(elicitation(answer_mode=AnswerMode.MULTI_CHOICE, options=options))
    await rig.drain()
    message = rig.message(key)
    [actions] = [
        b
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
    ]
    select, submit = actions["elements"]
    picked = [select["options"][1], select["options"][3]]
    state = {
        actions["block_id"]: {
            "elicitbot.choose_many": {"type": "multi_static_select", "selected_options": picked}
        }
    }

    await rig.click(message, {**select, "block_id": actions["block_id"]}, state=state)
    await rig.click(message, {**submit, "block_id": actions["block_id"]}, state=state)
    await rig.drain()

    assert submit["action_id"] == SUBMIT_ACTION
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("o2", "o4")


async def test_an_option_needing_a_comment_opens_the_modal_with_it_chosen(rig: Rig) -> None:
    options = (
        Option(id="approve", label="Approve", meaning=Meaning.APPROVE),
        Option(id="deny", label="Deny", meaning=Meaning.REJECT, requires_text=True),
    )
    key = await rig.intake(elicitation(options=options))
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, button(message, "deny"))
    await rig.slack.idle()

    assert await rig.status(key) is Status.PENDING
    [modal] = rig.fake.views()
    assert modal["callback_id"] == "elicitbot.reply"
    [comment] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert comment["optional"] is False
    response = await rig.submit(
        modal, {"elicitbot.text": {"value": text_value("It drops the audit table.")}}
    )
    await rig.drain()

    assert response.status_code == 200
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.option_ids, view.answer.text) == (("deny",), "It drops the audit table.")


async def test_over_long_modal_text_keeps_the_modal_open_with_the_limit(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)
    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.slack.idle()
    [modal] = rig.fake.views()
    [box] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert box["element"]["max_length"] == 2000

    response = await rig.submit(modal, {"elicitbot.text": {"value": text_value("🙂" * 2001)}})
    await rig.drain()

    assert response.status_code == 200
    assert response.json() == {
        "response_action": "errors",
        "errors": {"elicitbot.text": "Your answer is 2,001 characters; the limit is 2,000."},
    }
    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []

    accepted = await rig.submit(modal, {"elicitbot.text": {"value": text_value("🙂" * 2000)}})
    await rig.drain()
    assert accepted.text == ""
    assert await rig.status(key) is Status.ANSWERED


async def test_the_reply_button_on_an_answered_request_says_who_answered(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)
    reply_button = action_button(message, REPLY_ACTION)
    await rig.reply(message, "main", user=BOB)
    await rig.drain()

    await rig.click(message, reply_button)
    await rig.drain()

    assert rig.fake.views() == []
    [told] = rig.ephemerals(ALICE)
    assert told["text"].startswith("Already answered by slack:U0BOB (“main”)")


# --------------------------------------------------------------------------- oversize


async def test_an_oversize_question_posts_and_is_answered_through_its_select(rig: Rig) -> None:
    from tests.unit.slack.test_render import QUESTION_50KB, oversize

    e = oversize(asker=AGENT)
    assert e.question == QUESTION_50KB
    assert len(e.question.encode()) >= 50_000, "50 KB of text"
    assert len(e.options) == 40
    assert min(len(o.label) for o in e.options) == 300
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    [post] = rig.fake.calls_to("chat.postMessage")
    assert post.ok, post.response
    [actions] = [
        b
        for b in message["blocks"]
        if b["type"] == "actions" and any(el["type"] == "static_select" for el in b["elements"])
    ]
    [select] = [el for el in actions["elements"] if el["type"] == "static_select"]
    # The message cannot hold 50 KB: its select leaves the approving options to Review… (rule 2).
    assert len(select["options"]) == sum(not o.approving for o in e.options)
    chosen = next(o for o in select["options"] if "(admin)" not in o["text"]["text"])
    action = {**select, "block_id": actions["block_id"], "selected_option": chosen}

    await rig.click(message, action)
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == (json.loads(chosen["value"])["o"],)
    assert all(c.ok for c in rig.fake.calls()), [c.response for c in rig.fake.calls() if not c.ok]


async def test_an_oversize_choice_or_text_question_opens_a_modal_within_limits(rig: Rig) -> None:
    from tests.unit.slack.test_render import oversize

    e = oversize(asker=AGENT, answer_mode=AnswerMode.CHOICE_OR_TEXT)
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.slack.idle()

    [opened] = rig.fake.calls_to("views.open")
    assert opened.ok, opened.response
    [modal] = rig.fake.views()
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert set(inputs) == {"elicitbot.choice", "elicitbot.text"}
    # Opened from a message that cannot hold it all: no approving option there (rule 2).
    assert len(inputs["elicitbot.choice"]["element"]["options"]) == sum(
        not o.approving for o in e.options
    )


# --------------------------------------------------------------------------- secrets


async def test_a_secret_goes_upstream_only(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    canary = "CANARY-7f3e9b1d-secret-value"
    typed = "CANARY-typed-in-the-thread-42"
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as events:
        e = elicitation(
            source="pinework",
            source_id="qst_0secret",
            answer_mode=AnswerMode.SECRET,
            options=(),
            question="Paste the deploy token for staging.",
        )
        key = await rig.intake(e)
        await rig.drain()
        message = rig.message(key)
        await rig.reply(message, typed, event_id="Ev0TYPED")
        await rig.click(message, action_button(message, REPLY_ACTION))
        await rig.slack.idle()
        [modal] = rig.fake.views()
        response = await rig.submit(modal, {"elicitbot.secret": {"value": text_value(canary)}})
        await rig.drain()

    assert response.text == ""
    [(upstream_key, upstream_secret, idempotency_key)] = rig.secret_sink.secrets
    assert (upstream_key, upstream_secret) == (key, canary)
    assert idempotency_key.startswith(f"elicitbot:{key}:secret")
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.secret, view.answer.text) == (True, None)
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert "(secret)" in last_text(rewritten)
    [told] = rig.ephemerals(ALICE)
    assert told["text"].startswith("This answer is a secret: use the private form")
    out, err = capfd.readouterr()
    files = [tmp_path / name for name in ("elicitbot.db", "elicitbot.db-wal", "elicitbot.db-shm")]
    files = [f for f in files if f.exists()]
    assert files, "the database file is there to search"
    for secret in (canary, typed):
        for path in files:
            assert secret.encode() not in path.read_bytes(), path.name
        assert secret not in json.dumps([_record(c) for c in rig.fake.calls()])
        assert secret not in json.dumps(rig.fake.views() + rig.fake.ephemerals())
        assert secret not in caplog.text
        assert secret not in repr(events)
        assert secret not in out + err
    assert typed not in repr(rig.secret_sink.secrets), "a secret typed in chat goes nowhere"


def _record(call: SlackCall) -> dict[str, Any]:
    return {"method": call.method, "params": call.params, "response": call.response}

"""A handup form (three questions) answered in the Slack modal, end to end: the request posted to
the fake Slack, the *Answer…* button, the modal's one input per question, a signed
``view_submission``, and the terminal Request at the callback receiver (``FakeWebhook``) with
every answer under its question id, checked against handup's JSON Schema; the message then says
Answered (see :mod:`tests.integration.slack.rig`)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.slack.render import REPLY_ACTION
from adapters.sources.handup import HandupSink, validation
from adapters.sources.handup.elicitation import to_elicitation
from adapters.sources.handup.validation import schema_problems
from bot.domain.model import Status
from tests.fakes import FakeWebhook
from tests.integration.slack.rig import Rig, action_button, last_text, text_value
from tests.slack_fake import BOT_USER

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sources" / "handup.json"
FORM: dict[str, Any] = json.loads(FIXTURES.read_text(encoding="utf-8"))["valid"]["form"]


@pytest.fixture
def hook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as receiver:
        yield receiver


@pytest.fixture
async def handup(rig: Rig, hook: FakeWebhook) -> AsyncIterator[list[str]]:
    """handup's real sink in the rig, calling back to ``hook``; yields the allowlist."""
    allowlist = [f"http://127.0.0.1:{hook.port}/"]
    async with httpx.AsyncClient() as client:
        rig.sinks["handup"] = HandupSink(client, allowlist)
        yield allowlist


def select(block: dict[str, Any], *labels: str) -> list[dict[str, Any]]:
    """The modal's option objects with these labels (⭐ marks and all), as Slack sends them back."""
    options = block["element"]["options"]
    return [o for label in labels for o in options if o["text"]["text"].endswith(label)]


async def test_a_three_question_form_answered_in_the_modal_reaches_the_callback(
    rig: Rig, hook: FakeWebhook, handup: list[str]
) -> None:
    data = {**copy.deepcopy(FORM), "callback_url": hook.url}
    e = to_elicitation(
        validation.check(data, handup), request_id="hr_form_slack", now=rig.clock.now()
    )
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.slack.idle()
    [opened] = rig.fake.calls_to("views.open")
    assert opened.ok, opened.response
    [modal] = rig.fake.views()
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    channel, targets = inputs["elicitbot.form.1.choice"], inputs["elicitbot.form.2.choice"]
    assert channel["element"]["initial_option"] == select(channel, "beta")[0]
    values = {
        "elicitbot.form.1.choice": {
            "value": {"type": "static_select", "selected_option": select(channel, "beta")[0]}
        },
        "elicitbot.form.2.choice": {
            "value": {
                "type": "multi_static_select",
                "selected_options": select(targets, "linux", "macos"),
            }
        },
    }

    # Release notes left blank (spaces): refused on its own input, before the ack.
    blank = await rig.submit(modal, {**values, "elicitbot.form.3.text": {"value": text_value(" ")}})
    assert blank.json() == {
        "response_action": "errors",
        "errors": {"elicitbot.form.3.text": "Write an answer; it cannot be empty."},
    }
    notes = {"elicitbot.form.3.text": {"value": text_value("First release on macOS.")}}
    sent = await rig.submit(modal, {**values, **notes})
    await rig.drain()

    assert (sent.status_code, sent.text) == (200, "")
    [callback] = hook.recorded()
    document = callback.body
    assert document["status"] == "answered"
    assert document["decision"]["fields"]["answers"] == {
        "channel": {"selected": ["beta"], "text": None},
        "targets": {"selected": ["linux", "macos"], "text": None},
        "notes": {"selected": [], "text": "First release on macOS."},
    }
    assert schema_problems(document) == []
    assert await rig.status(key) is Status.ANSWERED
    rewritten = rig.fake.message("C0APPROVALS", message["ts"])
    assert rewritten is not None
    assert last_text(rewritten).startswith(
        "✅ Answered by u0alice — Channel: beta · Which targets?: linux, macos · "
        "Release notes?: “First release on macOS.” — "
    )
    [note] = [m for m in rig.thread(message) if m["user"] == BOT_USER]
    assert note["text"].startswith("📨 u0alice answered — Channel: beta · ")
    assert all(c.ok for c in rig.fake.calls()), [c.response for c in rig.fake.calls() if not c.ok]

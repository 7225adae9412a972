"""The recorded Slack payloads (tests/responses/slack/) sent, signed, to the real Bolt app.

Each is the documented payload, with only what names this run changed to the rig's: the channel,
the posted message's ts, the person and the workspace.
"""

from __future__ import annotations

import copy
from typing import Any

from bot.domain.model import Status
from tests.integration.slack.rig import ALICE, C1, Rig
from tests.responses import load
from tests.slack_fake import TEAM_ID


def _as_here(body: dict[str, Any], ts: str) -> dict[str, Any]:
    payload = copy.deepcopy(body)
    payload["user"].update(id=ALICE, team_id=TEAM_ID)
    payload["team"]["id"] = TEAM_ID
    payload["channel"]["id"] = C1
    payload["container"].update(channel_id=C1, message_ts=ts)
    payload["message"]["ts"] = ts
    return payload


async def test_the_recorded_deny_click_answers_the_question_through_the_bolt_app(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    payload = _as_here(load("slack", "block_actions_button.json"), message["ts"])
    assert payload["actions"][0]["value"] in {b["value"] for b in _buttons(message)}

    response = await rig.send_interaction(payload)
    await rig.drain()

    assert response.status_code == 200
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.option_ids == ("deny",)
    assert view.answer.respondent == f"slack:{ALICE}"


async def test_a_recorded_reaction_on_the_question_is_not_handled_and_answers_nothing(
    rig: Rig,
) -> None:
    """Slack answers with buttons: the manifest subscribes to no reaction events, so had one
    been sent, Bolt leaves it unhandled (404) and the question stays as it was."""
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    body = load("slack", "reaction_added.json")
    event = copy.deepcopy(body["event"])
    event.update(user=ALICE)
    event["item"].update(channel=C1, ts=message["ts"])

    response = await rig.send_event(event, body["event_id"])
    await rig.drain()

    assert response.status_code == 404
    assert await rig.status(key) is Status.PENDING
    assert rig.ephemerals(ALICE) == []
    assert rig.thread(message) == []


def _buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        element
        for block in message["blocks"]
        if block["type"] == "actions"
        for element in block["elements"]
    ]

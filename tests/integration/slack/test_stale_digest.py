"""Rule 2 by digest on Slack: a button carries the approval subject digest its message was
rendered with, so a click on a copy rendered before the subject's content changed (same revision,
another digest) is refused, and the updated copy's buttons carry the new digest and count."""

from __future__ import annotations

import copy
import json

from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import Status
from bot.service import Inbound
from tests.integration.slack.rig import ALICE, Rig, button
from tests.unit.sources.superpipeline_fixtures import VALID

NEW_DIGEST = "sha256:" + "9e" * 32


async def test_a_click_on_a_copy_of_the_old_digest_is_refused_and_the_new_copy_counts(
    rig: Rig,
) -> None:
    key = await rig.intake_fixture("approval-request")
    await rig.drain()
    old = copy.deepcopy(rig.message(key))
    old_button = button(old, "allow_once")
    assert json.loads(old_button["value"])["d"].startswith("sha256:4f2a0c1e")

    data = copy.deepcopy(VALID["approval-request"])
    data["approvalSubject"]["digest"] = NEW_DIGEST  # the same revision (1), other content
    data["approvalSubject"]["preview"][0]["text"] = "We shipped the decision envelope twice."
    e = parse_body(data, workspace="acme")
    [outcome] = await rig.service.intake([Inbound("test", "in-2", e, {})])
    assert outcome.result == "updated"
    await rig.drain()
    updated = rig.message(key)
    new_button = button(updated, "allow_once")
    print("the updated copy's Approve button:", json.dumps(new_button))
    assert json.loads(new_button["value"]) == {"e": key, "o": "allow_once", "r": 1, "d": NEW_DIGEST}

    response = await rig.click(old, old_button)
    await rig.slack.idle()
    assert response.status_code == 200
    [told] = rig.ephemerals(ALICE)
    assert told["text"] == (
        "The request changed since this message was shown; answer on the updated message."
    ), told
    assert await rig.status(key) is Status.PENDING

    await rig.click(updated, new_button, action_ts="1700000101.000001")
    await rig.slack.idle()
    assert await rig.status(key) is Status.ANSWERED

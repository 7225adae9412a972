"""Issue 26: order survives retries. The fake Slack Web API fails ``chat.postMessage`` for 30 s
(the injected clock: the dispatcher's retries and the channel's pace follow it) while six
questions wait for one channel: only the first is tried (the others wait behind it), and once
Slack answers again they appear in the order they were taken in, each once."""

from __future__ import annotations

import json
from typing import Any

from bot.domain import lanes
from bot.domain.model import ElicitationKey
from tests.integration.slack.rig import C1, Rig
from tests.slack_fake import FakeSlack

QUESTIONS = 6
OUTAGE_S = 30.0
STEP_S = 0.5


def posted_keys(fake: FakeSlack) -> list[str]:
    """The channel's questions, oldest first, by the elicitation their metadata names."""
    return [
        m["metadata"]["event_payload"]["elicitation"]
        for m in sorted(fake.messages(C1), key=lambda m: float(m["ts"]))
        if m.get("metadata")
    ]


def tried_keys(fake: FakeSlack) -> list[str]:
    """The questions ``chat.postMessage`` was called for, in call order."""
    keys: list[str] = []
    for call in fake.calls_to("chat.postMessage"):
        metadata: Any = call.params.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        assert isinstance(metadata, dict), call
        keys.append(metadata["event_payload"]["elicitation"])
    return keys


async def test_questions_come_out_in_intake_order_after_a_30_s_slack_outage(
    rig: Rig, fake: FakeSlack
) -> None:
    fake.script("chat.postMessage", status=503, error="service_unavailable", times=10_000)
    keys = [
        await rig.intake_fixture("options", elicitationId=f"eli_order{n:04d}")
        for n in range(QUESTIONS)
    ]
    start = rig.clock.now()
    while (rig.clock.now() - start).total_seconds() < OUTAGE_S:
        await rig.drain()
        rig.clock.advance(STEP_S)
    during = tried_keys(fake)
    assert posted_keys(fake) == []
    assert set(during) == {keys[0]}, "only the head is tried; the others wait behind it"
    assert OUTAGE_S / lanes.PROBE_CEILING_SECONDS - 2 <= len(during) <= OUTAGE_S / 1.0 + 2

    fake.clear_scripts()  # Slack is back
    back = rig.clock.now()
    while len(posted_keys(fake)) < QUESTIONS:
        assert (rig.clock.now() - back).total_seconds() <= 15, posted_keys(fake)
        await rig.drain()
        rig.clock.advance(STEP_S)

    print(f"order after the outage: {[keys.index(ElicitationKey(k)) for k in posted_keys(fake)]}")
    assert posted_keys(fake) == keys, "in the order they were taken in"

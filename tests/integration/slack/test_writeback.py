"""The Slack copy follows the write-back (issue 13): "Sending…" while the upstream has not taken
the answer, "Answered" once it has, and when it refuses for good the message is open again with
the reason above its buttons, the person told privately in the thread, and the next answer wins
(see :mod:`tests.integration.slack.rig`)."""

from __future__ import annotations

from adapters.slack.render import REPLY_ACTION
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Status
from tests.integration.slack.rig import (
    ALICE,
    BOB,
    C1,
    Rig,
    button,
    has_actions,
    last_text,
    texts,
)

REFUSAL = "SuperPipeline refused the answer (HTTP 422): option allow_once is retired."


async def test_the_copy_says_sending_until_the_upstream_takes_the_answer(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    rig.sink.fail_next(1, TransientDeliveryError("HTTP 503"))

    await rig.click(message, button(message, "allow_once"))
    await rig.drain()

    waiting = rig.fake.message(C1, message["ts"])
    assert waiting is not None
    assert last_text(waiting).startswith("⏳ Sending u0alice’s answer — Allow once — to ")  # noqa: RUF001
    assert not has_actions(waiting)
    assert not any("Answered" in t for t in texts(waiting["blocks"]))

    rig.clock.advance(60)
    await rig.drain()
    done = rig.fake.message(C1, message["ts"])
    assert done is not None
    assert last_text(done).startswith("✅ Answered by u0alice — Allow once — ")
    assert len(rig.sink.delivered) == 1


async def test_a_refused_answer_reopens_the_copy_with_the_reason_and_tells_the_person(
    rig: Rig,
) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    rig.sink.fail_next(1, PermanentDeliveryError(REFUSAL))

    await rig.click(message, button(message, "allow_once"))
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    reopened = rig.fake.message(C1, message["ts"])
    assert reopened is not None
    assert has_actions(reopened), "answerable again"
    blocks = reopened["blocks"]
    [at] = [i for i, b in enumerate(blocks) if b["type"] == "section" and "⚠️" in str(b)]
    assert at < next(i for i, b in enumerate(blocks) if b["type"] == "actions")
    assert "option allow_once is retired" in blocks[at]["text"]["text"]
    assert not any("Answered" in t for t in texts(blocks))
    told = [e for e in rig.ephemerals(ALICE) if "allow_once is retired" in e["text"]]
    assert len(told) == 1
    assert told[0].get("thread_ts") == message["ts"]

    await rig.click(reopened, button(reopened, "deny"), user=BOB, action_ts="1700000101.000001")
    await rig.drain()
    done = rig.fake.message(C1, message["ts"])
    assert done is not None
    assert last_text(done).startswith("✅ Answered by u0bob — Deny — ")
    assert not any("⚠️" in t for t in texts(done["blocks"]))
    assert REPLY_ACTION not in str(done["blocks"])

"""Slack interactivity end to end (see :mod:`tests.integration.slack.rig`): every SuperPipeline
fixture, acks first, retried events and double clicks, thread replies, the asker, admin-only
options and crafted payloads, incomplete previews, over-long text and which elicitation a click
is about."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from typing import Any

import pytest

from adapters.slack.render import REPLY_ACTION
from adapters.slack.translate import slack_text
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import (
    Route,
    Status,
)
from tests.integration.slack.rig import (
    ADMIN,
    AGENT_USER,
    ALICE,
    ASKER,
    BOB,
    C1,
    C2,
    Rig,
    action_button,
    button,
    buttons,
    has_actions,
    last_text,
    text_value,
)
from tests.slack_fake import BOT_ID, BOT_USER, TEAM_ID
from tests.unit.sources.superpipeline_fixtures import VALID

# --------------------------------------------------------------------------- every fixture


async def answer_fixture(rig: Rig, case: str, message: dict[str, Any]) -> None:
    """Each case the way a person would: a button, a thread reply, the Reply… modal."""
    if case in ("options", "approval-request"):
        response = await rig.click(message, button(message, "allow_once"))
    elif case == "free-text":
        response = await rig.reply(message, "<@U0ELICITBOT> main, please")
    else:
        assert (await rig.click(message, action_button(message, REPLY_ACTION))).status_code == 200
        await rig.slack.idle()
        [modal] = rig.fake.views()
        response = await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}})
    assert response.status_code == 200
    assert response.text == ""


@pytest.mark.parametrize("case", sorted(VALID))
async def test_every_superpipeline_fixture_is_posted_answered_and_rewritten(
    rig: Rig, case: str
) -> None:
    key = await rig.intake_fixture(case)
    await rig.drain()
    message = rig.message(key)
    assert has_actions(message), "buttons while pending"

    await answer_fixture(rig, case, message)
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{ALICE}"
    assert view.answer.via == f"slack:{C1}"
    expected = {"free-text": "main, please", "no-options-no-question": "noted"}.get(case)
    assert view.answer.text == expected
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert not has_actions(rewritten)
    # By name where the payload gives one (a click, a modal), else as a mention (issue 12).
    who = f"<@{ALICE}>" if case == "free-text" else ALICE.lower()
    assert last_text(rewritten).startswith(f"✅ Answered by {who} — ")
    [note] = [m for m in rig.thread(message) if m["user"] == BOT_USER]
    # The thread note says who answered and that it is on its way; never "Answered", which the
    # message says once the upstream accepted it.
    assert note["text"].startswith(f"📨 {who} answered — ")
    assert note["text"].endswith("; sending it to SuperPipeline.")
    assert [d.view.elicitation.key for d in rig.sink.delivered] == [key]
    assert all(c.ok for c in rig.fake.calls()), [c for c in rig.fake.calls() if not c.ok]


# --------------------------------------------------------------------------- ack first


async def test_every_interaction_is_acked_before_its_work(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    rig.fake.script("chat.postEphemeral", delay=2.0)

    started = time.monotonic()
    response = await rig.click(message, button(message, "allow_always"), user=BOB)
    acked = time.monotonic() - started

    assert response.status_code == 200
    assert response.text == ""
    assert acked < 1.0, f"acked after {acked:.2f} s"
    await rig.slack.idle()
    assert time.monotonic() - started >= 2.0, "the refusal was still being sent"
    [told] = rig.ephemerals(BOB)
    assert "Only a workspace admin can choose “Always allow”" in told["text"]


# --------------------------------------------------------------------------- redelivery


async def test_a_double_click_records_one_answer_and_tells_the_second_click(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    deny = button(message, "deny")

    first = await rig.click(message, deny, action_ts="1700000100.000001")
    await rig.slack.idle()
    await asyncio.sleep(0.2)
    second = await rig.click(message, deny, action_ts="1700000100.200001")
    again = await rig.click(message, deny, action_ts="1700000100.200001")  # identical payload
    await rig.drain()

    assert [first.status_code, second.status_code, again.status_code] == [200, 200, 200]
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("deny",)
    assert len(rig.sink.delivered) == 1, "one write-back"
    told = rig.ephemerals(ALICE)
    assert len(told) == 2
    for notice in told:
        assert notice["text"].startswith("Already answered by you (Deny) at 2026-11-10 09:30 UTC")
        assert notice["channel"] == C1
        assert "thread_ts" not in notice, "a click on a top-level message: not in a thread"
    assert len([m for m in rig.thread(message) if m["user"] == BOT_USER]) == 1
    assert len(rig.fake.calls_to("chat.update")) == 1
    audit = await rig.store.audit(key)
    assert [a.code for a in audit if a.action == "refusal"] == ["already_answered"] * 2


async def test_retried_thread_reply_events_answer_once(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    statuses = [(await rig.reply(message, "release/2026.11", event_id="Ev0AAA")).status_code]
    for n in (1, 2, 3):
        retried = await rig.send_event(
            {
                "type": "message",
                "channel": C1,
                "user": ALICE,
                "team": TEAM_ID,
                "text": "release/2026.11",
                "ts": "1700000200.000001",
                "thread_ts": message["ts"],
            },
            "Ev0AAA",
            **{"x-slack-retry-num": str(n), "x-slack-retry-reason": "http_timeout"},
        )
        statuses.append(retried.status_code)
    # The same message under another event id (Slack sometimes sends one message twice).
    statuses.append((await rig.reply(message, "release/2026.11", event_id="Ev0BBB")).status_code)
    await rig.drain()

    assert statuses == [200] * 5
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.text == "release/2026.11"
    assert len(rig.sink.delivered) == 1
    assert rig.ephemerals(ALICE) == [], "a redelivery is not a second attempt"
    assert len([m for m in rig.thread(message) if m["user"] == BOT_USER]) == 1
    assert [a.action for a in await rig.store.audit(key)].count("refusal") == 0


async def test_a_retried_event_whose_first_delivery_was_lost_is_handled(rig: Rig) -> None:
    """Dedupe is by event_id in the store, not by the retry header: a retry that is the only
    copy that arrived is answered."""
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    response = await rig.send_event(
        {
            "type": "message",
            "channel": C1,
            "user": ALICE,
            "team": TEAM_ID,
            "text": "main",
            "ts": "1700000200.000009",
            "thread_ts": message["ts"],
        },
        "Ev0ONLYRETRY",
        **{"x-slack-retry-num": "2", "x-slack-retry-reason": "http_timeout"},
    )
    await rig.drain()

    assert response.status_code == 200
    assert await rig.status(key) is Status.ANSWERED


# --------------------------------------------------------------------------- thread replies


async def test_a_thread_reply_names_an_option_by_number_after_a_mention(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, f"<@{BOT_USER}> 3")
    await rig.drain()

    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.option_ids == ("deny",)


async def test_a_thread_reply_naming_no_option_gets_how_to_answer_in_the_thread(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "hmm, not sure")
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["thread_ts"] == message["ts"]
    assert told["text"].startswith("To answer, reply with the number, id or label of one option:")
    assert "3. Deny (deny)" in told["text"]
    assert await rig.status(key) is Status.PENDING


async def test_elicitbots_own_messages_are_ignored_outright(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "3", user=BOT_USER, bot_id=BOT_ID, event_id="Ev0OWN")
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []
    assert [a.action for a in await rig.store.audit(key)].count("refusal") == 0


async def test_an_agent_bots_reply_is_refused_and_nobody_is_told(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(
        message,
        "main",
        user=None,
        subtype="bot_message",
        bot_id="B0AGENTBOT",
        event_id="Ev0AGENT",
    )
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert rig.fake.ephemerals() == []
    refused = [a for a in await rig.store.audit(key) if a.action == "refusal"]
    assert [(r.actor, r.code) for r in refused] == [("slack:B0AGENTBOT", "agent")]


async def test_an_over_long_thread_reply_is_refused_with_the_limit(rig: Rig) -> None:
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    await rig.reply(message, "é" * 2001)
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["text"] == "Your answer is 2,001 characters; the limit is 2,000."
    assert told["thread_ts"] == message["ts"]
    assert await rig.status(key) is Status.PENDING


def test_slack_markup_becomes_what_was_typed() -> None:
    assert slack_text("<@U0ELICITBOT> 2") == "2"
    assert slack_text("<@U0ELICITBOT|elicitbot>  Deny ") == "Deny"
    assert slack_text("see <https://x.example/a?b=1&amp;c=2|x.example> &amp; <#C1|general>") == (
        "see x.example & #general"
    )
    assert slack_text("<https://x.example/p>") == "https://x.example/p"
    assert slack_text("&lt;b&gt; <!here>") == "<b> @here"


# --------------------------------------------------------------------------- who may answer


async def test_the_asker_is_refused_privately_and_someone_else_still_answers(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    await rig.click(message, button(message, "deny"), user=ASKER)
    await rig.click(message, button(message, "deny"), user=AGENT_USER)
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert [e["text"] for e in rig.ephemerals(ASKER)] == [
        "You asked this question, so you cannot answer it."
    ]
    assert [e["text"] for e in rig.ephemerals(AGENT_USER)] == [
        "Agents cannot answer questions; a person must answer."
    ]
    assert rig.fake.calls_to("chat.update") == [], "nothing changes for anyone else"
    assert rig.thread(message) == []

    await rig.click(message, button(message, "deny"), user=BOB)
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{BOB}"


async def test_a_non_admin_is_refused_an_admin_option_even_by_a_crafted_payload(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    always = button(message, "allow_always")
    assert always["text"]["text"] == "Always allow (admin)"
    crafted = {**button(message, "deny"), "value": json.dumps({"e": key, "o": "allow_always"})}

    for action in (always, crafted, {**crafted, "value": json.dumps({"e": key, "o": "rm_rf"})}):
        await rig.click(message, action, user=BOB)
        await rig.slack.idle()
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    assert [e["text"] for e in rig.ephemerals(BOB)] == [
        "Only a workspace admin can choose “Always allow”.",
        "Only a workspace admin can choose “Always allow”.",
        "That option is not offered on this question.",
    ]
    await rig.click(message, always, user=ADMIN)
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.respondent, view.answer.option_ids) == (
        f"slack:{ADMIN}",
        ("allow_always",),
    )


async def test_incomplete_preview_shows_no_approve_button_and_refuses_a_crafted_one(
    rig: Rig,
) -> None:
    subject = copy.deepcopy(VALID["approval-request"]["approvalSubject"])
    subject["previewComplete"] = False
    key = await rig.intake_fixture("approval-request", approvalSubject=subject)
    await rig.drain()
    message = rig.message(key)
    shown = {json.loads(b["value"]).get("o") for b in buttons(message)}
    assert shown == {"deny"}
    assert any("preview is incomplete" in t for t in _texts(message))
    crafted = {
        **button(message, "deny"),
        "action_id": "elicitbot.option.0",
        "value": json.dumps({"e": key, "o": "allow_once", "r": 1}),
    }

    await rig.click(message, crafted, user=ADMIN)
    await rig.drain()

    assert await rig.status(key) is Status.PENDING
    [told] = rig.ephemerals(ADMIN)
    assert told["text"] == (
        "You cannot choose “Allow once” now: the preview is incomplete, so approving is not "
        "offered."
    )
    await rig.click(message, button(message, "deny"), user=ADMIN)
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED


def _texts(message: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message["blocks"])
    return found


# --------------------------------------------------------------------------- which elicitation


async def test_a_click_on_an_older_copy_resolves_by_the_key_in_its_value(rig: Rig) -> None:
    e = parse_body(copy.deepcopy(VALID["options"]), workspace="acme")
    key = await rig.intake(e, route=Route(destinations=(f"slack:{C1}", f"slack:{C2}")))
    await rig.drain()
    first, second = rig.message(key, C1), rig.message(key, C2)

    await rig.click(second, button(second, "deny"), channel=C2)
    await rig.drain()

    assert await rig.status(key) is Status.ANSWERED
    for channel, message in ((C1, first), (C2, second)):
        rewritten = rig.fake.message(channel, message["ts"])
        assert rewritten is not None
        assert not has_actions(rewritten), f"{channel} still has buttons"
    assert len(rig.thread(second, C2)) == 1
    assert rig.thread(first, C1) == []


async def test_a_value_without_a_key_resolves_through_the_message(rig: Rig) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    bare = {k: v for k, v in message.items() if k != "metadata"}
    action = {**button(message, "deny"), "value": json.dumps({"o": "deny", "r": None})}

    await rig.click(bare, action)
    await rig.drain()

    assert await rig.status(key) is Status.ANSWERED


async def test_a_click_on_a_message_elicitbot_does_not_know_is_told_so(rig: Rig) -> None:
    message = {"type": "message", "ts": "1700000999.000001", "blocks": []}
    action = {
        "action_id": "elicitbot.option.0",
        "block_id": "elicitbot.options.0",
        "type": "button",
        "value": json.dumps({"o": "deny"}),
    }

    await rig.click(message, action)
    await rig.drain()

    [told] = rig.ephemerals(ALICE)
    assert told["text"] == "This message is no longer connected to a request elicitbot knows."

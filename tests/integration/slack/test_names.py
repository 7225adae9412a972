"""People by name, end to end on the fake Slack (see :mod:`tests.integration.slack.rig`): the
person who clicks or replies is looked up with ``users.info`` (once: cached), and the answer is
recorded as theirs by name, so every copy says "Answered by Alice": the Slack message and its
thread, the web inbox, Matrix, the "Already answered by …" note, the system that asked. Without
``users:read`` the answer still counts, and the person is shown by member id (on Slack, a
mention)."""

from __future__ import annotations

from pathlib import Path

import yaml  # type: ignore[import-untyped]
from structlog.testing import capture_logs

from adapters.slack.api.people import SlackNames
from adapters.web.cards import result_view
from bot.domain.model import ElicitationKey, Status
from bot.domain.ports import PromptView
from tests.integration.slack.rig import ALICE, BOB, C1, Rig, button, last_text
from tests.slack_fake import BOT_USER

REPO = Path(__file__).resolve().parents[3]


def with_names(rig: Rig) -> None:
    """What bot.app.wiring does: the app names people through users.info, cached."""
    rig.slack.identify = SlackNames(rig.chat.client, clock=rig.clock).identify
    rig.fake.add_user(ALICE, display_name="Alice", real_name="Alice Smith")
    rig.fake.add_user(BOB, real_name="Bob Jones")


async def answered(rig: Rig, key: ElicitationKey) -> PromptView:
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    return view


def looked_up(rig: Rig, user: str) -> int:
    return sum(1 for c in rig.fake.calls_to("users.info") if c.params.get("user") == user)


async def test_a_click_is_answered_by_name_on_every_copy(rig: Rig) -> None:
    with_names(rig)
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)

    assert (await rig.click(message, button(message, "allow_once"))).status_code == 200
    await rig.drain()

    view = await answered(rig, key)
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{ALICE}"
    assert view.answer.display_name == "Alice"
    # The web inbox (and Matrix: both show the recorded name) and the system that asked.
    web = result_view(view)
    assert web is not None
    print(web.line)
    assert web.line.startswith("✅ Answered by Alice — ")
    assert [d.view.answer.display_name for d in rig.sink.delivered if d.view.answer] == ["Alice"]
    # The Slack copy, rewritten with chat.update, and the note in its thread.
    *_, update = [c for c in rig.fake.calls_to("chat.update") if c.params["ts"] == message["ts"]]
    rewritten = rig.fake.message(C1, message["ts"])
    assert rewritten is not None
    assert update.params["blocks"] == rewritten["blocks"]
    result = last_text(rewritten)
    print(result)
    assert result.startswith("✅ Answered by Alice — Allow once — ")
    [note] = [m for m in rig.thread(message) if m["user"] == BOT_USER]
    assert note["text"].startswith("📨 Alice answered — Allow once — ")

    # Later clicks: Bob is told who, by name; Alice's own second click needs no second lookup.
    await rig.click(message, button(message, "allow_once"), user=BOB)
    await rig.click(message, button(message, "allow_once"), action_ts="1700000101.000001")
    await rig.drain()
    [told] = rig.ephemerals(BOB)
    assert told["text"].startswith("Already answered by Alice (")
    assert looked_up(rig, ALICE) == 1
    assert looked_up(rig, BOB) == 1


async def test_a_thread_reply_carries_no_name_and_gets_one(rig: Rig) -> None:
    with_names(rig)
    key = await rig.intake_fixture("free-text")
    await rig.drain()
    message = rig.message(key)

    assert (await rig.reply(message, f"<@{BOT_USER}> main, please")).status_code == 200
    await rig.drain()

    view = await answered(rig, key)
    assert view.answer is not None
    assert view.answer.text == "main, please"
    assert view.answer.display_name == "Alice"


async def test_without_users_read_answers_still_count_and_ids_are_shown(rig: Rig) -> None:
    with_names(rig)
    rig.fake.script("users.info", error="missing_scope", times=10)
    clicked = await rig.intake_fixture("options")
    replied = await rig.intake_fixture("free-text")
    await rig.drain()
    rig.clock.advance(2)  # the second post's turn in the channel
    await rig.drain()

    with capture_logs() as logs:
        message = rig.message(clicked)
        await rig.click(message, button(message, "allow_once"))
        await rig.drain()
        thread = rig.message(replied)
        await rig.reply(thread, f"<@{BOT_USER}> main, please")
        await rig.drain()

    click = await answered(rig, clicked)
    reply = await answered(rig, replied)
    assert click.answer is not None
    assert reply.answer is not None
    # No name: the id (not the click payload's legacy username); on Slack, a mention.
    assert click.answer.display_name is None
    assert reply.answer.display_name is None
    for view in (click, reply):
        web = result_view(view)
        assert web is not None
        assert web.line.startswith(f"✅ Answered by slack:{ALICE} — ")
    for posted in (message, thread):
        rewritten = rig.fake.message(C1, posted["ts"])
        assert rewritten is not None
        assert last_text(rewritten).startswith(f"✅ Answered by <@{ALICE}> ")
    # Asked once: a missing scope stops every lookup for a while; said once, naming the scope.
    assert len(rig.fake.calls_to("users.info")) == 1
    [missing] = [e for e in logs if e["event"] == "slack.users_read_missing"]
    assert missing["scope"] == "users:read"


def test_the_manifest_asks_for_users_read() -> None:
    manifest = yaml.safe_load((REPO / "slack-app-manifest.yaml").read_text(encoding="utf-8"))
    assert "users:read" in manifest["oauth_config"]["scopes"]["bot"]
    assert "users:read" in (REPO / "docs" / "slack.md").read_text(encoding="utf-8")

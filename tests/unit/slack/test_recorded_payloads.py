"""Slack's payloads as documented (tests/responses/slack/) through adapters/slack/translate.py.

Each fixture is a whole payload as Slack delivers it, not a hand-made fragment: the click carries
the message our renderer posts, the submission the modal it opens.
"""

from __future__ import annotations

from adapters.slack.intake.commands import read_command
from adapters.slack.translate import (
    Where,
    choice,
    first_action,
    parse_submission,
    read_click,
    read_reply,
    read_submission,
    submission_errors,
    submit,
)
from bot.domain.actions import Choose, Command, Reply, Submit
from bot.domain.disclosure import SHOWN_WHOLE as WHOLE
from bot.domain.model import ElicitationKey, Identity
from tests.responses import load
from tests.unit.domain.builders import sp_free_text, sp_options

OPTIONS_KEY = ElicitationKey("superpipeline:eli_1a2b3c4d5e6f7081")
FREE_TEXT_KEY = ElicitationKey("superpipeline:eli_2b3c4d5e6f708192")
CHANNEL = "C0APPROVALS"
ROOT_TS = "1764700000.000100"
ALICE = Identity(platform="slack", user="U0ALICE001", team="T0ACME0001", display_name="alice")
BOT_ID, BOT_USER = "B0ELICITBOT", "U0ELICITBOT"


def test_a_recorded_button_click_is_the_choice_of_deny_which_asks_for_a_comment() -> None:
    body = load("slack", "block_actions_button.json")
    click = read_click(body, first_action(body))

    assert click is not None
    assert click.key == OPTIONS_KEY
    assert click.where == Where(CHANNEL, ROOT_TS, None)
    assert click.trigger_id == body["trigger_id"]
    assert choice(click, OPTIONS_KEY, sp_options(), shown=WHOLE) == Choose(
        OPTIONS_KEY, ALICE, f"slack:{CHANNEL}", ("deny",), None, shown=WHOLE, form=True
    )


def test_a_recorded_modal_submission_is_the_written_answer() -> None:
    body = load("slack", "view_submission.json")
    meta, text, chosen = parse_submission(body["view"])

    assert submission_errors(meta, text, body["view"]) == {}
    submission = read_submission(body, meta, text, chosen)
    assert submission is not None
    assert submission.key == FREE_TEXT_KEY
    assert submission.where == Where(CHANNEL, "1764700100.000200", None)
    assert submit(submission, FREE_TEXT_KEY, sp_free_text(), shown=WHOLE) == Submit(
        FREE_TEXT_KEY,
        ALICE,
        f"slack:{CHANNEL}",
        text="main, after the 2.4 release is tagged",
        shown=WHOLE,
    )


def test_a_recorded_thread_reply_is_the_reply_as_typed_without_the_mention() -> None:
    body = load("slack", "message_thread_reply.json")
    reply = read_reply(body, body["event"], bot_id=BOT_ID, bot_user_id=BOT_USER, agents=frozenset())

    assert reply is not None
    assert reply.event_id == "Ev0THREADREPLY"
    assert reply.root_ts == ROOT_TS
    who = Identity(platform="slack", user="U0ALICE001", team="T0ACME0001")
    assert reply.reply(OPTIONS_KEY, shown=WHOLE) == Reply(
        OPTIONS_KEY, who, f"slack:{CHANNEL}", "deny & roll back: see run 1841", shown=WHOLE
    )


def test_the_same_thread_reply_sent_by_elicitbot_itself_is_nothing() -> None:
    body = load("slack", "message_thread_reply.json")
    event = {**body["event"], "user": BOT_USER, "bot_id": BOT_ID}

    assert read_reply(body, event, bot_id=BOT_ID, bot_user_id=BOT_USER, agents=frozenset()) is None


def test_a_recorded_reaction_is_no_answer_on_slack() -> None:
    """On Slack the buttons answer (the manifest subscribes to no reaction event): a reaction on
    our message is not read as a reply."""
    body = load("slack", "reaction_added.json")

    assert body["event"]["item"]["ts"] == ROOT_TS  # on our question's message
    assert (
        read_reply(body, body["event"], bot_id=BOT_ID, bot_user_id=BOT_USER, agents=frozenset())
        is None
    )


def test_a_recorded_slash_command_is_the_command_in_its_channel() -> None:
    form = load("slack", "slash_command.urlencoded")
    who = Identity(platform="slack", user="U0ALICE001", team="T0ACME0001")

    assert read_command(form) == (
        Command(who, f"slack:{CHANNEL}", "subscribe superpipeline board=brd_7f3a"),
        CHANNEL,
    )

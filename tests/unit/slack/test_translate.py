"""adapters/slack/translate.py: Slack payloads as the core's actions, outcomes in Slack's words."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from adapters.slack.intake.commands import REFUSED_COMMAND, USAGE, command_text, read_command
from adapters.slack.modals.reply import CHOICE_BLOCK, INPUT_ACTION, TEXT_BLOCK
from adapters.slack.render import (
    ACK_ACTION,
    CLAIM_ACTION,
    MULTI_ACTION,
    OPTION_ACTION,
    REPLY_ACTION,
    SELECT_ACTION,
    SUBMIT_ACTION,
)
from adapters.slack.translate import (
    Where,
    choice,
    claim_text,
    first_action,
    parse_submission,
    payload_key,
    read_click,
    read_reply,
    read_submission,
    submission_errors,
    submit,
)
from bot.domain.actions import (
    Choose,
    Command,
    CommandResult,
    Outcome,
    OutcomeKind,
    Reply,
    Submit,
)
from bot.domain.deadlines import Claim
from bot.domain.disclosure import SHOWN_WHOLE as WHOLE
from bot.domain.model import Disclosure, ElicitationKey, Identity, Refusal, RefusalCode, Status
from tests.unit.domain.builders import NOW, sp_options

KEY = ElicitationKey("superpipeline:eli_1a2b3c4d5e6f7081")
C1 = "C0APPROVALS"
ALICE = Identity(platform="slack", user="U0ALICE", team="T0ACME", display_name="alice")


def click_body(action: dict[str, Any], **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U0ALICE", "team_id": "T0ACME", "name": "alice"},
        "team": {"id": "T0ACME"},
        "channel": {"id": C1},
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": C1},
        "message": {"ts": "1700000000.000100"},
        "trigger_id": "trig-1",
        "actions": [action],
    }
    body.update(changes)
    return body


def button(action_id: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"action_id": action_id, "block_id": "elicitbot.options.0", "value": json.dumps(value)}


# --------------------------------------------------------------------------- clicks


def test_a_button_is_a_choice_of_its_option_with_the_revision_seen() -> None:
    body = click_body(button(f"{OPTION_ACTION}.2", {"e": KEY, "o": "deny", "r": 3}))
    click = read_click(body, first_action(body))

    assert click is not None
    assert click.who == ALICE
    assert click.where == Where(C1, "1700000000.000100", None)
    assert click.key == KEY
    assert choice(click, KEY, sp_options(), shown=WHOLE) == Choose(
        KEY, ALICE, f"slack:{C1}", ("deny",), 3, shown=WHOLE, form=True
    )


def test_what_a_click_showed_is_the_apps_never_the_payloads() -> None:
    """A crafted click cannot claim it showed everything: ``shown`` comes from the app's own
    rendering, whatever the payload carries."""
    cut = Disclosure(whole=False, review="Use Review… to see all of it.")
    forged = {"e": KEY, "o": "allow_once", "r": 3, "shown": {"whole": True}, "w": "x"}
    body = click_body(button(f"{OPTION_ACTION}.0", forged), shown={"whole": True})
    click = read_click(body, first_action(body))

    assert click is not None
    made = choice(click, KEY, sp_options(), shown=cut)
    assert made is not None
    assert made.shown == cut


def test_an_index_value_names_the_option_at_that_place_and_out_of_range_names_none() -> None:
    e = sp_options()
    for index, expected in ((1, e.options[1].id), (9, "#9")):
        body = click_body({"action_id": SELECT_ACTION, "value": json.dumps({"i": index})})
        click = read_click(body, first_action(body))
        assert click is not None
        made = choice(click, KEY, e, shown=WHOLE)
        assert made is not None
        assert made.option_ids == (expected,)


def test_a_select_reads_its_selected_option() -> None:
    action = {"action_id": SELECT_ACTION, "selected_option": {"value": json.dumps({"o": "deny"})}}
    body = click_body(action)
    click = read_click(body, first_action(body))

    assert click is not None
    made = choice(click, KEY, sp_options(), shown=WHOLE)
    assert made is not None
    assert made.option_ids == ("deny",)


def test_submit_takes_the_multi_selects_options_and_acknowledge_none() -> None:
    state = {
        "values": {
            "elicitbot.multi:x": {
                MULTI_ACTION: {
                    "selected_options": [
                        {"value": json.dumps({"o": "allow_once"})},
                        {"value": json.dumps({"o": "deny"})},
                    ]
                }
            }
        }
    }
    e = sp_options()
    body = click_body(button(SUBMIT_ACTION, {"e": KEY}), state=state)
    click = read_click(body, first_action(body))
    assert click is not None
    made = choice(click, KEY, e, shown=WHOLE)
    assert made is not None
    assert made.option_ids == ("allow_once", "deny")

    body = click_body(button(ACK_ACTION, {"e": KEY}))
    click = read_click(body, first_action(body))
    assert click is not None
    made = choice(click, KEY, e, shown=WHOLE)
    assert made is not None
    assert made.option_ids == ()


@pytest.mark.parametrize("action_id", [REPLY_ACTION, CLAIM_ACTION, "elicitbot.other"])
def test_clicks_that_answer_nothing_make_no_choice(action_id: str) -> None:
    body = click_body(button(action_id, {"e": KEY}))
    click = read_click(body, first_action(body))

    assert click is not None
    assert choice(click, KEY, sp_options(), shown=WHOLE) is None


def test_a_click_in_a_thread_is_told_in_that_thread() -> None:
    body = click_body(
        button(f"{OPTION_ACTION}.0", {"o": "deny"}),
        message={"ts": "1700000000.000200", "thread_ts": "1700000000.000100"},
        container={"type": "message", "message_ts": "1700000000.000200", "channel_id": C1},
    )
    click = read_click(body, first_action(body))

    assert click is not None
    assert click.where == Where(C1, "1700000000.000100", "1700000000.000100")


def test_a_click_without_a_user_or_channel_is_nothing() -> None:
    body = click_body(button(ACK_ACTION, {"e": KEY}), user={}, channel={}, container={})

    assert read_click(body, first_action(body)) is None


def test_the_payload_names_its_elicitation_by_value_block_id_or_metadata() -> None:
    meta = {"metadata": {"event_payload": {"elicitation": "from-meta"}}}

    assert payload_key({"e": KEY}, "elicitbot.select:other", meta) == KEY
    assert payload_key({}, "elicitbot.select:from-block", meta) == "from-block"
    assert payload_key({}, "elicitbot.options.0", meta) == "from-meta"
    assert payload_key({}, None, {}) is None


# --------------------------------------------------------------------------- the modal


def modal_view(meta: dict[str, Any], text: str | None, option: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {TEXT_BLOCK: {INPUT_ACTION: {"value": text}}}
    if option is not None:
        chosen = {"value": json.dumps({"o": option})}
        values[CHOICE_BLOCK] = {INPUT_ACTION: {"selected_option": chosen}}
    return {"private_metadata": json.dumps(meta), "state": {"values": values}}


def test_a_submission_is_a_submit_with_text_options_and_revision() -> None:
    meta = {"e": KEY, "c": C1, "m": "1.000100", "r": 2, "l": 100}
    parsed = parse_submission(modal_view(meta, "ship it", "deny"))
    body = {"user": {"id": "U0ALICE", "team_id": "T0ACME", "name": "alice"}}
    s = read_submission(body, *parsed)

    assert s is not None
    assert (s.key, s.where) == (KEY, Where(C1, "1.000100", None))
    assert submit(s, KEY, sp_options(), shown=WHOLE) == Submit(
        KEY, ALICE, f"slack:{C1}", option_ids=("deny",), text="ship it", revision=2, shown=WHOLE
    )


def test_a_modal_opened_for_one_option_answers_that_option() -> None:
    meta = {"e": KEY, "c": C1, "m": "1.000100", "t": "1.000050", "o": "allow_once", "s": True}
    parsed = parse_submission(modal_view(meta, "why", "deny"))
    s = read_submission({"user": {"id": "U0ALICE"}}, *parsed)

    assert s is not None
    assert s.where == Where(C1, "1.000050", "1.000050")
    made = submit(s, KEY, sp_options(), shown=WHOLE)
    assert (made.option_ids, made.secret) == (("allow_once",), True)


def test_over_the_limit_is_refused_before_the_ack_and_within_it_is_not() -> None:
    assert submission_errors({"l": 3}, "four") == {
        TEXT_BLOCK: "Your answer is 4 characters; the limit is 3."
    }
    assert submission_errors({"l": 4}, "four") == {}


# --------------------------------------------------------------------------- thread replies


def event(**changes: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "type": "message",
        "channel": C1,
        "user": "U0ALICE",
        "team": "T0ACME",
        "text": "<@U0ELICITBOT>  2 ",
        "ts": "1.000200",
        "thread_ts": "1.000100",
    }
    e.update(changes)
    return e


def reply_of(body: dict[str, Any], ev: dict[str, Any]) -> Any:
    return read_reply(
        body,
        ev,
        bot_id="B0ELICITBOT",
        bot_user_id="U0ELICITBOT",
        agents=frozenset({"slack:B0AGENTBOT"}),
    )


def test_a_thread_reply_is_a_reply_of_what_was_typed() -> None:
    reply = reply_of({"event_id": "Ev1"}, event())

    assert reply is not None
    assert (reply.event_id, reply.where) == ("Ev1", Where(C1, "1.000100", "1.000100"))
    assert reply.reply(KEY) == Reply(
        KEY, Identity(platform="slack", user="U0ALICE", team="T0ACME"), f"slack:{C1}", "2"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"thread_ts": None},
        {"thread_ts": "1.000200"},
        {"subtype": "message_changed"},
        {"user": "U0ELICITBOT"},
        {"bot_id": "B0ELICITBOT", "user": None},
        {"user": None},
    ],
)
def test_not_a_reply_to_judge(changes: dict[str, Any]) -> None:
    assert reply_of({}, event(**changes)) is None


def test_a_bots_reply_is_the_bots_identity() -> None:
    agent = reply_of({}, event(bot_id="B0AGENTBOT", user="U0AGENTUSER", subtype="bot_message"))
    other = reply_of({}, event(bot_id="B0OTHER", user="U0OTHERBOTUSER"))

    assert agent is not None
    assert (agent.who.user, agent.who.is_bot) == ("B0AGENTBOT", True)
    assert other is not None
    assert (other.who.user, other.who.is_bot) == ("U0OTHERBOTUSER", True)


# --------------------------------------------------------------------------- /elicitbot


def test_a_command_is_the_words_after_it_in_its_channel() -> None:
    body = {"user_id": "U0ADMIN", "channel_id": "C0ONCALL", "team_id": "T0ACME", "text": "routes"}

    assert read_command(body) == (
        Command(
            Identity(platform="slack", user="U0ADMIN", team="T0ACME"), "slack:C0ONCALL", "routes"
        ),
        "C0ONCALL",
    )
    assert read_command({"user_id": "U0ADMIN"}) is None


def test_command_results_in_slacks_words() -> None:
    said = {
        "refused": command_text(CommandResult("subscribe", refused=True), "C2"),
        "help": command_text(CommandResult("help"), "C2"),
        "problem": command_text(CommandResult("subscribe", problem="Usage: …"), "C2"),
        "sub": command_text(CommandResult("subscribe", "acme", "brd_1", changed=1), "C2"),
        "again": command_text(CommandResult("subscribe", "acme"), "C2"),
        "unsub": command_text(CommandResult("unsubscribe", "acme", "brd_1", changed=1), "C2"),
        "none": command_text(CommandResult("unsubscribe", "acme"), "C2"),
        "routes": command_text(CommandResult("routes", routes=("a -> b", "c -> d")), "C2"),
        "empty": command_text(CommandResult("routes"), "C2"),
    }

    assert said == {
        "refused": REFUSED_COMMAND,
        "help": USAGE,
        "problem": f"Usage: /elicitbot …\n{USAGE}",
        "sub": "Subscribed: requests of workspace `acme`, board `brd_1` now come to <#C2>.",
        "again": "Already subscribed: workspace `acme` comes to <#C2>.",
        "unsub": "Unsubscribed: workspace `acme`, board `brd_1` no longer comes to <#C2>.",
        "none": "Nothing to remove: workspace `acme` was not subscribed here from chat.",
        "routes": "Routes, first match wins:\n```a -> b\nc -> d```",
        "empty": "Routes, first match wins:\n```(no routes)```",
    }


def test_a_claim_says_until_when_or_why_not() -> None:
    claim = Claim("slack:U0ALICE", NOW + timedelta(minutes=30), "alice")
    refusal = Refusal(code=RefusalCode.CLOSED, message="Already answered.")

    assert claim_text(Outcome(OutcomeKind.CLAIMED, KEY, claim=claim)) == (
        "You're on it until 2026-11-10 10:01 UTC: escalation and follow-ups wait for you."
    )
    assert claim_text(Outcome(OutcomeKind.REFUSED, KEY, refusal=refusal)) == "Already answered."
    assert claim_text(Outcome(OutcomeKind.REFUSED, KEY)) == "Nothing to claim."


def test_a_button_carries_the_subject_digest_its_message_showed_into_the_choice() -> None:
    """Rule 2 by digest: the value's ``"d"`` is the digest the message was rendered with; a
    value without one (an older message) says nothing of it (None: not checked)."""
    value = {"e": KEY, "o": "allow_once", "r": 3, "d": "sha256:aa"}
    body = click_body(button(f"{OPTION_ACTION}.0", value))
    click = read_click(body, first_action(body))
    assert click is not None
    made = choice(click, KEY, sp_options(), shown=WHOLE)
    assert made is not None
    assert (made.revision, made.digest) == (3, "sha256:aa")
    body = click_body(button(f"{OPTION_ACTION}.0", {"e": KEY, "o": "allow_once", "r": 3}))
    old = read_click(body, first_action(body))
    assert old is not None
    made = choice(old, KEY, sp_options(), shown=WHOLE)
    assert made is not None
    assert made.digest is None


def test_the_reply_modal_carries_the_digest_its_message_showed_into_the_submit() -> None:
    """Reply… (or an option that needs a comment) opens the modal with the digest the clicked
    message's value carries; its submission's Submit carries it on (rule 2)."""
    from adapters.slack.modals.reply import reply_modal
    from bot.domain.ports import PromptView
    from tests.unit.domain.builders import sp_approval

    e = sp_approval()
    view = PromptView(e, Status.PENDING, None, 1, "/#k", NOW)
    modal = reply_modal(view, channel=C1, message_ts="1.000100", shown=WHOLE, digest="sha256:seen")
    meta = json.loads(modal["private_metadata"])
    assert meta["d"] == "sha256:seen"
    body = {"user": {"id": "U0ALICE", "team_id": "T0ACME", "name": "alice"}}
    s = read_submission(body, meta, "because", [{"o": "deny"}])
    assert s is not None
    made = submit(s, KEY, e, shown=WHOLE)
    assert (made.revision, made.digest) == (1, "sha256:seen")
    unknown = reply_modal(view, channel=C1, message_ts="1.000100", shown=WHOLE)
    assert "d" not in json.loads(unknown["private_metadata"])  # an older message: not known

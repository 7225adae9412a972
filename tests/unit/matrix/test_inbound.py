"""adapters/matrix/inbound.py (and the pure half of commands.py): Matrix events as attempts.

Events are raw JSON shaped as Synapse 1.163 delivers them through ``/sync`` (recorded in the
integration runs): reactions, Element-style thread replies with ``is_falling_back``, old-style rich
replies with a ``> quoted`` fallback, edits, redacted events, encryption.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.matrix.commands import Command, parse_command
from adapters.matrix.inbound import (
    CommandMessage,
    Edit,
    Encrypted,
    Reaction,
    Reply,
    classify,
    identity,
    reaction_choice,
    reply_attempt,
    reply_root,
)
from adapters.matrix.render import ACK_KEY, KEYCAPS
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import AnswerMode, Attempt, Elicitation, People, Refusal, RefusalCode
from bot.domain.replies import HelpReply
from bot.domain.rules import judge
from tests.unit.domain.builders import NOW, elicitation, sp_bare
from tests.unit.sources.superpipeline_fixtures import VALID

BOT = "@elicitbot:localhost"
ALICE = "@alice:localhost"
Q = "$question"
VIA = "matrix:!room:localhost"


def fixture(case: str) -> Elicitation:
    return parse_body(copy.deepcopy(VALID[case]), workspace="acme")


def event(
    kind: str, content: dict[str, Any], *, sender: str = ALICE, **extra: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "sender": sender,
        "event_id": "$e1",
        "room_id": "!room:localhost",
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
        "unsigned": {"age": 12},
        **extra,
    }


def reaction(key: str, target: str = Q, **extra: Any) -> dict[str, Any]:
    return event(
        "m.reaction",
        {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}},
        **extra,
    )


def thread_reply(body: str, root: str = Q, **extra: Any) -> dict[str, Any]:
    return event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": body,
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": root},
            },
        },
        **extra,
    )


# --------------------------------------------------------------------------- classify


def test_a_keycap_reaction_on_a_message() -> None:
    assert classify(reaction("2️⃣"), own_user_id=BOT) == Reaction("$e1", ALICE, Q, "2️⃣")


def test_a_thread_reply_keeps_its_root_and_body() -> None:
    assert classify(thread_reply("deny"), own_user_id=BOT) == Reply(
        "$e1", ALICE, Q, "deny", threaded=True
    )


def test_a_rich_reply_without_a_thread_answers_the_message_it_replies_to() -> None:
    body = "> <@elicitbot:localhost> May I run the migration?\n\n2"
    e = event(
        "m.room.message",
        {"msgtype": "m.text", "body": body, "m.relates_to": {"m.in_reply_to": {"event_id": Q}}},
    )
    assert classify(e, own_user_id=BOT) == Reply("$e1", ALICE, Q, body, threaded=False)
    assert reply_root(e) == Q


def test_an_edit_carries_the_new_body() -> None:
    e = event(
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "* deny",
            "m.new_content": {"msgtype": "m.text", "body": "deny"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$reply"},
        },
    )
    assert classify(e, own_user_id=BOT) == Edit("$e1", ALICE, "$reply", "deny")
    del e["content"]["m.new_content"]
    assert classify(e, own_user_id=BOT) is None, "an edit without new content is invalid"


def test_a_top_level_command() -> None:
    e = event("m.room.message", {"msgtype": "m.text", "body": "  !elicitbot routes  "})
    assert classify(e, own_user_id=BOT) == CommandMessage("$e1", ALICE, "!elicitbot routes")


@pytest.mark.parametrize(
    "raw",
    [
        event("m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "x"}),
        event("m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}, state_key=""),
    ],
    ids=["encrypted-event", "encryption-state"],
)
def test_encryption_is_recognised(raw: dict[str, Any]) -> None:
    assert classify(raw, own_user_id=BOT) == Encrypted("$e1", ALICE)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (reaction("1️⃣", sender=BOT), "our own seeded reaction"),
        (thread_reply("1", sender=BOT), "our own notice"),
        (thread_reply("1", unsigned={"redacted_because": {}}), "redacted"),
        (event("m.room.message", {"msgtype": "m.notice", "body": "!elicitbot routes"}), "notice"),
        (event("m.room.message", {"msgtype": "m.text", "body": "hello"}), "plain chat"),
        (event("m.room.message", {"msgtype": "m.text", "body": 7}), "malformed body"),
        (event("m.reaction", {"m.relates_to": {"rel_type": "m.reference", "event_id": Q}}), "ref"),
        (event("m.reaction", {"m.relates_to": {"rel_type": "m.annotation", "event_id": Q}}), "key"),
        ({"type": "m.reaction", "content": {}}, "no sender or id"),
        (event("m.room.member", {"membership": "join"}, state_key=ALICE), "membership"),
        (event("m.room.message", {"msgtype": "m.text", "body": "x", "m.relates_to": "bad"}), "rel"),
    ],
)
def test_nothing_to_act_on(raw: dict[str, Any], why: str) -> None:
    assert classify(raw, own_user_id=BOT) is None, why


# --------------------------------------------------------------------------- reactions


def test_keycap_n_chooses_option_n() -> None:
    e = fixture("options")
    assert [reaction_choice(e, k) for k in KEYCAPS[:4]] == [
        ("allow_once",),
        ("allow_always",),
        ("deny",),
        None,
    ]
    assert reaction_choice(e, "👍") is None
    assert reaction_choice(e, ACK_KEY) is None


def test_reactions_do_not_answer_free_text_and_ack_only_without_options() -> None:
    assert reaction_choice(fixture("free-text"), KEYCAPS[0]) is None
    assert reaction_choice(fixture("free-text"), ACK_KEY) is None
    assert reaction_choice(sp_bare(), ACK_KEY) == ()


# --------------------------------------------------------------------------- replies


def test_a_reply_naming_an_option_chooses_it_after_the_fallback_is_stripped() -> None:
    who = identity(ALICE)
    body = "> <@elicitbot:localhost> 1️⃣ Allow once\n> 3️⃣ Deny\n\nalways allow"
    assert reply_attempt(fixture("options"), body, who, VIA) == Attempt(
        respondent=who, option_ids=("allow_always",), via=VIA
    )
    assert reply_attempt(fixture("options"), "#3", who, VIA) == Attempt(
        respondent=who, option_ids=("deny",), via=VIA
    )


def test_a_free_text_reply_is_the_answer_without_the_quote() -> None:
    who = identity(ALICE)
    body = "> <@elicitbot:localhost> Which branch should I base this on?\n\nmain, please"
    attempt = reply_attempt(fixture("free-text"), body, who, VIA)
    assert attempt == Attempt(respondent=who, text="main, please", via=VIA)


def test_a_reply_naming_nothing_gets_help() -> None:
    help_ = reply_attempt(fixture("options"), "what does this do?", identity(ALICE), VIA)
    assert isinstance(help_, HelpReply)
    assert "1. Allow once (allow_once)" in help_.message
    assert "(workspace admins only)" in help_.message


def test_multi_choice_reply_chooses_several() -> None:
    e = elicitation(answer_mode=AnswerMode.MULTI_CHOICE)
    attempt = reply_attempt(e, "1, 3", identity(ALICE), VIA)
    assert isinstance(attempt, Attempt)
    assert attempt.option_ids == ("allow_once", "deny")


def test_identity_is_the_mxid_and_configured_bots_are_bots() -> None:
    who = identity("@other-bot:localhost", bots=frozenset({"matrix:@other-bot:localhost"}))
    assert (who.key, who.is_bot, who.display_name) == (
        "matrix:@other-bot:localhost",
        True,
        "@other-bot:localhost",
    )
    assert not identity(ALICE).is_bot


def test_the_agents_mapped_mxid_is_refused_by_the_rules() -> None:
    """The translation attaches the MXID; the answer rules refuse the asker's principal."""
    e = fixture("options")
    people = People(principals={"matrix:@agent:localhost": e.asker})
    attempt = Attempt(respondent=identity("@agent:localhost"), option_ids=("deny",), via=VIA)
    refusal = judge(e, attempt, people, NOW)
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.ASKER


# --------------------------------------------------------------------------- commands


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("!elicitbot subscribe acme", Command("subscribe", "acme")),
        ("!elicitbot SUBSCRIBE acme board brd_1", Command("subscribe", "acme", "brd_1")),
        ("!elicitbot unsubscribe acme board brd_1", Command("unsubscribe", "acme", "brd_1")),
        ("!elicitbot routes", Command("routes")),
        ("!elicitbot", Command("help")),
        ("!elicitbot help", Command("help")),
        ("!elicitbot frobnicate", Command("help", problem="Unknown command 'frobnicate'.")),
        (
            "!elicitbot subscribe",
            Command("subscribe", problem="Usage: !elicitbot subscribe <workspace> [board <id>]"),
        ),
        (
            "!elicitbot subscribe acme brd_1",
            Command("subscribe", problem="Usage: !elicitbot subscribe <workspace> [board <id>]"),
        ),
        (
            "!elicitbot subscribe <b>x</b>",
            Command("subscribe", problem="'<b>x</b>' is not a workspace or board id."),
        ),
        ("!elicitbot routes now", Command("routes", problem="`routes` takes no arguments.")),
        ("!elicitbotx routes", None),
        ("hello", None),
    ],
)
def test_commands_are_parsed(body: str, command: Command | None) -> None:
    assert parse_command(body) == command

"""adapters/matrix/translate.py (and commands.py's wording): Matrix events as the core's actions.

Events are raw JSON shaped as Synapse 1.163 delivers them through ``/sync`` (recorded in the
integration runs): reactions, Element-style thread replies with ``is_falling_back``, old-style rich
replies with a ``> quoted`` fallback, edits, redacted events, encryption.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from adapters.matrix import translate as inbound
from adapters.matrix.intake.commands import NOT_ALLOWED, USAGE, problem_text, reply_text
from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS
from adapters.matrix.translate import (
    CommandMessage,
    Edit,
    Encrypted,
    Reaction,
    Reply,
    claim_id,
    classify,
    command_words,
    identity,
    on_command,
    on_reaction,
    on_reply,
    reaction_choice,
    reply_root,
)
from adapters.sources.superpipeline.parse import parse_body
from bot.domain import actions
from bot.domain.actions import Choose, ClaimIt, Command, CommandResult, parse_command
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    AnswerMode,
    Attempt,
    Disclosure,
    Elicitation,
    ElicitationKey,
    People,
    Refusal,
    RefusalCode,
)
from bot.domain.policy import RoutePolicy
from bot.domain.replies import HelpReply, reply_attempt
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


def test_identity_is_the_mxid_named_by_display_name_and_configured_bots_are_bots() -> None:
    who = identity("@other-bot:localhost", bots=frozenset({"matrix:@other-bot:localhost"}))
    assert (who.key, who.is_bot, who.display_name) == (
        "matrix:@other-bot:localhost",
        True,
        "@other-bot:localhost",
    ), "the ID where no name is known"
    assert not identity(ALICE).is_bot
    named = identity(ALICE, name="  Alice\n Liddell ")
    assert (named.key, named.display_name) == (f"matrix:{ALICE}", "Alice Liddell")
    assert identity(ALICE, name=" ").display_name == ALICE


def test_the_agents_mapped_mxid_is_refused_by_the_rules() -> None:
    """The translation attaches the MXID; the answer rules refuse the asker's principal."""
    e = fixture("options")
    people = People(principals={"matrix:@agent:localhost": e.asker})
    attempt = Attempt(
        shown=SHOWN_WHOLE, respondent=identity("@agent:localhost"), option_ids=("deny",), via=VIA
    )
    refusal = judge(e, attempt, people, NOW)
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.ASKER


# --------------------------------------------------------------------------- commands


SUBSCRIBE_USAGE = (
    "Usage: !elicitbot subscribe <workspace> [board <id>] [approvers <a,b>] [quorum <n>] "
    "[approve_on <surfaces>] [anyone_may_reject]"
)


def read_command(body: str) -> CommandResult | None:
    words = command_words(body)
    if words is None:
        return None
    result = parse_command(words)
    return replace(result, problem=problem_text(result))


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("!elicitbot subscribe acme", CommandResult("subscribe", "acme")),
        ("!elicitbot SUBSCRIBE acme board brd_1", CommandResult("subscribe", "acme", "brd_1")),
        ("!elicitbot unsubscribe acme board brd_1", CommandResult("unsubscribe", "acme", "brd_1")),
        ("!elicitbot routes", CommandResult("routes")),
        ("!elicitbot", CommandResult("help")),
        ("!elicitbot help", CommandResult("help")),
        ("!elicitbot frobnicate", CommandResult("help", problem="Unknown command 'frobnicate'.")),
        (
            "!elicitbot subscribe",
            CommandResult("subscribe", problem=SUBSCRIBE_USAGE),
        ),
        (
            "!elicitbot subscribe acme brd_1",
            CommandResult(
                "subscribe",
                problem="'brd_1' is not understood here: after the workspace come board <id>, "
                "approvers <a,b>, quorum <n>, approve_on <surfaces> or anyone_may_reject.",
            ),
        ),
        (
            "!elicitbot subscribe acme quorum 2",
            CommandResult("subscribe", "acme", policy=RoutePolicy(quorum=2)),
        ),
        ("!elicitbot policy", CommandResult("policy")),
        (
            "!elicitbot subscribe <b>x</b>",
            CommandResult("subscribe", problem="'<b>x</b>' is not a workspace or board id."),
        ),
        ("!elicitbot routes now", CommandResult("routes", problem="`routes` takes no arguments.")),
        ("!elicitbotx routes", None),
        ("hello", None),
    ],
)
def test_commands_are_parsed(body: str, command: CommandResult | None) -> None:
    """The core's grammar, its usage in the room's words (with the ``!elicitbot`` prefix)."""
    assert read_command(body) == command


# --------------------------------------------------------------------------- actions


def test_a_keycap_chooses_and_a_raised_hand_claims() -> None:
    e = fixture("options")
    who = identity(ALICE)
    r = Reaction("$r", ALICE, Q, KEYCAPS[2])
    cut = Disclosure(whole=False, review="See the thread.")
    assert on_reaction(ElicitationKey("k"), e, r, "!room:localhost", shown=cut) == Choose(
        ElicitationKey("k"), who, VIA, ("deny",), shown=cut
    )
    for hand in ("🙋", "🙋🏽‍♀️"):
        claim = on_reaction(
            ElicitationKey("k"), e, Reaction("$r", ALICE, Q, hand), "!room:localhost", shown=cut
        )
        assert claim == ClaimIt(ElicitationKey("k"), who, VIA)
    thumbs = Reaction("$r", ALICE, Q, "👍")
    assert on_reaction(ElicitationKey("k"), e, thumbs, "!room:localhost", shown=SHOWN_WHOLE) is None


def test_a_reply_is_the_cores_to_read_unless_it_claims() -> None:
    who = identity(ALICE)
    body = "> <@elicitbot:localhost> May I?\n\n3"
    assert on_reply(
        ElicitationKey("k"), ALICE, body, "!room:localhost", shown=SHOWN_WHOLE
    ) == actions.Reply(ElicitationKey("k"), who, VIA, body, shown=SHOWN_WHOLE)
    for claim in ("!elicitbot claim", "  I'm   ON it ", "!elicitbot i'm on it"):
        claimed = on_reply(ElicitationKey("k"), ALICE, claim, "!room:localhost", shown=SHOWN_WHOLE)
        assert claimed == ClaimIt(ElicitationKey("k"), who, VIA)


def test_a_command_carries_its_words_and_whether_the_room_elevates_the_sender() -> None:
    message = CommandMessage("$c", ALICE, "!elicitbot  subscribe acme")
    assert on_command(message, "!room:localhost", elevated=True) == Command(
        identity(ALICE), VIA, "subscribe acme", elevated=True
    )
    assert on_command(CommandMessage("$c", ALICE, "!elicitbotx"), "!r", elevated=False) is None
    assert command_words("!elicitbot") == ""


def test_a_reaction_dedupes_per_sender_message_and_key() -> None:
    one = claim_id(Reaction("$r1", ALICE, Q, KEYCAPS[0]))
    assert one == claim_id(Reaction("$r2", ALICE, Q, KEYCAPS[0])), "made again"
    assert one != claim_id(Reaction("$r1", "@bob:localhost", Q, KEYCAPS[0]))
    assert claim_id(CommandMessage("$c", ALICE, "!elicitbot")) == "$c"


# --------------------------------------------------------------------------- command replies


def test_command_replies_in_the_rooms_words() -> None:
    done = CommandResult("subscribe", "acme", "brd_1", changed=1)
    assert reply_text(done) == (
        "Subscribed: questions from workspace acme board brd_1 now come to this room."
    )
    assert reply_text(replace(done, changed=0)) == (
        "Already subscribed: questions from workspace acme board brd_1 come to this room."
    )
    assert reply_text(CommandResult("unsubscribe", "acme", changed=2)) == (
        "Unsubscribed: questions from workspace acme no longer come to this room."
    )
    assert reply_text(CommandResult("unsubscribe", "acme")) == (
        "No route made from chat sends workspace acme to this room "
        "(routes in the config file are changed there)."
    )
    assert reply_text(CommandResult("routes")) == "No routes: questions go to the web inbox only."
    assert reply_text(CommandResult("routes", routes=("a -> b", "c -> d"))) == (
        "Routes (first match wins):\n• a -> b\n• c -> d"
    )
    assert reply_text(CommandResult("subscribe", "acme", refused=True)) == NOT_ALLOWED
    assert NOT_ALLOWED == (
        "Only workspace admins or room moderators (power level 50 or more) can run elicitbot "
        "commands."
    )
    assert reply_text(CommandResult("help")) == USAGE
    assert reply_text(CommandResult("help", refused=True)) == USAGE, "help is for everyone"
    unknown = parse_command("frob")
    assert reply_text(unknown) == f"Unknown command 'frob'.\n{USAGE}"
    usage = parse_command("subscribe")
    assert reply_text(usage) == f"{SUBSCRIBE_USAGE}\n{USAGE}"


INVITED = "@elicitbot:example.org"


def member(state_key: str, sender: str, **content: object) -> dict[str, Any]:
    return {"type": "m.room.member", "state_key": state_key, "sender": sender, "content": content}


def test_an_element_direct_invite_says_who_made_it_encrypted_and_direct() -> None:
    state = [
        {"type": "m.room.encryption", "content": {"algorithm": "m.megolm.v1.aes-sha2"}},
        member("@alice:example.org", "@alice:example.org", membership="join"),
        member(INVITED, "@alice:example.org", membership="invite", is_direct=True),
    ]
    assert inbound.read_invite(state, own_user_id=INVITED) == inbound.Invite(
        "@alice:example.org", encrypted=True, direct=True
    )


def test_a_room_invite_is_neither_direct_nor_encrypted_unless_its_state_says_so() -> None:
    state = [
        {"type": "m.room.encryption", "content": {}},  # no algorithm: not an encryption event
        member(INVITED, "@bob:example.org", membership="invite", is_direct="yes"),
    ]
    assert inbound.read_invite(state, own_user_id=INVITED) == inbound.Invite(
        "@bob:example.org", encrypted=False, direct=False
    )


def test_an_invite_without_the_bot_s_member_event_names_nobody() -> None:
    state = [member("@carol:example.org", "@bob:example.org", membership="invite")]
    assert inbound.read_invite(state, own_user_id=INVITED) is None

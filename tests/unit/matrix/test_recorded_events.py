"""Events recorded from the real Synapse (tests/responses/matrix/) through matrix/translate.py.

Each fixture is one event as the homeserver gave it back (``/messages``), unchanged; the question
they relate to is the bot's, asked of alice with keycaps 1️⃣ Allow once, 2️⃣ Always allow, 3️⃣ Deny
(``sp_options``).
"""

from __future__ import annotations

from adapters.matrix.translate import (
    CommandMessage,
    Encrypted,
    Reaction,
    Reply,
    classify,
    identity,
    on_command,
    on_reaction,
    on_reply,
)
from bot.domain.actions import Choose, Command
from bot.domain.actions import Reply as ReplyAction
from bot.domain.disclosure import SHOWN_WHOLE as WHOLE
from bot.domain.model import ElicitationKey
from tests.responses import load
from tests.unit.domain.builders import sp_options

KEY = ElicitationKey("superpipeline:eli_1a2b3c4d5e6f7081")
BOT = "@elicitbot-c3e1a916:localhost"
ALICE = "@alice-dc48c99f:localhost"
ROOM = "!Kp-J0a4iCjdl-QSKRfU59N0Vj7kZ7f1KdwkBNZUO_BI"
QUESTION = "$OJ5iJJ6Rq9_FIXo8nl7UQJwR836nzYarxTDpIMgi5nw"


def test_a_recorded_keycap_reaction_chooses_the_first_option() -> None:
    event = load("matrix", "reaction.json")
    reaction = classify(event, own_user_id=BOT)

    assert reaction == Reaction(
        "$zk7cchH7nAVCAvZGS4w3SMVgENWEn3G1pLYkMQneQo8", ALICE, QUESTION, "1\ufe0f\u20e3"
    )
    assert isinstance(reaction, Reaction)
    assert on_reaction(KEY, sp_options(), reaction, ROOM, shown=WHOLE) == Choose(
        KEY, identity(ALICE), f"matrix:{ROOM}", ("allow_once",), shown=WHOLE
    )


def test_a_recorded_reaction_by_elicitbot_itself_is_nothing() -> None:
    assert classify(load("matrix", "reaction.json"), own_user_id=ALICE) is None


def test_a_recorded_thread_reply_is_a_reply_under_its_root() -> None:
    event = load("matrix", "thread_reply.json")
    reply = classify(event, own_user_id=BOT)

    assert reply == Reply(
        "$HmdB84huDqydjr193MZEduapm9HAs5mHglpuVNpzqjs",
        ALICE,
        QUESTION,
        "Deny: the canary is red",
        threaded=True,
    )
    assert isinstance(reply, Reply)
    assert on_reply(KEY, reply.sender, reply.body, ROOM, shown=WHOLE) == ReplyAction(
        KEY, identity(ALICE), f"matrix:{ROOM}", "Deny: the canary is red", shown=WHOLE
    )


def test_a_recorded_encrypted_event_is_known_as_encrypted_whoever_sent_it() -> None:
    """What matrix-nio (vodozemac) really sends in an encrypted room: Megolm ciphertext."""
    event = load("matrix", "encrypted.json")

    assert event["content"]["algorithm"] == "m.megolm.v1.aes-sha2"
    assert classify(event, own_user_id=BOT) == Encrypted(
        "$uPwS8LPzo-h-ENHZIdH_nqh-04esk2SmKd309A5LI1o", ALICE
    )


def test_a_recorded_room_message_is_a_command_for_elicitbot() -> None:
    event = load("matrix", "message.json")
    message = classify(event, own_user_id=BOT)

    assert message == CommandMessage(
        "$IqFVfWbMiA_QA-nPacBYv1CYVfMSLkioM0sVSkqO_4E", ALICE, "!elicitbot help"
    )
    assert isinstance(message, CommandMessage)
    assert on_command(message, ROOM, elevated=False) == Command(
        identity(ALICE), f"matrix:{ROOM}", "help", elevated=False
    )

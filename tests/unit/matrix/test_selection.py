"""adapters/matrix/intake/selection.py and its part of handlers.py: on a multiple choice keycaps
toggle (the person sees their selection in a notice edited as they go), ✅ submits the keycaps the
homeserver holds for them at that moment; a form's thread reply reaches the core whole.

The homeserver's ``/relations`` answer is a list the test edits (a removal is a reaction gone
from it, as Synapse drops a redacted annotation); the core is the scripted stand-in of
test_handlers.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adapters.matrix import translate as inbound
from adapters.matrix.intake.handling import RoomEvents
from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS
from adapters.matrix.intake.selection import NOTHING_CHOSEN, edit_txn, first_txn, selection
from adapters.matrix.translate import reopenings
from bot.domain import forms
from bot.domain.actions import Choose, Outcome, OutcomeKind, Reply
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Answer, AnswerMode, ElicitationKey, FormQuestion, Option, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from tests.unit.domain.builders import NOW, elicitation
from tests.unit.matrix.test_handlers import (
    ALICE,
    AT_ZERO,
    PROMPT,
    ROOM,
    VIA,
    WHO,
    Chat,
    Core,
    rig,
    settled,
)

BOB = "@bob:localhost"
ONE, TWO, THREE = KEYCAPS[:3]
TARGETS = (
    Option(id="linux", label="linux"),
    Option(id="macos", label="macos"),
    Option(id="windows", label="windows"),
)
MULTI = elicitation(answer_mode=AnswerMode.MULTI_CHOICE, options=TARGETS)
ANSWER = Answer(option_ids=("linux", "macos"), respondent=f"matrix:{ALICE}", via=VIA, at=NOW)


def annotation(event_id: str, sender: str, key: str, target: str = PROMPT) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "m.reaction",
        "sender": sender,
        "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}},
    }


@dataclass
class Room(Chat):
    """The chat, with the prompt's annotations as the homeserver holds them now."""

    reactions: list[dict[str, Any]] = field(default_factory=list)
    asked: int = 0

    async def annotations(self, room_id: str, event_id: str) -> list[dict[str, Any]]:
        assert (room_id, event_id) == (ROOM, PROMPT)
        self.asked += 1
        return list(self.reactions)


async def tap(events: RoomEvents, room: Room, event_id: str, sender: str, key: str) -> None:
    room.reactions.append(annotation(event_id, sender, key))
    await events.handle(ROOM, inbound.Reaction(event_id, sender, PROMPT, key))
    await settled(events)


async def take_back(events: RoomEvents, room: Room, event_id: str, sender: str) -> None:
    room.reactions = [r for r in room.reactions if r["event_id"] != event_id]
    await events.handle(ROOM, inbound.Redaction(f"$undo{event_id}", sender, event_id))
    await settled(events)


def shown_texts(room: Room) -> list[str]:
    """What the selection notice said, in order (its first send, then each edit)."""
    return [
        (content.get("m.new_content") or content)["body"]
        for _, content, txn in room.sent
        if txn.startswith("elicitbot-choice-")
    ]


async def test_keycaps_toggle_and_the_check_mark_submits_what_the_room_holds() -> None:
    core = Core(MULTI, Outcome(OutcomeKind.ANSWERED, ElicitationKey("k"), answer=ANSWER))
    room = Room()
    events, _ = rig(core, room)

    await tap(events, room, "$1", ALICE, ONE)
    await tap(events, room, "$3", ALICE, THREE)
    await tap(events, room, "$bob", BOB, TWO)  # someone else's choice is theirs
    await take_back(events, room, "$3", ALICE)
    await tap(events, room, "$2", ALICE, TWO)
    assert core.acted == [], "nothing is recorded before ✅"

    await tap(events, room, "$ok", ALICE, ACK_KEY)

    assert core.acted == [
        Choose(
            ElicitationKey("k"), WHO, VIA, ("linux", "macos"), shown=SHOWN_WHOLE, standing=AT_ZERO
        )
    ]
    alice = [t for t in shown_texts(room) if t.startswith((f"* {ALICE}", ALICE))]
    so_far = (
        "Your choice so far: {} — react ✅ to submit (take a number's reaction back to remove it)."
    )
    assert [t.removeprefix("* ").removeprefix(f"{ALICE}: ") for t in alice] == [
        so_far.format("1. linux"),  # the first send ...
        so_far.format("1. linux"),  # ... and its edit (after a restart it may be an old notice)
        so_far.format("1. linux, 3. windows"),
        so_far.format("1. linux"),
        so_far.format("1. linux, 2. macos"),
        "Submitted: 1. linux, 2. macos.",
    ]
    first = [txn for _, _, txn in room.sent if txn == first_txn(PROMPT, ALICE)]
    assert len(first) == 1, "one notice per person, edited as they toggle"
    edits = [c for _, c, _ in room.sent if c.get("m.relates_to", {}).get("rel_type") == "m.replace"]
    assert {e["m.relates_to"]["event_id"] for e in edits} == {"$sent"}
    assert all(e["m.new_content"]["m.mentions"] == {} for e in edits), "toggling pings nobody"
    assert edit_txn("$undo$3") in [txn for _, _, txn in room.sent], "a removal edits too"
    [(_, confirmation, _)] = room.notices
    assert confirmation.text == "✅ Recorded: linux, macos. Thank you."


async def test_a_check_mark_with_nothing_chosen_says_how_and_a_later_one_counts() -> None:
    core = Core(MULTI, Outcome(OutcomeKind.ANSWERED, ElicitationKey("k"), answer=ANSWER))
    room = Room()
    events, _ = rig(core, room)

    await tap(events, room, "$ok1", ALICE, ACK_KEY)
    assert core.acted == []
    [(_, told, _)] = room.notices
    assert (told.text, told.mention) == (NOTHING_CHOSEN, True)

    room.reactions = [r for r in room.reactions if r["event_id"] != "$ok1"]
    await tap(events, room, "$3", ALICE, THREE)
    await tap(events, room, "$ok2", ALICE, ACK_KEY)
    await events.handle(ROOM, inbound.Reaction("$ok2", ALICE, PROMPT, ACK_KEY))  # replayed
    await settled(events)

    assert core.acted == [
        Choose(ElicitationKey("k"), WHO, VIA, ("windows",), shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]


async def test_a_removal_made_while_the_bot_was_away_still_counts() -> None:
    """The selection is read when ✅ comes, not kept: a redaction never seen changes it too."""
    core = Core(MULTI, Outcome(OutcomeKind.ANSWERED, ElicitationKey("k"), answer=ANSWER))
    room = Room(reactions=[annotation("$1", ALICE, ONE), annotation("$2", ALICE, TWO)])
    events, _ = rig(core, room)  # a fresh process: it saw none of these
    room.reactions.pop()

    await tap(events, room, "$ok", ALICE, ACK_KEY)
    await events.handle(ROOM, inbound.Redaction("$undo", ALICE, "$unknown"))  # not ours: nothing

    assert core.acted == [
        Choose(ElicitationKey("k"), WHO, VIA, ("linux",), shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]


async def test_once_closed_a_keycap_gets_the_cores_answer_as_before() -> None:
    core = Core(MULTI, Outcome(OutcomeKind.IGNORED, ElicitationKey("k")), status=Status.ANSWERED)
    room = Room()
    events, _ = rig(core, room)

    await tap(events, room, "$1", ALICE, ONE)
    await tap(events, room, "$ok", ALICE, ACK_KEY)

    assert core.acted == [
        Choose(ElicitationKey("k"), WHO, VIA, ("linux",), shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    assert room.asked == 0


async def test_a_single_choice_keycap_still_answers_at_once() -> None:
    core = Core(elicitation(), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    room = Room()
    events, _ = rig(core, room)

    await tap(events, room, "$3", ALICE, THREE)

    assert core.acted == [
        Choose(ElicitationKey("k"), WHO, VIA, ("deny",), shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    assert room.asked == 0


def test_the_selection_is_the_persons_live_keycaps_on_that_prompt_in_option_order() -> None:
    redacted = annotation("$r", ALICE, TWO) | {"unsigned": {"redacted_because": {}}}
    events = [
        annotation("$3", ALICE, THREE),
        annotation("$1", ALICE, "1\u20e3"),  # without its VS16
        annotation("$b", BOB, TWO),
        annotation("$o", ALICE, TWO, target="$other"),
        redacted,
        annotation("$9", ALICE, KEYCAPS[8]),  # past the options
        annotation("$x", ALICE, "👍"),
        annotation("$me", "@elicitbot:localhost", TWO),
    ]
    assert selection(MULTI, events, PROMPT, ALICE) == ("linux", "windows")


async def test_a_form_reply_reaches_the_core_whole_and_its_help_goes_back() -> None:
    form = (
        FormQuestion(
            id="channel", question="Which channel?", options=(Option(id="beta", label="beta"),)
        ),
        FormQuestion(id="notes", question="Release notes?", allow_free_text=True),
    )
    e = elicitation(answer_mode=AnswerMode.FREE_TEXT, options=(), form=form)
    help_text = forms.form_help(form)
    core = Core(e, Outcome(OutcomeKind.HELP, ElicitationKey("k"), message=help_text))
    room = Room()
    events, _ = rig(core, room)
    body = "1: beta\n2: ship it Friday"

    await events.handle(ROOM, inbound.Reply("$reply", ALICE, PROMPT, body, threaded=True))
    await settled(events)

    assert core.acted == [
        Reply(ElicitationKey("k"), WHO, VIA, body, shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    [(_, notice, _)] = room.notices
    assert (notice.text, notice.mention, notice.reply_to) == (help_text, True, "$reply")


@dataclass
class Reopenable(Core):
    """The scripted core, with the write-back the view carries."""

    writeback: Writeback | None = None

    async def view(self, key: str) -> PromptView | None:
        return PromptView(
            self.e, self.status, None, 1, "http://x/#k", NOW, writeback=self.writeback
        )


async def test_after_a_refusal_reopened_the_question_the_same_keycap_answers_again() -> None:
    core = Reopenable(elicitation(), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    events, _ = rig(core, Room())
    first = inbound.Reaction("$r1", ALICE, PROMPT, THREE)
    again = inbound.Reaction("$r2", ALICE, PROMPT, THREE)  # taken back and made again

    await events.handle(ROOM, first)
    events.finished(first.event_id)
    core.writeback = Writeback(WritebackState.SENDING)
    await events.handle(ROOM, again)
    assert len(core.acted) == 1, "the same question: the same reaction counts once"

    core.writeback = Writeback(WritebackState.REFUSED, error="no", reopened=True)
    await events.handle(ROOM, again)
    await events.handle(ROOM, inbound.Reaction("$r3", ALICE, PROMPT, THREE))
    assert len(core.acted) == 2, "open again: once more, and only once"


def test_reopenings_count_the_refusals_that_opened_the_question_again() -> None:
    assert reopenings(None) == 0
    assert reopenings(Writeback(WritebackState.SENDING)) == 0
    assert reopenings(Writeback(WritebackState.ACCEPTED)) == 0
    assert reopenings(Writeback(WritebackState.REFUSED, reopened=False)) == 0
    assert reopenings(Writeback(WritebackState.REFUSED, reopened=True)) == 1
    assert reopenings(Writeback(WritebackState.SENDING, round=2)) == 1
    assert reopenings(Writeback(WritebackState.REFUSED, round=2, reopened=True)) == 2

"""adapters/matrix/intake/handling.py and notices.py: each room event becomes one ``act`` call, and
the outcome is shown in the thread in Matrix's words.

The core is a scripted stand-in (the real rules are tested in tests/unit/domain and end to end
on Synapse in tests/integration/matrix); the chat records what would be sent.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, cast

import pytest

from adapters.matrix import translate as inbound
from adapters.matrix.chat import MatrixChat
from adapters.matrix.intake.handling import RoomEvents
from adapters.matrix.intake.notices import REDACTION_REASON, said
from adapters.matrix.intake.reactions import KEYCAPS
from adapters.matrix.render import MARKER, shown
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.actions import (
    Action,
    Choose,
    ClaimIt,
    Command,
    CommandResult,
    OnView,
    Outcome,
    OutcomeKind,
    Reply,
)
from bot.domain.deadlines import Claim
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Answer,
    AnswerMode,
    Elicitation,
    ElicitationKey,
    IdentityKey,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.policy import Standing
from bot.domain.ports import Elicitations, Notice, PromptView
from bot.domain.records import DeliveryState, DeliveryView, NoticeKind, Purpose
from bot.domain.refs import MatrixRef
from tests.showcase import deploy_elicitation, long_elicitation
from tests.unit.domain.builders import NOW, elicitation
from tests.unit.sources.superpipeline_fixtures import VALID

BOT = "@elicitbot:localhost"
ALICE = "@alice:localhost"
ROOM = "!room:localhost"
PROMPT = "$prompt"


def fixture(case: str) -> Elicitation:
    return parse_body(copy.deepcopy(VALID[case]), workspace="acme")


class Direct:
    """The chat's direct rooms: ``people`` maps a direct room to its person."""

    def __init__(self, people: dict[str, str] | None = None) -> None:
        self.people = people or {}

    def person_of(self, room_id: str) -> str | None:
        return self.people.get(room_id)


@dataclass
class Chat:
    """What RoomEvents asks of MatrixChat, recorded."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    power: int = 0
    notices: list[tuple[str, Notice, str]] = field(default_factory=list)
    sent: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)
    user_id: str = BOT
    names: dict[str, str] = field(default_factory=dict)
    threaded: set[str] = field(default_factory=set)
    direct: Direct = field(default_factory=Direct)
    crypto: Any = None
    subjects: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)
    """Prompt event id -> the subject (revision, digest) it was sent with (unknown: absent)."""

    def posted_key(self, event_id: str) -> str | None:
        return None

    def shown_subject(self, event_id: str) -> tuple[int | None, str | None]:
        return self.subjects.get(event_id, (None, None))

    def full_in_thread(self, event_id: str) -> bool:
        return event_id in self.threaded

    async def display_name(self, room_id: str, user_id: str) -> str | None:
        return self.names.get(user_id)

    async def get_event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        return self.events.get(event_id)

    async def notify(self, destination: str, notice: Notice, *, idempotency_key: str) -> None:
        self.notices.append((destination, notice, idempotency_key))

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str
    ) -> str:
        self.sent.append((room_id, content, txn))
        return "$sent"

    async def redact(self, room_id: str, event_id: str, reason: str) -> None:
        assert reason == REDACTION_REASON
        self.redacted.append(event_id)

    async def power_level(self, room_id: str, user_id: str) -> int:
        return self.power

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        """The room's state as the homeserver gives it: everyone at ``power``."""
        return [
            {
                "type": "m.room.power_levels",
                "state_key": "",
                "content": {"users_default": self.power},
            }
        ]


@dataclass
class Core:
    """The Elicitations port, scripted: every ``act`` returns ``outcome``."""

    e: Elicitation
    outcome: Outcome
    status: Status = Status.PENDING
    keys: dict[str, str] = field(default_factory=lambda: {PROMPT: "k"})
    deliveries_: list[DeliveryView] = field(default_factory=list)
    people: People = field(default_factory=People)
    acted: list[Action] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    routes_: tuple[Route, ...] = ()

    async def routes(self) -> tuple[Route, ...]:
        return self.routes_

    reads: int = 0
    """Elicitation reads (``view``, and ``act``'s one read of an :class:`OnView`)."""

    async def act(self, action: Action) -> Outcome:
        if isinstance(action, OnView):  # as the service: one read, translated, then judged
            view = await self.view(action.key)
            assert view is not None
            translated = action.translate(view)
            if inspect.isawaitable(translated):
                translated = await translated
            if translated is None:
                return Outcome(OutcomeKind.IGNORED, action.key, view=view)
            self.acted.append(translated)
            return replace(self.outcome, view=view)
        self.acted.append(action)
        return self.outcome

    async def view(self, key: str) -> PromptView | None:
        self.reads += 1
        return PromptView(self.e, self.status, None, 1, "http://x/#k", NOW)

    def prompt_view(self) -> PromptView:
        return PromptView(self.e, self.status, None, 1, "http://x/#k", NOW)

    async def key_for_message(self, ref_key: str) -> str | None:
        return self.keys.get(ref_key)

    async def first_time(self, channel: str, inbound_id: str) -> bool:
        new = inbound_id not in self.seen
        self.seen.add(inbound_id)
        return new

    async def deliveries(self, key: str) -> Sequence[DeliveryView]:
        return self.deliveries_


def rig(core: Core, chat: Chat | None = None) -> tuple[RoomEvents, Chat]:
    chat = chat or Chat()
    events = RoomEvents(cast(MatrixChat, chat), cast(Elicitations, core), bots=frozenset())
    return events, chat


async def settled(events: RoomEvents) -> None:
    while events.background:
        await asyncio.gather(*list(events.background))


WHO = inbound.identity(ALICE)
VIA = f"matrix:{ROOM}"
AT_ZERO = Standing(power=0)
"""The standing every action here carries: the room's power levels, read once, give 0."""
ANSWER = Answer(option_ids=("deny",), respondent=f"matrix:{ALICE}", via=VIA, at=NOW)


async def test_a_keycap_is_one_choice_and_the_thread_hears_it_recorded() -> None:
    core = Core(
        fixture("options"), Outcome(OutcomeKind.ANSWERED, ElicitationKey("k"), answer=ANSWER)
    )
    events, chat = rig(core)
    reaction = inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[2])

    for _ in range(2):  # handled, then replayed: deduped by the store
        await events.handle(ROOM, reaction)
        events.finished(reaction.event_id)
    await settled(events)

    assert core.acted == [
        Choose(ElicitationKey("k"), WHO, VIA, ("deny",), shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    [(destination, notice, _)] = chat.notices
    assert destination == VIA
    assert notice == Notice(
        user=IdentityKey(f"matrix:{ALICE}"),
        text="✅ Recorded: Deny. Thank you.",
        thread=MatrixRef(ROOM, PROMPT),
        kind=NoticeKind.NOTE,
        mention=False,
        reply_to=PROMPT,
    )
    assert events.handled == 1


async def test_a_reply_naming_nothing_gets_the_cores_help_mentioning_the_person() -> None:
    core = Core(
        fixture("options"), Outcome(OutcomeKind.HELP, ElicitationKey("k"), message="To answer, …")
    )
    events, chat = rig(core)

    await events.handle(ROOM, inbound.Reply("$reply", ALICE, PROMPT, "what?", threaded=True))
    await settled(events)

    assert core.acted == [
        Reply(ElicitationKey("k"), WHO, VIA, "what?", shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    [(_, notice, _)] = chat.notices
    assert (notice.text, notice.mention, notice.reply_to) == ("To answer, …", True, "$reply")


async def test_chatter_after_the_answer_says_nothing() -> None:
    core = Core(fixture("free-text"), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    events, chat = rig(core)

    await events.handle(ROOM, inbound.Reply("$reply", ALICE, PROMPT, "thanks!", threaded=True))
    await settled(events)

    assert len(core.acted) == 1
    assert chat.notices == []


async def test_a_secret_typed_in_the_thread_is_redacted_and_refused() -> None:
    secret = elicitation(answer_mode=AnswerMode.SECRET, options=())
    refusal = Refusal(code=RefusalCode.SECRET_IN_CHAT, message="Use the web inbox.")
    core = Core(secret, Outcome(OutcomeKind.REFUSED, ElicitationKey("k"), refusal=refusal))
    events, chat = rig(core)

    await events.handle(ROOM, inbound.Reply("$reply", ALICE, PROMPT, "hunter2", threaded=True))
    await settled(events)

    assert chat.redacted == ["$reply"]
    [(_, notice, _)] = chat.notices
    assert (notice.text, notice.mention, notice.kind) == (
        "Use the web inbox.",
        True,
        NoticeKind.REFUSAL,
    )


async def test_im_on_it_in_the_thread_claims_and_names_the_person() -> None:
    claim = Claim(by=f"matrix:{ALICE}", until=NOW + timedelta(minutes=30))
    core = Core(fixture("options"), Outcome(OutcomeKind.CLAIMED, ElicitationKey("k"), claim=claim))
    events, chat = rig(core)

    await events.handle(ROOM, inbound.Reply("$c", ALICE, PROMPT, "!elicitbot claim", True))
    await settled(events)

    assert core.acted == [ClaimIt(ElicitationKey("k"), WHO, VIA, standing=AT_ZERO)]
    [(_, notice, _)] = chat.notices
    assert notice.text == (
        f"🙋 {ALICE} is on it until 2026-11-10 10:01 UTC: escalation and follow-ups wait."
    )
    assert (notice.mention, notice.reply_to) == (False, "$c")


async def test_an_edit_counts_only_from_the_sender_while_the_question_is_open() -> None:
    core = Core(
        fixture("options"), Outcome(OutcomeKind.ANSWERED, ElicitationKey("k"), answer=ANSWER)
    )
    original = {
        "event_id": "$reply",
        "sender": ALICE,
        "content": {"m.relates_to": {"rel_type": "m.thread", "event_id": PROMPT}},
    }
    events, chat = rig(core, Chat(events={"$reply": original}))

    await events.handle(ROOM, inbound.Edit("$e1", "@mallory:localhost", "$reply", "3"))
    assert core.acted == [], "not hers to edit"
    await events.handle(ROOM, inbound.Edit("$e2", ALICE, "$reply", "deny"))
    assert core.acted == [
        Reply(ElicitationKey("k"), WHO, VIA, "deny", shown=SHOWN_WHOLE, standing=AT_ZERO)
    ]
    core.status = Status.ANSWERED
    await events.handle(ROOM, inbound.Edit("$e3", ALICE, "$reply", "allow once"))
    await settled(events)
    assert len(core.acted) == 1, "an edit never changes a recorded answer"
    assert [n.reply_to for _, n, _ in chat.notices] == ["$reply"]


@pytest.mark.parametrize(("power", "elevated"), [(0, False), (49, False), (50, True), (100, True)])
async def test_a_command_is_elevated_by_the_rooms_power_level(power: int, elevated: bool) -> None:
    result = CommandResult("subscribe", "acme", changed=1)
    core = Core(fixture("options"), Outcome(OutcomeKind.COMMAND, command=result))
    events, chat = rig(core, Chat(power=power))

    await events.handle(ROOM, inbound.CommandMessage("$cmd", ALICE, "!elicitbot subscribe acme"))
    await settled(events)

    assert core.acted == [Command(WHO, VIA, "subscribe acme", elevated=elevated)]
    [(room, content, _)] = chat.sent
    assert room == ROOM
    assert content["body"] == "Subscribed: questions from workspace acme now come to this room."
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": "$cmd"}}


async def test_a_prompt_still_being_posted_is_found_by_its_marker() -> None:
    prompt = {"event_id": "$new", "sender": BOT, "content": {MARKER: {"key": "k2", "version": 1}}}
    core = Core(fixture("options"), Outcome(OutcomeKind.IGNORED))
    events, _ = rig(core, Chat(events={"$new": prompt}))

    def delivery(state: DeliveryState, destination: str = VIA) -> DeliveryView:
        return DeliveryView(
            1, ElicitationKey("k2"), destination, 0, Purpose.PRIMARY, state, None, None, NOW, None
        )

    core.deliveries_ = [delivery(DeliveryState.POSTED)]
    assert await events.prompts.key_for(ROOM, "$new") is None, "an old prompt naming the key"
    events2, _ = rig(core, Chat(events={"$new": prompt}))
    core.deliveries_ = [delivery(DeliveryState.POSTING, "matrix:!other:localhost")]
    assert await events2.prompts.key_for(ROOM, "$new") is None, "posting to another room"
    events3, _ = rig(core, Chat(events={"$new": prompt}))
    core.deliveries_ = [delivery(DeliveryState.POSTING)]
    assert await events3.prompts.key_for(ROOM, "$new") == "k2"
    # A direct message's delivery names the person, not the room.
    events4, _ = rig(core, Chat(events={"$new": prompt}, direct=Direct({ROOM: ALICE})))
    core.deliveries_ = [delivery(DeliveryState.POSTING, f"matrix:{ALICE}")]
    assert await events4.prompts.key_for(ROOM, "$new") == "k2"


def test_what_the_thread_hears_of_each_outcome() -> None:
    e = fixture("options")
    refusal = Refusal(
        code=RefusalCode.ASKER, message="You asked this question, so you cannot answer it."
    )
    refused = said(Outcome(OutcomeKind.REFUSED, ElicitationKey("k"), refusal=refusal), e, ALICE)
    assert refused is not None
    assert (refused.text, refused.mention) == (refusal.message, True)
    for quiet in (OutcomeKind.IGNORED, OutcomeKind.NOT_FOUND, OutcomeKind.COMMAND):
        assert said(Outcome(quiet, ElicitationKey("k")), e, ALICE) is None


# --------------------------------------------------------------------------- what a copy showed


def long_copy(ref: MatrixRef | None, state: DeliveryState = DeliveryState.POSTED) -> Core:
    core = Core(long_elicitation(), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    core.deliveries_ = [
        DeliveryView(1, ElicitationKey("k"), VIA, 0, Purpose.PRIMARY, state, ref, NOW, NOW, None),
    ]
    return core


@pytest.mark.parametrize(
    ("ref", "threaded", "whole"),
    [
        (MatrixRef(ROOM, PROMPT, full_in_thread=True), False, True),
        (MatrixRef(ROOM, PROMPT), False, False),
        (None, False, False),  # in flight: no ref stored yet
        (None, True, True),  # in flight, but this process posted the whole thread
        (MatrixRef(ROOM, "$another", full_in_thread=True), False, False),
    ],
)
async def test_a_long_copy_shows_everything_only_when_its_ref_says_its_thread_does(
    ref: MatrixRef | None, threaded: bool, whole: bool
) -> None:
    """``shown`` comes from rendering the current view with the copy's own ref, never from the
    event: a reaction on the long copy approves only once its thread holds everything."""
    core = long_copy(ref, DeliveryState.POSTED if ref else DeliveryState.POSTING)
    events, _ = rig(core, Chat(threaded={PROMPT} if threaded else set()))

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[0]))
    await events.handle(ROOM, inbound.Reply("$reply", ALICE, PROMPT, "approve", threaded=True))

    [choose, reply] = core.acted
    assert isinstance(choose, Choose)
    assert isinstance(reply, Reply)
    assert choose.shown == reply.shown == shown(core.prompt_view(), full_in_thread=whole)
    assert choose.shown is not None
    assert choose.shown.whole is whole


async def test_a_short_copy_shows_everything_without_asking_the_store() -> None:
    core = Core(deploy_elicitation(), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    events, _ = rig(core)

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[0]))

    [choose] = core.acted
    assert isinstance(choose, Choose)
    assert choose.shown == SHOWN_WHOLE


async def test_the_person_is_named_by_their_display_name() -> None:
    core = Core(fixture("options"), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    events, _ = rig(core, Chat(names={ALICE: "Alice"}))

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[2]))
    await events.handle(ROOM, inbound.Reaction("$r2", "@bob:localhost", PROMPT, KEYCAPS[2]))

    [alice, bob] = core.acted
    assert isinstance(alice, Choose)
    assert isinstance(bob, Choose)
    assert (alice.who.key, alice.who.display_name) == (f"matrix:{ALICE}", "Alice")
    assert bob.who.display_name == "@bob:localhost", "the ID where no name is known"

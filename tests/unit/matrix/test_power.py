"""adapters/matrix/api/power.py: a person's power level in a room as the spec reads it, kept from
the state events the sync walks (a change counts from the next event, each event replacing the
levels whole), read from the homeserver once for a room not seen yet, unknown (None) when that
read fails; and what the core makes of it (rule 9's ``matrix-power:<n>``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from adapters.matrix import translate as inbound
from adapters.matrix.api.power import CREATOR_POWER, RoomPowers, level_of
from adapters.matrix.intake.reactions import KEYCAPS
from bot.domain import deciders
from bot.domain.actions import Outcome, OutcomeKind
from bot.domain.errors import TransientDeliveryError
from bot.domain.model import ElicitationKey, Identity, People, Route
from bot.domain.policy import Standing
from tests.unit.matrix.test_handlers import PROMPT, WHO, Chat, Core, fixture, rig

ROOM = "!room:localhost"
BOB, CAROL, ALICE = "@bob:localhost", "@carol:localhost", "@alice:localhost"


def levels_event(content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "m.room.power_levels", "state_key": "", "sender": ALICE, "content": content}


def create_event(version: str, sender: str = ALICE, **content: Any) -> dict[str, Any]:
    return {
        "type": "m.room.create",
        "state_key": "",
        "sender": sender,
        "content": {"room_version": version, **content},
    }


V10 = create_event("10")


@pytest.mark.parametrize(
    ("content", "level"),
    [
        ({"users": {BOB: 50}, "users_default": 10}, 50),
        ({"users": {CAROL: 50}, "users_default": 10}, 10),
        ({"users": {CAROL: 50}}, 0),
        ({"users": {BOB: "75"}}, 75),  # a string of digits, as room versions before 10 allow
        ({"users": {BOB: True}, "users_default": 5}, 5),  # not a level
        ({"users": {BOB: "high"}, "users_default": "x"}, 0),
        ({"users": "nonsense", "users_default": -1}, -1),
    ],
)
def test_a_level_is_users_else_users_default_else_zero(content: dict[str, Any], level: int) -> None:
    assert level_of(BOB, content, V10) == level


def test_a_room_without_power_levels_gives_its_creator_100_and_everyone_else_0() -> None:
    old = create_event("1", creator=ALICE)
    assert (level_of(ALICE, None, old), level_of(BOB, None, old)) == (100, 0)
    assert level_of(ALICE, None, V10) == 100  # from version 11 the sender is the creator
    assert level_of(BOB, None, None) == 0


def test_room_version_12_creators_outrank_every_level_and_are_never_listed() -> None:
    v12 = create_event("12", additional_creators=[CAROL])
    content = {"users": {BOB: 100}, "users_default": 0}
    assert level_of(ALICE, content, v12) == CREATOR_POWER
    assert level_of(CAROL, content, v12) == CREATOR_POWER
    assert level_of(BOB, content, v12) == 100
    assert CREATOR_POWER > 10**9  # above any matrix-power:<n> an entry can name (9 digits)
    # Before version 12, and in a version this code does not know, creators are ordinary.
    assert level_of(ALICE, content, create_event("11", additional_creators=[CAROL])) == 0
    assert level_of(ALICE, content, create_event("org.example.custom")) == 0


class State:
    """The homeserver's answer to ``GET /rooms/{id}/state``, counted; ``fail``: it errs."""

    def __init__(self, events: list[dict[str, Any]], *, fail: bool = False) -> None:
        self.events = events
        self.fail = fail
        self.calls = 0

    async def __call__(self, room_id: str) -> Iterable[Mapping[str, Any]]:
        self.calls += 1
        if self.fail:
            raise TransientDeliveryError("matrix room state: homeserver unavailable")
        return self.events


async def test_the_sync_keeps_the_levels_each_event_replacing_the_last_with_no_call() -> None:
    state = State([])
    powers = RoomPowers(state)
    powers.saw(ROOM, V10)
    powers.saw(ROOM, levels_event({"users": {BOB: 50, CAROL: 50}}))
    assert await powers.level(ROOM, BOB) == 50
    # Bob taken out of ``users`` is back at users_default: the event replaces, never merges
    # (nio's MatrixRoom.power_levels would keep his 50).
    powers.saw(ROOM, levels_event({"users": {CAROL: 50}, "users_default": 0}))
    assert await powers.level(ROOM, BOB) == 0
    assert await powers.level(ROOM, CAROL) == 50
    powers.saw(ROOM, {"type": "m.room.power_levels", "state_key": "x", "content": {}})
    powers.saw(ROOM, {"type": "m.room.message", "content": {"users": {BOB: 100}}})
    assert await powers.level(ROOM, CAROL) == 50, "only the room's own state event counts"
    assert (state.calls, powers.reads) == (0, 0)


async def test_a_room_not_seen_yet_is_read_once_then_followed_by_the_sync() -> None:
    state = State([create_event("12"), levels_event({"users": {BOB: 50}})])
    powers = RoomPowers(state)
    powers.saw(ROOM, levels_event({"users": {BOB: 50}}))  # no create event: creators unknown
    assert await powers.standing(ROOM, ALICE) == Standing(power=CREATOR_POWER)
    assert await powers.standing(ROOM, BOB) == Standing(power=50)
    powers.saw(ROOM, levels_event({"users": {BOB: 20}}))
    assert await powers.level(ROOM, BOB) == 20
    assert (state.calls, powers.reads) == (1, 1)
    # A room that has no power levels at all is read once too.
    bare = State([create_event("10")])
    empty = RoomPowers(bare)
    assert (await empty.level(ROOM, ALICE), await empty.level(ROOM, BOB)) == (100, 0)
    assert bare.calls == 1


async def test_a_read_that_fails_leaves_the_level_unknown_and_the_next_action_reads_again() -> None:
    state = State([V10, levels_event({"users": {BOB: 50}})], fail=True)
    powers = RoomPowers(state)
    assert await powers.standing(ROOM, BOB) == Standing(power=None)
    state.fail = False
    assert await powers.standing(ROOM, BOB) == Standing(power=50)
    assert state.calls == 2


ROUTE = Route(approvers=("matrix-power:50", "matrix:@dave:localhost"))


def who(user: str, platform: str = "matrix") -> Identity:
    return (
        inbound.identity(user) if platform == "matrix" else Identity(platform=platform, user=user)
    )


@pytest.mark.parametrize(
    ("power", "decides"),
    [(50, True), (100, True), (CREATOR_POWER, True), (49, False), (None, False)],
)
def test_the_core_counts_a_power_level_at_or_above_the_entry(
    power: int | None, decides: bool
) -> None:
    refusal = deciders.may_choose(ROUTE, who(BOB), Standing(power=power), People(), ())
    assert (refusal is None) is decides


def test_the_refusal_names_the_entry_for_people_and_says_when_the_level_was_unknown() -> None:
    refused = deciders.may_choose(ROUTE, who(BOB), Standing(power=0), People(), ())
    assert refused is not None
    assert refused.message == (
        "Only the approvers of this route can decide: members with power level 50 or more in "
        "the Matrix room they answer in, matrix:@dave:localhost."
    )
    unknown = deciders.may_choose(ROUTE, who(BOB), Standing(power=None), People(), ())
    assert unknown is not None
    assert unknown.message == refused.message + (
        " I could not read your power level in this room just now: reply in this thread with "
        "your choice to try again."
    )
    # Someone on another surface never has a Matrix power level: no such sentence for them.
    web = deciders.may_choose(ROUTE, who("bob", "web"), Standing(), People(), ())
    assert web is not None
    assert web.message == refused.message
    # A route without a power entry says nothing of power levels either.
    people = Route(approvers=("matrix:@dave:localhost",))
    plain = deciders.may_choose(people, who(BOB), Standing(power=None), People(), ())
    assert plain is not None
    assert plain.message == "Only the approvers of this route can decide: matrix:@dave:localhost."


class CountingChat(Chat):
    """The recorded chat, counting its reads of a room's whole state."""

    state_reads: int = 0

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        self.state_reads += 1
        return await super().room_state(room_id)


async def test_every_answer_from_a_room_carries_the_senders_level_there_read_from_the_sync() -> (
    None
):
    """A keycap, a thread reply and 🙋 carry the sender's power level in the room the sync
    showed; the room was seen, so nothing is read from the homeserver."""
    core = Core(fixture("options"), Outcome(OutcomeKind.HELP, ElicitationKey("k"), message="?"))
    chat = CountingChat(power=100)
    events, _ = rig(core, chat)
    events.powers.saw(ROOM, V10)
    events.powers.saw(ROOM, levels_event({"users": {ALICE: 50}}))
    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[0]))
    events.powers.saw(ROOM, levels_event({"users": {ALICE: 20}}))
    await events.handle(ROOM, inbound.Reply("$t", ALICE, PROMPT, "1", threaded=True))
    await events.handle(ROOM, inbound.Reply("$c", ALICE, PROMPT, "I'm on it", threaded=True))
    assert [(type(a).__name__, a.who, getattr(a, "standing", None)) for a in core.acted] == [
        ("Choose", WHO, Standing(power=50)),
        ("Reply", WHO, Standing(power=20)),
        ("ClaimIt", WHO, Standing(power=20)),
    ]
    assert chat.state_reads == 0

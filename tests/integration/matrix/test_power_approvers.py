"""``matrix-power:<n>`` approvers on the real Synapse (rule 9): a member at the level decides, one
below it is told privately who may, a change of ``m.room.power_levels`` counts from the next
action (a demotion by taking someone out of ``users`` too, and across a restart), and the level
is the one in the room the answer came from: a direct room like any other.

The rig's room is made by alice (room version 12: its creator outranks every level); bob starts
at power 0, the bot at 50."""

from __future__ import annotations

import urllib.parse
from typing import Any

from bot.domain.model import Route, Status
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import ONE, Rig, refusal_of, until
from tests.synapse import MatrixUser

NOT_AT_50 = (
    "Only the approvers of this route can decide: members with power level 50 or more in the "
    "Matrix room they answer in."
)


async def set_power(
    rig: Rig, by: MatrixUser, room: str, user: MatrixUser, level: int | None
) -> None:
    """``by`` sets ``user``'s level in ``room`` (None: takes them out of ``users``, back to
    ``users_default``), as Element does: the whole event written again."""
    path = f"/rooms/{urllib.parse.quote(room)}/state/m.room.power_levels"
    content: dict[str, Any] = await rig.hs.call(by, "GET", path)
    users = dict(content.get("users", {}))
    if level is None:
        users.pop(user.user_id, None)
    else:
        users[user.user_id] = level
    await rig.hs.call(by, "PUT", path, {**content, "users": users})


async def restart(rig: Rig, **policy: Any) -> None:
    """A new bot process (same store, token and device) whose route to the room has ``policy``."""
    rig.routes = [Route(destinations=(rig.destination,), **policy)]
    await rig.bot.close()
    rig.bots.pop()
    await rig.start_bot()


async def test_a_member_at_50_decides_one_at_0_is_told_who_may_and_a_promotion_counts_next(
    rig: Rig,
) -> None:
    await restart(rig, approvers=("matrix-power:50",))
    key, prompt = await rig.post()
    bob = rig.cast.bob

    await rig.hs.react(bob, rig.room, prompt, ONE)
    [told] = await rig.wait_notices(prompt, 1)
    assert refusal_of(told, bob) == NOT_AT_50
    print("Matrix HTML of the refusal:", told["content"]["formatted_body"])
    assert told["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert await rig.status(key) is Status.PENDING

    await set_power(rig, rig.cast.alice, rig.room, bob, 50)
    await rig.hs.reply_in_thread(bob, rig.room, prompt, "1")
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("allow_once",), bob.key)
    # The room was read at most once, when this process first needed it (unless its first
    # sync carried the room's create event); the sync did the rest.
    assert rig.bot.listener.events.powers.reads <= 1


async def test_a_demotion_counts_from_the_next_action_and_a_restart_reads_the_room_again(
    rig: Rig,
) -> None:
    """Taking bob out of ``users`` puts him back at ``users_default`` (nio's own room state
    would keep his 50: it merges ``users``)."""
    bob = rig.cast.bob
    await set_power(rig, rig.cast.alice, rig.room, bob, 50)
    await restart(rig, approvers=("matrix-power:50",))
    first, prompt1 = await rig.post()
    await rig.hs.react(bob, rig.room, prompt1, ONE)
    assert (await rig.answered(first)).respondent == bob.key
    reads = rig.bot.listener.events.powers.reads
    await rig.bot.dispatcher.drain()  # the answered copy's edit and the write-back

    await set_power(rig, rig.cast.alice, rig.room, bob, None)
    second, prompt2 = await rig.post("options", elicitationId="eli_2b3c4d5e6f708192")
    await rig.hs.react(bob, rig.room, prompt2, ONE)
    [told] = await rig.wait_notices(prompt2, 1)
    assert refusal_of(told, bob) == NOT_AT_50
    assert await rig.status(second) is Status.PENDING
    assert rig.bot.listener.events.powers.reads == reads <= 1, "the change came by the sync"

    # Promoted again while no bot runs: the next process sees the change in its first sync.
    await rig.bot.close()
    rig.bots.pop()
    await set_power(rig, rig.cast.alice, rig.room, bob, 75)
    bot = await rig.start_bot()
    await rig.hs.reply_in_thread(bob, rig.room, prompt2, "1")
    assert (await rig.answered(second)).respondent == bob.key
    assert bot.listener.events.powers.reads <= 1


async def test_the_level_is_the_one_in_the_room_the_answer_came_from_a_direct_room_too(
    rig: Rig,
) -> None:
    """One question in the shared room (bob at 0) and in bob's direct room (the bot made it as a
    trusted private chat: bob is one of its creators, above every level). ``matrix-power:100``
    refuses him in the first and takes his approval in the second."""
    bob = rig.cast.bob
    rig.routes = [
        Route(destinations=(rig.destination, bob.key), approvers=("matrix-power:100",)),
    ]
    await rig.bot.close()
    rig.bots.pop()
    bot = await rig.start_bot()
    key = await rig.intake()
    await bot.dispatcher.drain()

    async def both() -> dict[str, str] | None:
        refs = [d.ref for d in await rig.store.deliveries(key)]
        rooms = {r.room_id: r.event_id for r in refs if isinstance(r, MatrixRef)}
        return rooms if len(rooms) == 2 else None

    rooms = await until(both, "both copies posted")
    [direct] = [r for r in rooms if r != rig.room]
    await rig.hs.call(bob, "POST", f"/join/{urllib.parse.quote(direct)}", {})
    create = await rig.hs.call(
        bob, "GET", f"/rooms/{urllib.parse.quote(direct)}/state/m.room.create"
    )
    # What trusted_private_chat makes of an invitee in room version 12: a creator, never listed
    # in ``users`` (nio's room state would give him users_default, 0).
    assert create["additional_creators"] == [bob.user_id]

    await rig.hs.react(bob, rig.room, rooms[rig.room], ONE)
    [told] = await rig.wait_notices(rooms[rig.room], 1)
    assert refusal_of(told, bob) == (
        "Only the approvers of this route can decide: members with power level 100 or more in "
        "the Matrix room they answer in."
    )
    assert await rig.status(key) is Status.PENDING

    await rig.hs.react(bob, direct, rooms[direct], ONE)
    answer = await rig.answered(key)
    assert (answer.respondent, answer.via) == (bob.key, f"matrix:{direct}")

"""Direct rooms at their edges (adapters/matrix/api/direct.py) on the real Synapse: two replicas of
one bot account making the first room for the same people at once end with one room (and one invite)
each; a bot killed between making a room and listing it in ``m.direct`` finds that room again; a
person who left is invited back to the same room; an alias another user took costs a short wait,
then a room without it; a direct room the person made (Element's ``is_direct`` invite, from a
workspace admin) is listed and used, a non-admin's is declined."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from nio import AsyncClient, RoomCreateResponse, RoomMessageText, RoomPreset

from adapters.matrix.api.client import make_client
from adapters.matrix.api.direct import DirectRooms, alias_name
from adapters.matrix.api.reads import RoomReads
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import until
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig
from tests.integration.matrix_e2ee.clients import MEGOLM
from tests.synapse import Homeserver, MatrixUser, Synapse


class Replicas:
    """Bot processes of one fresh account: each a nio client of its own and a DirectRooms."""

    def __init__(self, synapse: Synapse) -> None:
        self.synapse = synapse
        self.bot = synapse.register("dm-bot")
        self.clients: list[AsyncClient] = []

    def start(self, kind: Callable[..., DirectRooms] = DirectRooms, **options: Any) -> DirectRooms:
        bot = self.bot
        client = make_client(self.synapse.base_url, bot.user_id, bot.device_id, bot.access_token)
        self.clients.append(client)
        return kind(client, RoomReads(client).membership, encrypted=True, **options)


@pytest.fixture
async def replicas(synapse: Synapse) -> AsyncIterator[Replicas]:
    made = Replicas(synapse)
    try:
        yield made
    finally:
        for client in made.clients:
            await client.close()


async def invites(hs: Homeserver, person: MatrixUser) -> list[str]:
    """The rooms ``person`` is invited to now."""
    reply = await hs.call(person, "GET", "/sync", timeout=0)
    return sorted(reply.get("rooms", {}).get("invite", {}))


async def direct_of(hs: Homeserver, bot: MatrixUser) -> dict[str, list[str]]:
    reply = await hs.call(bot, "GET", f"/user/{bot.user_id}/account_data/m.direct")
    assert isinstance(reply, dict)
    return reply


async def joined(hs: Homeserver, bot: MatrixUser) -> list[str]:
    return sorted((await hs.call(bot, "GET", "/joined_rooms"))["joined_rooms"])


async def test_two_replicas_making_the_first_rooms_at_once_make_one_room_per_person(
    synapse: Synapse, homeserver: Homeserver, replicas: Replicas
) -> None:
    people = [synapse.register(f"dm-person{i}") for i in range(3)]
    a, b = replicas.start(), replicas.start()
    rooms = await asyncio.gather(*(r.room_for(p.user_id) for p in people for r in (a, b)))
    by_person = {p.user_id: rooms[2 * i] for i, p in enumerate(people)}
    assert rooms == [room for room in by_person.values() for _ in (a, b)]  # both agree
    assert a.created + b.created == len(people)
    assert await joined(homeserver, replicas.bot) == sorted(by_person.values())
    for person in people:
        assert await invites(homeserver, person) == [by_person[person.user_id]]
    # Neither replica's m.direct write names a room of its own; one may have replaced the other's.
    listed = await direct_of(homeserver, replicas.bot)
    assert all(listed[user] == [by_person[user]] for user in listed)

    # A third process (no cache) finds each room through m.direct or its alias, makes none, and
    # lists every one.
    c = replicas.start()
    assert [await c.room_for(p.user_id) for p in people] == list(by_person.values())
    assert c.created == 0
    assert await direct_of(homeserver, replicas.bot) == {u: [r] for u, r in by_person.items()}
    some = next(iter(by_person.values()))
    assert await homeserver.call(replicas.bot, "GET", f"/rooms/{some}/state/m.room.encryption")
    # The alias stays out of the room's state, so clients name the room after the person.
    name = await homeserver.call(replicas.bot, "GET", f"/rooms/{some}/state/m.room.canonical_alias")
    assert name == {}


class KilledBeforeListing(DirectRooms):
    """A process killed after ``createRoom`` returned, before its ``m.direct`` write."""

    async def _list(self, user_id: str, room_id: str) -> bool:
        raise RuntimeError("killed")


async def test_a_bot_killed_between_making_a_room_and_listing_it_finds_that_room_again(
    synapse: Synapse, homeserver: Homeserver, replicas: Replicas
) -> None:
    person = synapse.register("dm-person")
    killed = replicas.start(KilledBeforeListing)
    with pytest.raises(RuntimeError, match="killed"):
        await killed.room_for(person.user_id)
    assert killed.created == 1
    [made] = await joined(homeserver, replicas.bot)
    with pytest.raises(AssertionError, match="M_NOT_FOUND"):
        await direct_of(homeserver, replicas.bot)  # nothing listed

    again = replicas.start()
    assert await again.room_for(person.user_id) == made
    assert again.created == 0
    assert await direct_of(homeserver, replicas.bot) == {person.user_id: [made]}
    assert await joined(homeserver, replicas.bot) == [made]
    assert await invites(homeserver, person) == [made]


async def test_a_person_who_left_their_direct_room_is_invited_back_to_it(
    synapse: Synapse, homeserver: Homeserver, replicas: Replicas
) -> None:
    person = synapse.register("dm-person")
    first = replicas.start()
    room = await first.room_for(person.user_id)
    await homeserver.call(person, "POST", f"/join/{room}", {})
    await homeserver.call(person, "POST", f"/rooms/{room}/leave", {})

    later = replicas.start()  # m.direct lists the room, but the person is not in it
    assert await later.room_for(person.user_id) == room
    assert later.created == 0
    assert await invites(homeserver, person) == [room]
    member = await homeserver.call(
        replicas.bot, "GET", f"/rooms/{room}/state/m.room.member/{person.user_id}"
    )
    assert (member["membership"], member["is_direct"]) == ("invite", True)
    assert await direct_of(homeserver, replicas.bot) == {person.user_id: [room]}


async def test_an_alias_someone_else_took_costs_a_short_wait_then_a_room_without_it(
    synapse: Synapse, homeserver: Homeserver, replicas: Replicas
) -> None:
    person = synapse.register("dm-person")
    squatter = synapse.register("dm-squatter")
    await homeserver.call(
        squatter,
        "POST",
        "/createRoom",
        {"room_alias_name": alias_name(replicas.bot.user_id, person.user_id)},
    )
    rooms = replicas.start(settle=0.2)
    room = await rooms.room_for(person.user_id)
    assert rooms.created == 1
    assert await joined(homeserver, replicas.bot) == [room]
    assert await invites(homeserver, person) == [room]
    assert await direct_of(homeserver, replicas.bot) == {person.user_id: [room]}
    assert await replicas.start().room_for(person.user_id) == room  # listed: found, no wait


async def test_a_direct_room_an_admin_made_is_listed_and_used_and_a_non_admins_is_declined(
    e2ee: E2eeRig,
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bot_user, bob = rig.cast.bot, rig.cast.bob
    rig.room = rig.cast.alice.user_id  # the route's destination: matrix:@alice:localhost
    bot = await e2ee.start_bot()

    # Element's direct message: trusted private chat, encrypted, the invite marked is_direct.
    made = await alice.client.room_create(
        is_direct=True,
        preset=RoomPreset.trusted_private_chat,
        invite=[bot_user.user_id],
        initial_state=[
            {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}
        ],
    )
    assert isinstance(made, RoomCreateResponse), made
    theirs = str(made.room_id)
    bobs = await rig.hs.call(
        bob, "POST", "/createRoom", {"is_direct": True, "invite": [bot_user.user_id]}
    )

    async def listed() -> dict[str, list[str]] | None:
        try:
            return await direct_of(rig.hs, bot_user)
        except AssertionError:
            return None  # not written yet

    assert await until(listed, "alice's room in m.direct") == {rig.cast.alice.user_id: [theirs]}

    async def declined() -> bool:
        state = await rig.hs.call(bob, "GET", f"/rooms/{bobs['room_id']}/members")
        return any(
            e["state_key"] == bot_user.user_id and e["content"]["membership"] == "leave"
            for e in state["chunk"]
        )

    assert await until(declined, "bob's invite declined")

    key = await rig.intake("options", question=f"May I deploy {uuid.uuid4().hex}?")
    assert await bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    assert isinstance(delivery.ref, MatrixRef)
    assert delivery.ref.room_id == theirs
    assert bot.chat.direct.created == 0
    prompt = delivery.ref.event_id
    seen = await alice.until(theirs, lambda ev: prompt in ev and ev, "the prompt in her room")
    assert isinstance(seen[prompt], RoomMessageText)
    assert seen[prompt].decrypted
    assert await direct_of(rig.hs, bot_user) == {rig.cast.alice.user_id: [theirs]}

"""Matrix end to end: room commands, invites and encrypted rooms (the rig:
tests/integration/matrix/rig.py)."""

from __future__ import annotations

import pytest

from adapters.matrix.intake.notices import ENCRYPTED_NOTICE
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Destination, Status
from bot.domain.ports import PromptView
from tests.integration.matrix.rig import TWO, Rig, refusal_of, until
from tests.synapse import MatrixUser

# --------------------------------------------------------------------------- rooms and commands


async def command(rig: Rig, user: MatrixUser, room: str, text: str) -> str:
    """Send a command; return the bot's reply to it."""
    sent = await rig.hs.say(user, room, text)

    async def reply() -> str | None:
        await rig.bot.listener.drain()
        for e in await rig.hs.messages(rig.cast.alice, room):
            relates = e["content"].get("m.relates_to", {})
            if (
                e["sender"] == rig.cast.bot.user_id
                and relates.get("m.in_reply_to", {}).get("event_id") == sent
            ):
                return str(e["content"]["body"])
        return None

    text_: str = await until(reply, f"the reply to {text!r}")
    return text_


async def test_admins_and_moderators_route_rooms_but_moderators_are_not_admins(rig: Rig) -> None:
    room = await rig.hs.make_room(
        rig.cast.alice,
        [rig.cast.bot, rig.cast.bob, rig.cast.agent],
        power={rig.cast.bob.user_id: 50},
    )

    assert await command(rig, rig.cast.agent, room, "!elicitbot subscribe acme") == (
        "Only workspace admins or room moderators (power level 50 or more) can run elicitbot "
        "commands."
    )
    assert await command(rig, rig.cast.bob, room, "!elicitbot subscribe acme board brd_1") == (
        "Subscribed: questions from workspace acme board brd_1 now come to this room."
    )
    assert await command(rig, rig.cast.alice, room, "!elicitbot subscribe acme") == (
        "Subscribed: questions from workspace acme now come to this room."
    )
    routes = await command(rig, rig.cast.alice, room, "!elicitbot routes")
    assert f"• everything -> {rig.destination} (config)" in routes
    assert f"• workspace=acme board=brd_1 -> matrix:{room} (chat)" in routes
    assert f"• workspace=acme -> matrix:{room} (chat)" in routes
    assert await command(rig, rig.cast.bob, room, "!elicitbot unsubscribe acme board brd_1") == (
        "Unsubscribed: questions from workspace acme board brd_1 no longer come to this room."
    )
    assert (await command(rig, rig.cast.bob, room, "!elicitbot frob")).startswith(
        "Unknown command 'frob'.\nelicitbot commands:"
    )
    assert {r.created_by for r in await rig.store.chat_routes()} == {rig.cast.alice.key}

    # The moderator's power level does not make them a workspace admin.
    key, event_id = await rig.post("options")
    await rig.hs.react(rig.cast.bob, rig.room, event_id, TWO)
    [refused] = await rig.wait_notices(event_id, 1)
    assert "Only a workspace admin" in refusal_of(refused, rig.cast.bob)
    assert await rig.status(key) is Status.PENDING


async def test_invites_from_admins_are_accepted_and_others_declined(rig: Rig) -> None:
    from_admin = await rig.hs.make_room(rig.cast.alice, [], invite_only=[rig.cast.bot])
    from_bob = await rig.hs.make_room(rig.cast.bob, [], invite_only=[rig.cast.bot])

    async def membership(room: str, owner: MatrixUser) -> str | None:
        path = f"/rooms/{room}/state/m.room.member/{rig.cast.bot.user_id}"
        state = await rig.hs.call(owner, "GET", path)
        value = state.get("membership")
        return value if value in ("join", "leave") else None

    assert await until(lambda: membership(from_admin, rig.cast.alice), "the join") == "join"
    assert await until(lambda: membership(from_bob, rig.cast.bob), "the decline") == "leave"


async def test_an_encrypted_room_is_refused_clearly(rig: Rig) -> None:
    room = await rig.hs.make_room(rig.cast.alice, [], invite_only=[rig.cast.bot], encrypted=True)

    async def warned() -> str | None:
        for e in await rig.hs.messages(rig.cast.alice, room):
            if e["sender"] == rig.cast.bot.user_id and e["content"].get("msgtype") == "m.notice":
                return str(e["content"]["body"])
        return None

    assert await until(warned, "the encryption notice") == ENCRYPTED_NOTICE

    key = await rig.intake("options")
    stored = await rig.store.get(key)
    assert stored is not None
    view = PromptView(stored.elicitation, stored.status, None, 1, "http://x/", rig.clock.now())
    with pytest.raises(PermanentDeliveryError, match="end-to-end encrypted"):
        await rig.bot.chat.post(
            Destination(f"matrix:{room}"), view, idempotency_key="x", uncertain=None
        )

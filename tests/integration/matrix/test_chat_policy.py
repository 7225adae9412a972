"""Who may decide, from a Matrix room: ``!elicitbot subscribe … approvers … quorum …`` and
``!elicitbot policy`` on the real Synapse (the rig: tests/integration/matrix/rig.py), and the
stored policy enforced on a question the chat route carries. Every reply is printed."""

from __future__ import annotations

from bot.domain.model import Route, RouteMatch, Status
from bot.domain.policy import RoutePolicy
from tests.integration.matrix.rig import ONE, TWO, Rig, name_of, refusal_of, until
from tests.integration.matrix.test_rooms import command
from tests.synapse import MatrixUser


async def said(rig: Rig, user: MatrixUser, room: str, text: str) -> str:
    reply = await command(rig, user, room, text)
    print(f"\n{user.user_id}: {text}\n{reply}")
    return reply


async def test_admins_set_who_decides_from_a_room_and_read_it_back(rig: Rig) -> None:
    cast = rig.cast
    room = await rig.hs.make_room(
        cast.alice, [cast.bot, cast.bob, cast.agent], power={cast.bob.user_id: 50}
    )
    rig.bot.service.config_routes = (
        Route(
            match=RouteMatch(workspace="globex"),
            destinations=(f"matrix:{room}",),
            approvers=("admins",),
            quorum=2,
        ),
    )

    # A moderator routes the room, but who may decide is the workspace admins' to say.
    assert await said(rig, cast.bob, room, "!elicitbot subscribe acme approvers admins") == (
        "Only workspace admins (people.admins in the config) can say who may decide (approvers, "
        "quorum, approve_on, anyone_may_reject); subscribe without those words to route this room."
    )
    assert await rig.store.chat_routes() == []

    bob = cast.bob.key
    subscribed = await said(
        rig,
        cast.alice,
        room,
        f"!elicitbot subscribe acme board brd_1 approvers {bob}, admins quorum 2 "
        "approve_on matrix,web anyone-may-reject",
    )
    assert subscribed == (
        "Subscribed: questions from workspace acme board brd_1 now come to this room.\n"
        f"Who may decide: approvers: {bob}, admins; quorum: 2; approve_on: matrix, web; "
        "anyone_may_reject: yes"
    )
    # The moderator's plain subscribe keeps the admin's policy.
    kept = await said(rig, cast.bob, room, "!elicitbot subscribe acme board brd_1")
    assert kept.startswith("Already subscribed: questions from workspace acme board brd_1")
    assert f"approvers: {bob}, admins; quorum: 2" in kept
    [route] = await rig.store.chat_routes()
    assert route.policy == RoutePolicy(
        (bob, "admins"), quorum=2, approve_on=("matrix", "web"), anyone_may_reject=True
    )

    wrong = await said(rig, cast.alice, room, "!elicitbot subscribe acme quorum 0")
    assert wrong.startswith("quorum: '0' must be a whole number from 1 to 50.\nelicitbot commands:")

    policy = await said(rig, cast.bob, room, "!elicitbot policy")
    assert policy == (
        "Who may decide, for the routes posting to this room (first match wins):\n"
        "• workspace=globex (config): approvers: admins; quorum: 2; approve_on: every surface; "
        "anyone_may_reject: no\n"
        f"• workspace=acme board=brd_1 (chat): approvers: {bob}, admins; quorum: 2; "
        "approve_on: matrix, web; anyone_may_reject: yes"
    )
    assert await said(rig, cast.alice, rig.room, "!elicitbot policy") == (
        "No route posts to this room (!elicitbot routes lists them all)."
    )
    assert "!elicitbot policy — who may decide" in await said(
        rig, cast.alice, room, "!elicitbot help"
    )


async def test_a_chat_routes_approver_decides_and_an_admin_who_is_not_one_is_refused(
    rig: Rig,
) -> None:
    cast = rig.cast
    rig.bot.service.config_routes = ()
    reply = await said(
        rig, cast.alice, rig.room, f"!elicitbot subscribe acme approvers {cast.bob.key}"
    )
    assert reply.startswith("Subscribed: questions from workspace acme now come to this room.")

    key, event_id = await rig.post("options")
    await rig.hs.react(cast.alice, rig.room, event_id, ONE)
    [refused] = await rig.wait_notices(event_id, 1)
    told = refusal_of(refused, cast.alice)
    print(f"\nalice's approval, refused:\n{told}")
    # By name: bob's display name in this room (nio's room state), not his id.
    assert told == f"Only the approvers of this route can decide: {name_of(cast.bob)}."
    assert await rig.status(key) is Status.PENDING

    # Told once per question: her next try (another keycap) is audited, and no notice follows.
    await rig.hs.react(cast.alice, rig.room, event_id, TWO)

    async def refused_twice() -> bool | None:
        audit = await rig.store.audit(key)
        return True if sum(a.code == "not_approver" for a in audit) == 2 else None

    await until(refused_twice, "alice's second attempt audited")
    [repeat] = [a for a in await rig.store.audit(key) if a.code == "not_approver"][1:]
    assert (repeat.detail or {}).get("repeat") is True

    await rig.hs.react(cast.bob, rig.room, event_id, ONE)
    answer = await rig.answered(key)
    assert (answer.respondent, answer.option_ids) == (cast.bob.key, ("allow_once",))
    notices = await rig.wait_notices(event_id, 2)  # the refusal, then bob's "Recorded"
    mentioned = [n for n in notices if n["content"].get("m.mentions", {}).get("user_ids")]
    assert len(mentioned) == 1, [n["content"]["body"] for n in notices]

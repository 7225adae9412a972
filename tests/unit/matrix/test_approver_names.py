"""Matrix and rule 9's refusal: the route's Matrix approvers reach the core by their name in the
room (:mod:`adapters.matrix.api.approvers`, in ``Standing.names``), a slow name never holds up the
action, and a refusal the person was told before on this question posts no further notice."""

from __future__ import annotations

import asyncio
import html
import json

from adapters.matrix import translate as inbound
from adapters.matrix.api.approvers import ApproverNames
from adapters.matrix.intake.notices import notice_content, said
from adapters.matrix.intake.reactions import KEYCAPS
from bot.domain.actions import Choose, Outcome, OutcomeKind
from bot.domain.deciders import TOLD_BEFORE
from bot.domain.model import ElicitationKey, Refusal, RefusalCode, Route
from tests.unit.matrix.test_handlers import ALICE, PROMPT, ROOM, Chat, Core, fixture, rig, settled

DAVE = "@dave:localhost"
ROUTE = Route(approvers=(f"matrix:{DAVE}", "matrix:@erin:localhost", "slack:U0BOB", "admins"))
FULL = Refusal(
    code=RefusalCode.NOT_APPROVER,
    message="Only the approvers of this route can decide: Dave, matrix:@erin:localhost, …",
    once=True,
)


async def test_the_routes_matrix_approvers_come_with_the_action_by_name() -> None:
    core = Core(fixture("options"), Outcome(OutcomeKind.REFUSED, ElicitationKey("k"), refusal=FULL))
    core.routes_ = (ROUTE,)
    events, chat = rig(core, Chat(names={DAVE: "Dave", ALICE: "Alice"}))

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[1]))
    await settled(events)

    [action] = core.acted
    assert isinstance(action, Choose)
    assert dict(action.standing.names) == {f"matrix:{DAVE}": "Dave"}, "erin has no name here"
    assert action.standing.power == 0
    [(_, notice, _)] = chat.notices
    assert notice.text == FULL.message
    content = notice_content(notice.text, users=[ALICE], mention=True, thread_root=PROMPT)
    print(json.dumps(content, indent=2, ensure_ascii=False))  # the notice as Matrix gets it
    assert content["formatted_body"].endswith(": " + html.escape(FULL.message, quote=False))


async def test_no_route_names_approvers_reads_no_name() -> None:
    asked: list[str] = []

    async def display_name(room_id: str, user_id: str) -> str | None:
        asked.append(user_id)
        return "X"

    core = Core(fixture("options"), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    core.routes_ = (Route(),)
    names = ApproverNames(display_name, core)  # type: ignore[arg-type]
    assert await names.names(ROOM, core.e) == {}
    assert asked == []


async def test_a_slow_name_is_left_out_and_still_read_for_the_next_action() -> None:
    release = asyncio.Event()

    async def display_name(room_id: str, user_id: str) -> str | None:
        if user_id == DAVE:
            await release.wait()
            return "Dave"
        return None

    core = Core(fixture("options"), Outcome(OutcomeKind.IGNORED, ElicitationKey("k")))
    core.routes_ = (ROUTE,)
    names = ApproverNames(display_name, core, wait=0.05)  # type: ignore[arg-type]
    assert await names.names(ROOM, core.e) == {}, "not read in time: the refusal shows the id"
    assert len(names._reading) == 1
    [reading] = names._reading
    release.set()
    assert await reading == "Dave"  # the read finished (RoomReads remembers the name)
    await asyncio.sleep(0)  # its done-callback runs
    assert names._reading == set()


async def test_a_refusal_told_before_posts_nothing_in_the_room() -> None:
    again = Refusal(code=RefusalCode.NOT_APPROVER, message=TOLD_BEFORE, once=True)
    repeated = Outcome(
        OutcomeKind.REFUSED, ElicitationKey("k"), TOLD_BEFORE, refusal=again, repeated=True
    )
    core = Core(fixture("options"), repeated)
    assert said(repeated, core.e, ALICE) is None
    events, chat = rig(core)

    await events.handle(ROOM, inbound.Reaction("$r2", ALICE, PROMPT, KEYCAPS[1]))
    await settled(events)
    assert len(core.acted) == 1, "the attempt reached the core (and its audit row)"
    assert chat.notices == []

"""``matrix-power:<n>`` approvers in an end-to-end encrypted room on the real Synapse: bob (power
0) is refused in an encrypted notice that alice's E2EE client decrypts, alice promotes him with
her client and his next approval counts, and alice's own encrypted thread reply counts by her
level (she made the room: in room version 12 a creator outranks every level)."""

from __future__ import annotations

import urllib.parse
import uuid
from typing import Any

from nio import RoomGetStateEventResponse, RoomMessageNotice, RoomPutStateResponse

from bot.domain.model import Route, Status
from tests.integration.matrix.rig import ONE
from tests.integration.matrix.test_power_approvers import NOT_AT_50
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig
from tests.integration.matrix_e2ee.test_adapter_e2ee import from_bot, say
from tests.integration.matrix_e2ee.test_e2ee import thread_reply


async def test_an_encrypted_room_counts_power_levels_and_refuses_below_them_encrypted(
    e2ee: E2eeRig,
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bob, room = rig.cast.bob, rig.room
    await rig.hs.call(
        rig.cast.alice,
        "POST",
        f"/rooms/{urllib.parse.quote(room)}/invite",
        {"user_id": bob.user_id},
    )
    await rig.hs.call(bob, "POST", f"/join/{urllib.parse.quote(room)}", {})
    rig.routes = [Route(destinations=(rig.destination,), approvers=("matrix-power:50",))]
    await e2ee.start_bot()
    first, prompt1 = await rig.post("options", question=f"May I run {uuid.uuid4().hex}?")

    # Bob reacts as Element does (a reaction is plaintext even here): refused, encrypted.
    await rig.hs.react(bob, room, prompt1, ONE)

    def refusals(events: dict[str, Any]) -> list[Any]:
        return [n for n in from_bot(e2ee, events, RoomMessageNotice) if "approvers" in n.body]

    [told] = await alice.until(room, refusals, "the refusal, decrypted")
    assert told.decrypted
    assert told.body == f"{bob.user_id}: {NOT_AT_50}"
    assert told.source["content"]["m.mentions"] == {"user_ids": [bob.user_id]}
    print("Matrix HTML of the refusal (decrypted):", told.formatted_body)
    assert await rig.status(first) is Status.PENDING

    # Alice raises bob to 50 with her own client; his next approval counts.
    state = await alice.client.room_get_state_event(room, "m.room.power_levels")
    assert isinstance(state, RoomGetStateEventResponse), state
    content = dict(state.content)
    content["users"] = {**content.get("users", {}), bob.user_id: 50}
    put = await alice.client.room_put_state(room, "m.room.power_levels", content)
    assert isinstance(put, RoomPutStateResponse), put
    second, prompt2 = await rig.post("options", elicitationId="eli_2b3c4d5e6f708192")
    await rig.hs.react(bob, room, prompt2, ONE)
    assert (await rig.answered(second)).respondent == bob.key

    # Alice answers the first by an encrypted thread reply: her level as the room's creator.
    await say(e2ee, room, "m.room.message", thread_reply(prompt1, "1"))
    answer = await rig.answered(first)
    assert (answer.option_ids, answer.respondent) == (("allow_once",), rig.cast.alice.key)

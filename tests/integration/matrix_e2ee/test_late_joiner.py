"""A person who joins an encrypted room after a prompt was posted there reads the next prompt: the
bot's listener sees the join (nio drops the room's shared Megolm session on a membership change
and queries the newcomer's devices), so the next send starts a new session and shares it with
every member's devices, hers included. On the real Synapse, through the adapter rig
(tests/integration/matrix_e2ee/adapter_rig.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

from nio import JoinResponse, RoomInviteResponse, RoomMessageText

from tests.integration.matrix.rig import flag, until
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig, Reader
from tests.integration.matrix_e2ee.clients import _person
from tests.synapse import Synapse


async def test_a_person_who_joins_after_a_prompt_decrypts_the_next_one(
    e2ee: E2eeRig, synapse: Synapse, tmp_path: Path
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bot = await e2ee.start_bot()
    before = f"Which branch {uuid.uuid4().hex}?"
    _, first = await rig.post("free-text", question=before)
    await alice.until(rig.room, lambda ev: first in ev, "the first prompt")

    # Carol (an E2EE client of her own) is invited and joins after it.
    carol = Reader(await _person(synapse, "e2ee-carol", tmp_path / "carol"))
    try:
        invited = await alice.client.room_invite(rig.room, carol.person.user.user_id)
        assert isinstance(invited, RoomInviteResponse), invited
        joined = await carol.client.join(rig.room)
        assert isinstance(joined, JoinResponse), joined
        await carol.sync_once()
        room = bot.chat.client.rooms[rig.room]
        await until(flag(lambda: carol.person.user.user_id in room.users), "the bot seeing her")

        after = f"May I deploy {uuid.uuid4().hex}?"
        _, second = await rig.post("free-text", question=after, elicitationId="eli_late0joiner01")
        seen = await carol.until(rig.room, lambda ev: second in ev and ev, "the next prompt")
        prompt = seen[second]
        assert isinstance(prompt, RoomMessageText), type(prompt).__name__
        assert prompt.decrypted
        assert after in prompt.body
        # A new session, not the one the first prompt used (which she never received).
        both = await alice.until(rig.room, lambda ev: second in ev and ev, "both, for alice")
        assert both[first].session_id != both[second].session_id
    finally:
        await carol.client.close()

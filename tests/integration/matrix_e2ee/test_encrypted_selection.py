"""A multiple choice answered in an encrypted room, on the real Synapse (the rig:
tests/integration/matrix_e2ee/adapter_rig.py): alice's keycaps and ✅ sent as Element sends
them there (``m.room.encrypted``, the relation in the clear), read back by the bot from
``/relations`` and decrypted; a keycap taken back (redacted) is not chosen; a keycap the bot
cannot decrypt is unknown, not absent: ✅ submits nothing and says so, and its key is asked
for."""

from __future__ import annotations

import uuid

from nio import Api, RoomKeyRequest, RoomMessageNotice, RoomSendResponse

from adapters.matrix.e2ee.client import EncryptingClient
from adapters.matrix.intake.reactions import ACK_KEY
from adapters.matrix.intake.selection import cannot_read, selection_read
from bot.domain.model import AnswerMode, ElicitationKey, Option, Status
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import ONE, THREE, TWO
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig
from tests.integration.matrix_e2ee.test_adapter_e2ee import from_bot
from tests.integration.matrix_e2ee.test_e2ee import server_events
from tests.synapse import Synapse
from tests.unit.domain.builders import elicitation

TARGETS = (
    Option(id="linux", label="linux"),
    Option(id="macos", label="macos"),
    Option(id="windows", label="windows"),
)
MULTI = elicitation(answer_mode=AnswerMode.MULTI_CHOICE, options=TARGETS)


async def element_reaction(client: EncryptingClient, room_id: str, target: str, key: str) -> str:
    """A reaction as Element sends it in an encrypted room: ``m.room.encrypted``, its payload
    an ``m.reaction`` without the relation, which is in the clear (matrix-js-sdk moves
    ``m.relates_to`` out of what it encrypts); the event id."""
    assert client.olm is not None
    room = client.rooms[room_id]
    async with client.crypto_lock:
        if not room.members_synced:
            await client.joined_members(room_id)
        if client.should_query_keys:
            await client.keys_query()
        if client.olm.should_share_group_session(room_id):
            await client.share_group_session(room_id, ignore_unverified_devices=True)
        kind, content = client.encrypt(room_id, "m.reaction", {})
    content["m.relates_to"] = {"rel_type": "m.annotation", "event_id": target, "key": key}
    method, path, data = Api.room_send(
        client.access_token, room_id, kind, content, uuid.uuid4().hex
    )
    response = await client._send(RoomSendResponse, method, path, data, (room_id,))
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


async def multi_choice(e2ee: E2eeRig) -> tuple[ElicitationKey, str]:
    """A multiple choice of three targets posted (encrypted) and read by alice; (key, prompt)."""
    rig = e2ee.rig
    question = f"Which targets should release {uuid.uuid4().hex} build?"
    key = await rig.intake_elicitation(MULTI.model_copy(update={"question": question}))
    assert await rig.bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(key)
    assert isinstance(delivery.ref, MatrixRef), delivery
    prompt = delivery.ref.event_id
    await e2ee.alice.until(rig.room, lambda ev: prompt in ev, "the prompt")
    return key, prompt


async def test_encrypted_keycaps_and_check_mark_submit_the_two_options_not_one_taken_back(
    e2ee: E2eeRig, synapse: Synapse
) -> None:
    rig, alice = e2ee.rig, e2ee.alice.client
    await e2ee.start_bot()
    key, prompt = await multi_choice(e2ee)

    await element_reaction(alice, rig.room, prompt, ONE)
    two = await element_reaction(alice, rig.room, prompt, TWO)
    await element_reaction(alice, rig.room, prompt, THREE)
    await rig.hs.redact(rig.cast.alice, rig.room, two)  # taken back
    await element_reaction(alice, rig.room, prompt, ACK_KEY)
    answer = await rig.answered(key)

    assert (answer.option_ids, answer.respondent) == (("linux", "windows"), rig.cast.alice.key)
    stored = server_events(synapse, rig.room)
    sent = {e.type for e in stored.values() if e.sender == rig.cast.alice.user_id}
    assert "m.reaction" not in sent, "alice's reactions reached the server encrypted"
    assert "m.room.encrypted" in sent


async def test_a_keycap_the_bot_cannot_decrypt_is_unknown_not_absent(e2ee: E2eeRig) -> None:
    rig, reader, alice = e2ee.rig, e2ee.alice, e2ee.alice.client
    bot = await e2ee.start_bot()
    key, prompt = await multi_choice(e2ee)
    olm = alice.olm
    assert olm is not None

    await element_reaction(alice, rig.room, prompt, ONE)
    shared = olm.outbound_group_sessions[rig.room]
    # Keycap 3 in a session alice never shares (a lost room key), then back to the shared one.
    olm.create_outbound_group_session(rig.room)
    lost = olm.outbound_group_sessions[rig.room]
    lost.shared = True
    three = await element_reaction(alice, rig.room, prompt, THREE)
    olm.outbound_group_sessions[rig.room] = shared
    check = await element_reaction(alice, rig.room, prompt, ACK_KEY)

    [refusal] = await reader.until(
        rig.room,
        lambda ev: [e for e in from_bot(e2ee, ev, RoomMessageNotice) if "submitted" in e.body],
        "the bot saying it submitted nothing",
    )
    content = refusal.source["content"]
    print("\n--- what alice reads in the thread (decrypted m.notice) ---")  # the rendering
    print(content["body"])
    print(content.get("formatted_body", "(no HTML)"))
    assert refusal.body == f"{rig.cast.alice.user_id}: {cannot_read(1)}"
    assert refusal.source["content"]["m.mentions"] == {"user_ids": [rig.cast.alice.user_id]}
    assert await rig.status(key) is Status.PENDING, "keycap 1 alone is not what alice chose"
    await reader.sync_until(
        lambda: any(
            isinstance(e, RoomKeyRequest) and e.session_id == lost.id for e in reader.to_device
        ),
        "the key of keycap 3 asked for",
    )
    held = await bot.chat.annotations(rig.room, prompt)
    now = selection_read(MULTI, held, prompt, rig.cast.alice.user_id)
    assert (now.chosen, now.unreadable) == (("linux",), 1)

    # Alice takes keycap 3 back and reacts ✅ again (Element: off, then on): keycap 1 alone.
    await rig.hs.redact(rig.cast.alice, rig.room, three)
    await rig.hs.redact(rig.cast.alice, rig.room, check)
    await element_reaction(alice, rig.room, prompt, ACK_KEY)
    answer = await rig.answered(key)

    assert answer.option_ids == ("linux",)

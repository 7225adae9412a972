"""elicitbot's Matrix adapter in encrypted rooms and direct messages, on the real Synapse (the rig:
tests/integration/matrix_e2ee/adapter_rig.py): answers by reaction and thread reply decrypted
and every copy edited, encrypted, with nothing readable reaching the server; a bot killed
between post and answer that comes back from the database and still decrypts the answer; an
answer it cannot decrypt reported in its thread, not dropped; a direct-message destination whose
room is made once and found again after a restart."""

from __future__ import annotations

import uuid
from typing import Any

from nio import (
    DevicesResponse,
    ReactionEvent,
    RoomKeyRequest,
    RoomMessageNotice,
    RoomMessageText,
    RoomSendResponse,
)

from adapters.matrix.e2ee.cross_signing import Outcome
from adapters.matrix.intake.notices import UNREADABLE
from bot.domain.model import Status
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import ONE, THREE, TWO
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig
from tests.integration.matrix_e2ee.test_e2ee import (
    reaction,
    server_bytes,
    server_events,
    thread_reply,
)
from tests.synapse import Synapse


async def say(e2ee: E2eeRig, room_id: str, event_type: str, content: dict[str, Any]) -> str:
    """Alice sends as Element does: encrypted, except a reaction (plaintext)."""
    response = await e2ee.alice.client.room_send(
        room_id, event_type, content, ignore_unverified_devices=True
    )
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


def from_bot(e2ee: E2eeRig, events: dict[str, Any], kind: type[Any]) -> list[Any]:
    bot = e2ee.rig.cast.bot.user_id
    return [e for e in events.values() if isinstance(e, kind) and getattr(e, "sender", "") == bot]


def relation(event: Any) -> dict[str, Any]:
    relates = event.source.get("content", {}).get("m.relates_to", {})
    return relates if isinstance(relates, dict) else {}


def edits_of(e2ee: E2eeRig, events: dict[str, Any], prompt: str) -> list[Any]:
    """The bot's edits of ``prompt`` as alice decrypted them."""
    return [
        e
        for e in from_bot(e2ee, events, RoomMessageText)
        if e.decrypted
        and relation(e) == {"rel_type": "m.replace", "event_id": prompt}
        and "Answered by" in e.source["content"]["m.new_content"]["body"]
    ]


async def test_an_encrypted_room_answers_by_reaction_and_reply_with_every_copy_edited_encrypted(
    e2ee: E2eeRig, synapse: Synapse
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bot = await e2ee.start_bot()
    assert bot.chat.crypto is not None
    assert bot.chat.crypto.cross_signing is Outcome.SIGNED
    choice, text = f"May I run migration {uuid.uuid4().hex}?", f"Which branch {uuid.uuid4().hex}?"
    key1, prompt1 = await rig.post("options", question=choice)
    key2, prompt2 = await rig.post("free-text", question=text)

    seen = await alice.until(
        rig.room, lambda ev: prompt1 in ev and prompt2 in ev and ev, "the prompts"
    )
    assert isinstance(seen[prompt1], RoomMessageText)
    assert seen[prompt1].decrypted
    assert choice in seen[prompt1].body
    assert text in seen[prompt2].body
    seeds = await alice.until(
        rig.room,
        lambda ev: len(s := list(from_bot(e2ee, ev, ReactionEvent))) == 3 and s,
        "the seeded reactions",
    )
    assert sorted(e.key for e in seeds) == sorted([ONE, TWO, THREE])
    assert all(e.decrypted and e.reacts_to == prompt1 for e in seeds)

    # Element's reaction is plaintext even here; its thread reply is encrypted.
    await say(e2ee, rig.room, "m.reaction", reaction(prompt1, ONE))
    await say(e2ee, rig.room, "m.room.message", thread_reply(prompt2, "main"))
    first, second = await rig.answered(key1), await rig.answered(key2)
    assert (first.option_ids, first.respondent) == (("allow_once",), rig.cast.alice.key)
    assert (second.text, second.respondent) == ("main", rig.cast.alice.key)

    await bot.dispatcher.drain()
    await alice.until(
        rig.room,
        lambda ev: edits_of(e2ee, ev, prompt1) and edits_of(e2ee, ev, prompt2),
        "both prompts edited to their result",
    )
    notices = await alice.until(
        rig.room,
        lambda ev: len(n := list(from_bot(e2ee, ev, RoomMessageNotice))) >= 2 and n,
        "the confirmations",
    )
    assert all(n.decrypted and "Recorded" in n.body for n in notices)

    # The homeserver holds only encrypted events from the bot, and no byte of the questions.
    await bot.listener.drain()
    stored = server_events(synapse, rig.room)
    sent = {e.type for e in stored.values() if e.sender == bot.chat.user_id and e.state_key is None}
    assert sent == {"m.room.encrypted"}
    everything = server_bytes(synapse)
    assert choice.encode() not in everything
    assert text.encode() not in everything


async def test_a_bot_killed_between_post_and_answer_comes_back_from_the_database_and_decrypts(
    e2ee: E2eeRig,
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bot = await e2ee.start_bot()
    crypto = bot.chat.crypto
    assert crypto is not None
    assert crypto.client.olm is not None
    identity = crypto.client.olm.account.identity_keys
    question = f"Which branch {uuid.uuid4().hex}?"
    key, prompt = await rig.post("free-text", question=question)
    await alice.until(rig.room, lambda ev: prompt in ev, "the prompt")

    # kill -9: no last snapshot; what was saved after the last batch and send must do.
    async def not_ours() -> bool:
        return False

    crypto.fence = not_ours
    await bot.close()
    # Alice answers while the bot is down: her room key reaches its device by to-device.
    await say(e2ee, rig.room, "m.room.message", thread_reply(prompt, "develop"))

    again = await e2ee.start_bot()
    restored = again.chat.crypto
    assert restored is not None
    assert restored.client.olm is not None
    assert restored.client.olm.account.identity_keys == identity, "the same device"
    assert restored.cross_signing is Outcome.ALREADY
    answer = await rig.answered(key)
    assert answer.text == "develop"
    await again.dispatcher.drain()
    await alice.until(rig.room, lambda ev: edits_of(e2ee, ev, prompt), "the edit, encrypted")
    devices = await again.chat.client.devices()
    assert isinstance(devices, DevicesResponse)
    assert [d.id for d in devices.devices] == [rig.cast.bot.device_id]


async def test_an_answer_the_bot_cannot_decrypt_is_reported_in_its_thread(e2ee: E2eeRig) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    bot = await e2ee.start_bot()
    key, prompt = await rig.post("free-text", question=f"Which branch {uuid.uuid4().hex}?")
    await alice.until(rig.room, lambda ev: prompt in ev, "the prompt")

    # Alice's client encrypts with a session it never shares (a lost room key).
    olm = alice.client.olm
    assert olm is not None
    olm.create_outbound_group_session(rig.room)
    olm.outbound_group_sessions[rig.room].shared = True
    lost = await say(e2ee, rig.room, "m.room.message", thread_reply(prompt, "main"))

    asked = await alice.sync_until(
        lambda: [e for e in alice.to_device if isinstance(e, RoomKeyRequest)], "a key request"
    )
    assert {(e.sender, e.requesting_device_id, e.room_id) for e in asked} == {
        (rig.cast.bot.user_id, rig.cast.bot.device_id, rig.room)
    }
    [notice] = await alice.until(
        rig.room,
        lambda ev: [e for e in from_bot(e2ee, ev, RoomMessageNotice) if UNREADABLE in e.body],
        "the bot saying it could not read the answer",
    )
    assert notice.decrypted
    assert relation(notice)["event_id"] == prompt
    assert relation(notice)["m.in_reply_to"] == {"event_id": lost}
    assert notice.source["content"]["m.mentions"] == {"user_ids": [rig.cast.alice.user_id]}
    assert await rig.status(key) is Status.PENDING
    assert bot.listener.undecryptable is not None
    assert bot.listener.undecryptable.seen == 1


async def test_a_direct_message_destination_makes_its_room_once_and_finds_it_after_a_restart(
    e2ee: E2eeRig,
) -> None:
    rig, alice = e2ee.rig, e2ee.alice
    rig.room = rig.cast.alice.user_id  # the route's destination: matrix:@alice:localhost
    bot = await e2ee.start_bot()
    first = await rig.intake("options", question=f"May I run migration {uuid.uuid4().hex}?")
    assert await bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(first)
    assert isinstance(delivery.ref, MatrixRef)
    direct = delivery.ref.room_id
    assert direct.startswith("!")
    assert bot.chat.direct.created == 1

    # Alice accepts the invite and reads the prompt sent while she was invited.
    assert await alice.join_invites() == [direct]
    prompt = delivery.ref.event_id
    seen = await alice.until(direct, lambda ev: prompt in ev and ev, "the prompt in the DM")
    assert isinstance(seen[prompt], RoomMessageText)
    assert seen[prompt].decrypted
    await say(e2ee, direct, "m.reaction", reaction(prompt, ONE))
    assert (await rig.answered(first)).option_ids == ("allow_once",)
    await bot.dispatcher.drain()

    # Another process: the room comes back from m.direct, none is made.
    await bot.close()
    again = await e2ee.start_bot()
    second = await rig.intake("free-text", question=f"Which branch {uuid.uuid4().hex}?")
    assert await again.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(second)
    ref = delivery.ref
    assert isinstance(ref, MatrixRef)
    assert ref.room_id == direct
    assert again.chat.direct.created == 0
    await alice.until(direct, lambda ev: ref.event_id in ev, "the second prompt")

    bot_user = rig.cast.bot
    listed = await rig.hs.call(bot_user, "GET", f"/user/{bot_user.user_id}/account_data/m.direct")
    assert listed == {rig.cast.alice.user_id: [direct]}
    encryption = await rig.hs.call(bot_user, "GET", f"/rooms/{direct}/state/m.room.encryption")
    assert encryption["algorithm"] == "m.megolm.v1.aes-sha2"

"""End-to-end encryption mechanics on the real Synapse, for the Matrix adapter to build on
(docs/matrix-e2ee.md): an encrypted room in both directions with nothing readable reaching the
server, an undecryptable answer handed over (not dropped) and its key asked for; the bot's crypto
state snapshotted into the store, its process and files thrown away, restored on another
"replica" that still decrypts with the same device; cross-signing of the bot's own device."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import vodozemac
from nio import (
    DevicesResponse,
    MegolmEvent,
    ReactionEvent,
    RoomKeyRequest,
    RoomMessageText,
    RoomSendResponse,
    ToDeviceResponse,
)

from adapters.matrix.e2ee import state as crypto_state
from adapters.matrix.e2ee.client import EncryptingClient, send_event
from adapters.matrix.e2ee.cross_signing import (
    CrossSigningKeys,
    Outcome,
    cross_sign_device,
    owner_key,
    signable,
    signing_keys_upload,
)
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.integration.matrix_e2ee.conftest import (
    PICKLE_KEY,
    Pair,
    e2ee_client,
    sync,
    sync_until,
)
from tests.synapse import Synapse, http_json

ONE, TWO = "1\ufe0f\u20e3", "2\ufe0f\u20e3"


async def send(
    client: EncryptingClient, room_id: str, event_type: str, content: dict[str, Any]
) -> str:
    """nio's ``room_send`` (encrypts in an encrypted room, except ``m.reaction``); the event id."""
    response = await client.room_send(room_id, event_type, content, ignore_unverified_devices=True)
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


async def send_encrypted(
    client: EncryptingClient, room_id: str, event_type: str, content: dict[str, Any]
) -> str:
    """:func:`adapters.matrix.e2ee.client.send_event`: every type encrypted, reactions too."""
    response = await send_event(client, room_id, event_type, content, uuid.uuid4().hex)
    assert isinstance(response, RoomSendResponse), response
    return str(response.event_id)


def thread_reply(root: str, text: str) -> dict[str, Any]:
    return {
        "msgtype": "m.text",
        "body": text,
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        },
    }


def reaction(target: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}}


@dataclass(frozen=True)
class Stored:
    """One event as the homeserver's database holds it."""

    event_id: str
    type: str
    sender: str
    state_key: str | None
    json: str


def server_events(synapse: Synapse, room_id: str) -> dict[str, Stored]:
    """Every event the homeserver stored for the room (``events`` joined to ``event_json``)."""
    db = sqlite3.connect(f"file:{synapse.workdir / 'homeserver.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT e.event_id, e.type, e.sender, e.state_key, j.json FROM events e"
            " JOIN event_json j USING (event_id) WHERE e.room_id = ? ORDER BY e.stream_ordering",
            (room_id,),
        ).fetchall()
    finally:
        db.close()
    return {row[0]: Stored(*row) for row in rows}


def server_bytes(synapse: Synapse) -> bytes:
    """Everything in the homeserver's database files (the WAL too, where recent writes sit)."""
    return b"".join(p.read_bytes() for p in synapse.workdir.glob("homeserver.db*"))


def by_id(events: list[Any]) -> dict[str, Any]:
    return {e.event_id: e for e in events}


async def test_an_encrypted_room_both_ways_with_nothing_readable_on_the_server(
    synapse: Synapse, pair: Pair
) -> None:
    bot, alice, room = pair.bot.client, pair.alice.client, pair.room_id
    marker = f"ship the release {uuid.uuid4().hex}"
    question = await send_encrypted(
        bot, room, "m.room.message", {"msgtype": "m.text", "body": marker}
    )
    seeded = await send_encrypted(bot, room, "m.reaction", reaction(question, ONE))

    seen = by_id(await sync_until(alice, room, lambda e: question in by_id(e), "the question"))
    assert isinstance(seen[question], RoomMessageText)
    assert seen[question].decrypted
    assert seen[question].body == marker

    reply = await send(alice, room, "m.room.message", thread_reply(question, "2"))
    edit = await send(
        alice,
        room,
        "m.room.message",
        {
            "msgtype": "m.text",
            "body": "* 1",
            "m.new_content": {"msgtype": "m.text", "body": "1"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": reply},
        },
    )
    plain_reaction = await send(alice, room, "m.reaction", reaction(question, ONE))
    encrypted_reaction = await send_encrypted(alice, room, "m.reaction", reaction(question, TWO))

    wanted = {reply, edit, plain_reaction, encrypted_reaction}
    got = by_id(await sync_until(bot, room, lambda e: wanted <= set(by_id(e)), "alice's answers"))
    assert isinstance(got[reply], RoomMessageText)
    assert got[reply].decrypted
    assert got[reply].body == "2"
    assert got[reply].source["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert got[edit].decrypted
    assert got[edit].source["content"]["m.new_content"]["body"] == "1"
    assert got[edit].source["content"]["m.relates_to"] == {
        "rel_type": "m.replace",
        "event_id": reply,
    }
    # nio's room_send (like Element) leaves a reaction in plaintext; an encrypted one decrypts
    # to the same ReactionEvent.
    assert isinstance(got[plain_reaction], ReactionEvent)
    assert not got[plain_reaction].decrypted
    assert isinstance(got[encrypted_reaction], ReactionEvent)
    assert got[encrypted_reaction].decrypted
    assert (got[encrypted_reaction].key, got[encrypted_reaction].reacts_to) == (TWO, question)

    # What the homeserver holds: from the bot, encrypted events only (besides its join); the
    # relations in the clear, so the server can still thread and aggregate.
    stored = server_events(synapse, room)
    from_bot = {e.type for e in stored.values() if e.sender == bot.user_id and e.state_key is None}
    assert from_bot == {"m.room.encrypted"}
    assert {stored[i].type for i in (question, seeded, reply, edit)} == {"m.room.encrypted"}
    assert stored[plain_reaction].type == "m.reaction"
    cleartext = json.loads(stored[reply].json)["content"]
    assert set(cleartext) >= {"ciphertext", "m.relates_to"}
    assert cleartext["m.relates_to"]["rel_type"] == "m.thread"
    assert marker.encode() not in server_bytes(synapse)

    await _an_undecryptable_answer_is_handed_over_and_its_key_asked_for(pair, question)


async def _an_undecryptable_answer_is_handed_over_and_its_key_asked_for(
    pair: Pair, question: str
) -> None:
    """An answer encrypted with a session the bot never received (a lost key): nio hands it over
    as a MegolmEvent, not dropped. nio asks the sender's device for the key by itself only while
    its Olm session with that device is under an hour old (``check_if_wedged``); past that (made
    so here) asking is the bot's job, as it will be in production."""
    bot, alice, room = pair.bot.client, pair.alice.client, pair.room_id
    assert alice.olm is not None
    assert bot.olm is not None
    for session in bot.olm.session_store[alice.olm.account.identity_keys["curve25519"]]:
        session.creation_time -= timedelta(hours=2)
    alice.olm.create_outbound_group_session(room)
    alice.olm.outbound_group_sessions[room].shared = True  # ... but never sent to anyone
    lost = await send(alice, room, "m.room.message", thread_reply(question, "1"))
    undecrypted = by_id(await sync_until(bot, room, lambda e: lost in by_id(e), "the lost one"))
    event = undecrypted[lost]
    assert isinstance(event, MegolmEvent)
    assert (event.sender, event.device_id) == (alice.user_id, alice.device_id)
    assert event.source["content"]["m.relates_to"]["event_id"] == question
    request = event.as_key_request(event.sender, bot.device_id, None, event.device_id)
    assert isinstance(await bot.to_device(request), ToDeviceResponse)
    asked: list[RoomKeyRequest] = []
    for _ in range(20):
        received = (await sync(alice, timeout_ms=200)).to_device_events
        asked += [e for e in received if isinstance(e, RoomKeyRequest)]
        if asked:
            break
    assert [(e.sender, e.requesting_device_id, e.session_id, e.room_id) for e in asked] == [
        (bot.user_id, bot.device_id, event.session_id, room)
    ]


async def test_restored_crypto_state_decrypts_on_another_replica_with_the_same_device(
    synapse: Synapse, pair: Pair, sqlite_url: str, tmp_path: Path
) -> None:
    bot, alice, room = pair.bot, pair.alice.client, pair.room_id
    user_id, device_id = bot.user.user_id, bot.user.device_id
    assert bot.client.olm is not None
    identity = bot.client.olm.account.identity_keys
    before = await send(alice, room, "m.room.message", {"msgtype": "m.text", "body": "before"})
    await sync_until(bot.client, room, lambda e: before in by_id(e), "alice's first message")
    prompt = await send(bot.client, room, "m.room.message", {"msgtype": "m.text", "body": "Q?"})
    await sync_until(alice, room, lambda e: prompt in by_id(e), "the bot's prompt")

    # The lease holder, after handling its last batch: snapshot nio's store into the database.
    store = SqlStore.from_url(sqlite_url)
    clock = FakeClock()
    try:
        blob = crypto_state.snapshot(bot.store_dir, user_id, device_id)
        await store.save_crypto(crypto_state.owner_key(user_id, device_id), blob, clock.now())
        last_batch = bot.client.next_batch
        # kill -9: the process and everything on its disk are gone.
        await bot.client.close()
        shutil.rmtree(bot.store_dir)

        # Alice answers meanwhile, with the Megolm session the bot received before the snapshot.
        after = await send(alice, room, "m.room.message", thread_reply(prompt, "yes"))

        # Another replica takes the lease: restore into its own empty directory, then load.
        saved = await store.load_crypto(crypto_state.owner_key(user_id, device_id))
    finally:
        await store.close()
    assert saved == blob
    replica_dir = tmp_path / "replica-2"
    crypto_state.restore(saved, replica_dir, user_id, device_id)
    replica = e2ee_client(synapse, bot.user, replica_dir)
    try:
        assert replica.olm is not None
        assert replica.olm.account.identity_keys == identity, "the same Olm account"
        assert not replica.should_upload_keys, "its keys are on the server already"
        assert replica.loaded_sync_token == last_batch, "the token came with the state"
        got = by_id(await sync_until(replica, room, lambda e: after in by_id(e), "the answer"))
        assert isinstance(got[after], RoomMessageText)
        assert got[after].decrypted
        assert got[after].body == "yes"
        assert before not in got, "resumed from the restored token: nothing replayed"

        # It sends too: its Olm sessions came back, a new Megolm session goes out over them.
        second = await send(replica, room, "m.room.message", {"msgtype": "m.text", "body": "Q2?"})
        seen = by_id(await sync_until(alice, room, lambda e: second in by_id(e), "prompt 2"))
        assert isinstance(seen[second], RoomMessageText)
        assert seen[second].body == "Q2?"

        # No new device: the account has the one it had, with the same identity key.
        devices = await replica.devices()
        assert isinstance(devices, DevicesResponse)
        assert [d.id for d in devices.devices] == [device_id]
        assert alice.olm is not None
        assert alice.olm.device_store[user_id][device_id].ed25519 == identity["ed25519"]
    finally:
        await replica.close()


async def test_the_bot_cross_signs_its_own_device_with_an_access_token_alone(
    synapse: Synapse, pair: Pair, sqlite_store: SqlStore
) -> None:
    bot, alice = pair.bot, pair.alice
    user_id, device_id = bot.user.user_id, bot.user.device_id
    keys = CrossSigningKeys.generate()
    assert await cross_sign_device(bot.client, keys) is Outcome.SIGNED
    assert await cross_sign_device(bot.client, keys) is Outcome.ALREADY

    # What another user's client downloads: the master key, the self-signing key signed by it,
    # and the bot's device signed by the self-signing key (checked as a client would).
    query = http_json(
        f"{synapse.base_url}/_matrix/client/v3/keys/query",
        {"device_keys": {user_id: []}},
        token=alice.user.access_token,
    )
    master = keys.public_key("master")
    ssk = keys.public_key("self_signing")
    assert query["master_keys"][user_id]["keys"] == {f"ed25519:{master}": master}
    self_signing = query["self_signing_keys"][user_id]
    device = query["device_keys"][user_id][device_id]
    _verify(self_signing, user_id, master)
    _verify(device, user_id, ssk)
    # The master key signed by the device (as Element does) is shown to the owner only.
    own = http_json(
        f"{synapse.base_url}/_matrix/client/v3/keys/query",
        {"device_keys": {user_id: []}},
        token=bot.user.access_token,
    )
    _verify(own["master_keys"][user_id], user_id, device_id, device["keys"][f"ed25519:{device_id}"])

    # The private keys keep in the store sealed with the pickle key, and sign after a reload.
    store = sqlite_store
    await store.save_crypto(owner_key(user_id), keys.seal(PICKLE_KEY), FakeClock().now())
    sealed = await store.load_crypto(owner_key(user_id))
    assert sealed is not None
    assert CrossSigningKeys.unseal(sealed, PICKLE_KEY) == keys

    # Another key set cannot take over: replacing cross-signing keys needs the password.
    other = CrossSigningKeys.generate()
    assert await cross_sign_device(bot.client, other) is Outcome.HELD_BY_OTHER
    async with httpx.AsyncClient() as http:
        refused = await http.post(
            f"{synapse.base_url}/_matrix/client/v3/keys/device_signing/upload",
            json=signing_keys_upload(user_id, other),
            headers={"Authorization": f"Bearer {bot.user.access_token}"},
        )
    assert refused.status_code == httpx.codes.UNAUTHORIZED
    assert refused.json()["flows"] == [{"stages": ["m.login.password"]}]


def _verify(obj: dict[str, Any], user_id: str, key_id: str, public_key: str | None = None) -> None:
    """``obj`` carries a valid signature by ``ed25519:<key_id>`` (vodozemac, as a client checks);
    ``public_key`` defaults to the key id (a cross-signing key's id is its public key)."""
    public_key = public_key or key_id
    signature = obj["signatures"][user_id][f"ed25519:{key_id}"]
    vodozemac.Ed25519PublicKey.from_base64(public_key).verify_signature(
        signable(obj), vodozemac.Ed25519Signature.from_base64(signature)
    )

"""The bot's crypto snapshots are fenced on the Matrix lease in the store (issue 14): while its
lease lasts every snapshot is written; once another replica holds the lease, the next snapshot is
refused, the newer state its successor saved stays, and the bot stops encrypting (a send to the
encrypted room becomes a transient error the outbox retries). On the real Synapse, through the
adapter rig (tests/integration/matrix_e2ee/adapter_rig.py), the lease taken on the rig's clock."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from adapters.matrix import matrix_chat
from adapters.matrix.e2ee.state import owner_key
from bot.app.config import parse_config
from bot.app.wiring import Elicitbot
from tests.integration.matrix.rig import flag, until
from tests.integration.matrix_e2ee.adapter_rig import E2eeRig
from tests.integration.matrix_e2ee.clients import PICKLE_KEY

TTL = timedelta(seconds=30)


async def test_a_bot_that_lost_the_lease_keeps_its_successors_state_and_stops_encrypting(
    e2ee: E2eeRig,
) -> None:
    rig, alice, user = e2ee.rig, e2ee.alice, e2ee.rig.cast.bot
    lease, owner = f"matrix:{user.user_id}", owner_key(user.user_id, user.device_id)
    assert await rig.store.acquire_lease(lease, "bot-0", rig.clock.now(), TTL)
    scratch = e2ee.tmp_path / "fenced"
    scratch.mkdir()
    chat = matrix_chat(
        rig.hs.base_url,
        user.user_id,
        user.device_id,
        user.access_token,
        pickle_key=PICKLE_KEY,
        states=rig.store,
        clock=rig.clock,
        lease=(lease, "bot-0"),
        scratch=scratch,
    )
    bot = await rig.start_bot(chat=chat, key_wait=e2ee.key_wait)
    crypto = chat.crypto
    assert crypto is not None
    _, first = await rig.post("free-text", question=f"Which branch {uuid.uuid4().hex}?")
    await alice.until(rig.room, lambda ev: first in ev, "the first prompt")
    assert crypto.active
    assert crypto.saves >= 2, "saved under the lease"

    # bot-0 is paused past its lease; bot-1 takes it over and saves newer state.
    rig.clock.advance(TTL.total_seconds() + 1)
    assert await rig.store.acquire_lease(lease, "bot-1", rig.clock.now(), TTL)
    newer = b"bot-1's newer snapshot"
    assert await rig.store.save_crypto(owner, newer, rig.clock.now(), lease=(lease, "bot-1"))

    # bot-0 resumes: its next batch (alice's message) changes its state; the save is refused.
    saves = crypto.saves
    await alice.client.room_send(
        rig.room,
        "m.room.message",
        {"msgtype": "m.text", "body": "hi"},
        ignore_unverified_devices=True,
    )
    await until(flag(lambda: not crypto.active), "the refused snapshot stopping the state")
    assert crypto.saves == saves
    assert await rig.store.load_crypto(owner) == newer

    # Its next prompt is not sent: a transient error, retried by the outbox (on the new holder).
    key = await rig.intake("free-text", question="Not now?", elicitationId="eli_fenced00000001")
    await bot.dispatcher.run_once()
    [delivery] = await rig.store.deliveries(key)
    assert delivery.state != "posted", delivery
    assert delivery.ref is None
    await bot.close()
    assert await rig.store.load_crypto(owner) == newer, "no last snapshot either"


async def test_serve_fences_the_snapshots_on_the_lease_its_matrix_keeper_holds(
    tmp_path: Path,
) -> None:
    config = parse_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'e.db'}"},
            "matrix": {
                "homeserver": "http://127.0.0.1:9",
                "user_id": "@elicitbot:localhost",
                "device_id": "ELICITBOT",
                "pickle_key_env": "PICKLE",
            },
        }
    )
    bot = Elicitbot(config, environ={"MATRIX_ACCESS_TOKEN": "syt_x", "PICKLE": PICKLE_KEY})
    try:
        assert bot.matrix_chat is not None
        crypto = bot.matrix_chat.crypto
        assert crypto is not None
        assert crypto.lease == ("matrix:@elicitbot:localhost", bot.dispatcher.claimer)
    finally:
        assert bot.matrix_chat is not None
        await bot.matrix_chat.client.close()
        await bot.http_client.aclose()
        await bot.store.close()

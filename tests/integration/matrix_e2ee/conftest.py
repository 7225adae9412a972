"""The fixtures of the E2EE tests: ``pair`` (the prototype's raw nio bot and alice, in alice's
encrypted room) and ``e2ee`` (elicitbot's Matrix adapter with encryption on: adapter_rig.py).
The clients themselves are in clients.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nio import JoinResponse, RoomCreateResponse, RoomPreset

from tests.integration.matrix_e2ee.adapter_rig import e2ee
from tests.integration.matrix_e2ee.clients import (
    MEGOLM,
    PICKLE_KEY,
    Pair,
    Person,
    _person,
    e2ee_client,
    sync,
    sync_until,
)
from tests.synapse import Synapse

__all__ = ["PICKLE_KEY", "Pair", "Person", "e2ee", "e2ee_client", "pair", "sync", "sync_until"]


@pytest.fixture
async def pair(synapse: Synapse, tmp_path: Path) -> AsyncIterator[Pair]:
    """Alice makes a private encrypted room (as Element does by default) and invites the bot,
    which joins; both have synced the room, so each knows the other's devices."""
    synapse.start()
    bot = await _person(synapse, "e2ee-bot", tmp_path / "bot")
    alice = await _person(synapse, "e2ee-alice", tmp_path / "alice")
    try:
        created = await alice.client.room_create(
            preset=RoomPreset.private_chat,
            invite=[bot.user.user_id],
            initial_state=[
                {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}
            ],
        )
        assert isinstance(created, RoomCreateResponse), created
        joined = await bot.client.join(created.room_id)
        assert isinstance(joined, JoinResponse), joined
        for person in (alice, bot):
            await sync(person.client)
            assert person.client.rooms[created.room_id].encrypted
        yield Pair(bot, alice, created.room_id)
    finally:
        for person in (bot, alice):
            await person.client.close()

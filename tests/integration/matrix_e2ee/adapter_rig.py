"""The rig of the Matrix adapter's end-to-end encryption tests on the real Synapse: the Matrix
rig of tests/integration/matrix/rig.py (SqlStore + Service + Dispatcher + MatrixChat/Listener)
with encryption on (``adapters.matrix.matrix_chat`` with a pickle key), on fresh accounts per
test (so no device keys or cross-signing reach the accounts the plaintext tests share), and
alice as an E2EE client of her own (nio with encryption on, its own store) who reads and answers
in the encrypted room (Element's defaults: a private room with ``m.room.encryption``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from nio import InviteMemberEvent, JoinResponse, RoomCreateResponse, RoomPreset

from adapters.matrix import MatrixChat, matrix_chat
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.matrix.rig import Rig
from tests.integration.matrix_e2ee.clients import MEGOLM, PICKLE_KEY, Person, _person, sync
from tests.synapse import Cast, Homeserver, Synapse

KEY_WAIT = 0.5
"""Seconds the bot waits for a missing key in these tests (30 s in production)."""
WAIT = 15.0


@dataclass
class Reader:
    """Alice's E2EE client, syncing and keeping every timeline event it saw (decrypted where it
    could) by room and event id."""

    person: Person
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    to_device: list[Any] = field(default_factory=list)

    @property
    def client(self) -> Any:
        return self.person.client

    async def until(self, room_id: str, check: Callable[[dict[str, Any]], Any], what: str) -> Any:
        """Sync until ``check(events of the room by id)`` is truthy; returns its value."""
        deadline = time.monotonic() + WAIT
        while True:
            value = check(self.seen.setdefault(room_id, {}))
            if value:
                return value
            if time.monotonic() > deadline:
                kinds = [type(e).__name__ for e in self.seen.get(room_id, {}).values()]
                pytest.fail(f"timed out waiting for {what}; alice saw {kinds}")
            await self.sync_once()

    async def sync_once(self) -> Any:
        response = await sync(self.client, timeout_ms=200)
        self.to_device += response.to_device_events
        for joined_id, joined in response.rooms.join.items():
            room = self.seen.setdefault(joined_id, {})
            room.update({e.event_id: e for e in joined.timeline.events})
        return response

    async def sync_until(self, check: Callable[[], Any], what: str) -> Any:
        """Sync (without looking at rooms) until ``check()`` is truthy."""
        return await self.until("", lambda _: check(), what)

    async def join_invites(self) -> list[str]:
        """Join every room alice is invited to (as a person accepting a direct message)."""
        joined: list[str] = []
        deadline = time.monotonic() + WAIT
        while not joined:
            if time.monotonic() > deadline:
                pytest.fail("alice got no invite")
            response = await self.sync_once()
            for room_id, invite in response.rooms.invite.items():
                if any(isinstance(e, InviteMemberEvent) for e in invite.invite_state):
                    assert isinstance(await self.client.join(room_id), JoinResponse)
                    joined.append(room_id)
        await self.sync_once()
        return joined


@dataclass
class E2eeRig:
    rig: Rig
    alice: Reader
    tmp_path: Path
    key_wait: float = KEY_WAIT

    def chat(self) -> MatrixChat:
        """A new bot process's Matrix connection: encryption on, state in the store."""
        bot = self.rig.cast.bot
        scratch = self.tmp_path / f"bot-{len(self.rig.bots)}"
        scratch.mkdir()
        return matrix_chat(
            self.rig.hs.base_url,
            bot.user_id,
            bot.device_id,
            bot.access_token,
            pickle_key=PICKLE_KEY,
            states=self.rig.store,
            clock=self.rig.clock,
            scratch=scratch,
        )

    async def start_bot(self) -> Any:
        return await self.rig.start_bot(chat=self.chat(), key_wait=self.key_wait)


async def encrypted_room(alice: Person, invite: list[str]) -> str:
    """A private encrypted room made by alice (Element's defaults), ``invite`` invited."""
    created = await alice.client.room_create(
        preset=RoomPreset.private_chat,
        invite=invite,
        initial_state=[
            {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}
        ],
    )
    assert isinstance(created, RoomCreateResponse), created
    return str(created.room_id)


@pytest.fixture
async def e2ee(
    synapse: Synapse, homeserver: Homeserver, sqlite_url: str, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[E2eeRig]:
    """Fresh accounts; alice's encrypted room with the bot in it; no bot process yet (the test
    starts it, so it can choose the destination)."""
    alice = await _person(synapse, "e2ee-alice", tmp_path / "alice")
    cast = Cast(
        bot=synapse.register("e2ee-elicitbot"),
        alice=alice.user,
        bob=synapse.register("e2ee-bob"),
        agent=synapse.register("e2ee-agent"),
    )
    room = await encrypted_room(alice, [cast.bot.user_id])
    await homeserver.call(cast.bot, "POST", f"/join/{room}", {})
    await sync(alice.client)
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(homeserver, synapse, cast, room, store, clock, FakeSink(), sqlite_url)
    try:
        yield E2eeRig(rig, Reader(alice), tmp_path)
    finally:
        for bot in rig.bots:
            await bot.close()
        await store.close()
        await alice.client.close()

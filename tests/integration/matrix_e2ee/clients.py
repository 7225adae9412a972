"""E2EE clients on the real Synapse (tests/synapse.py's session server): a "bot" and "alice", each
a nio ``AsyncClient`` with encryption on and its own store directory, fresh accounts per test (so
no device keys reach the shared accounts of the other Matrix tests).

Each sync is followed by :func:`adapters.matrix.e2ee.client.housekeeping`, as elicitbot's own sync
loop must do (nio's ``sync_forever`` would).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nio import (
    AsyncClientConfig,
    ErrorResponse,
    KeysUploadResponse,
    SyncResponse,
)
from nio.store import SqliteStore

from adapters.matrix.e2ee.client import EncryptingClient, housekeeping, upload_keys
from tests.synapse import MatrixUser, Synapse

PICKLE_KEY = "test-pickle-key-0123456789abcdef"  # a throw-away test key, never a real one
MEGOLM = "m.megolm.v1.aes-sha2"
WAIT = 10.0


def e2ee_client(synapse: Synapse, user: MatrixUser, store_dir: Path) -> EncryptingClient:
    """An encrypting client on ``user``'s token and device; its store (one SQLite file, trust
    in it: ``SqliteStore``) in ``store_dir``, loaded by ``restore_login``."""
    config = AsyncClientConfig(
        store=SqliteStore,
        encryption_enabled=True,
        pickle_key=PICKLE_KEY,
        store_sync_tokens=True,
        max_limit_exceeded=0,
        max_timeouts=0,
    )
    store_dir.mkdir(parents=True, exist_ok=True)
    client = EncryptingClient(
        synapse.base_url,
        user.user_id,
        device_id=user.device_id,
        store_path=str(store_dir),
        config=config,
    )
    client.restore_login(user.user_id, user.device_id, user.access_token)
    assert client.olm is not None, "the e2e extra (vodozemac) is not installed"
    return client


async def sync(client: EncryptingClient, timeout_ms: int = 0) -> SyncResponse:
    response = await client.sync(timeout=timeout_ms)
    assert isinstance(response, SyncResponse), response
    failed = [r for r in await housekeeping(client) if isinstance(r, ErrorResponse)]
    assert not failed, failed
    return response


async def sync_until(
    client: EncryptingClient, room_id: str, check: Callable[[list[Any]], bool], what: str
) -> list[Any]:
    """Sync until the room's timeline events seen so far (as nio hands them: decrypted where it
    could) satisfy ``check``; returns them."""
    seen: list[Any] = []
    deadline = time.monotonic() + WAIT
    while not check(seen):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; saw {[type(e).__name__ for e in seen]}")
        response = await sync(client, timeout_ms=200)
        joined = response.rooms.join.get(room_id)
        if joined is not None:
            seen.extend(joined.timeline.events)
    return seen


@dataclass
class Person:
    user: MatrixUser
    client: EncryptingClient
    store_dir: Path


@dataclass
class Pair:
    bot: Person
    alice: Person
    room_id: str


async def _person(synapse: Synapse, prefix: str, store_dir: Path) -> Person:
    user = synapse.register(prefix)
    client = e2ee_client(synapse, user, store_dir)
    uploaded = await upload_keys(client)
    assert isinstance(uploaded, KeysUploadResponse), uploaded
    return Person(user, client, store_dir)

"""The CryptoStates port on every store (memory, SQLite, PostgreSQL): a Matrix device's crypto
snapshot comes back byte for byte, a save replaces it whole, and an unknown owner has none."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import select

from bot.domain.store import Store
from store.sql import SqlStore
from store.sql.crypto import CRYPTO
from tests.conftest import FakeClock

OWNER = "@elicitbot:example.org|ELICITBOT"
FIVE_MB = 5 * 1024 * 1024


async def test_a_saved_blob_loads_back_byte_for_byte(store: Store, clock: FakeClock) -> None:
    blob = bytes(range(256)) * 4  # every byte value, NUL included
    await store.save_crypto(OWNER, blob, clock.now())
    assert await store.load_crypto(OWNER) == blob


async def test_a_save_replaces_the_blob_whole(store: Store, clock: FakeClock) -> None:
    await store.save_crypto(OWNER, b"first snapshot, the longer one", clock.now())
    await store.save_crypto(OWNER, b"second", clock.advance(5))
    assert await store.load_crypto(OWNER) == b"second"


async def test_an_unknown_owner_has_no_blob(store: Store, clock: FakeClock) -> None:
    await store.save_crypto(OWNER, b"state", clock.now())
    assert await store.load_crypto("@elicitbot:example.org|OTHERDEVICE") is None
    assert await store.load_crypto("@someone:example.org|ELICITBOT") is None


async def test_a_five_megabyte_blob_round_trips(store: Store, clock: FakeClock) -> None:
    blob = os.urandom(FIVE_MB)  # incompressible, as pickled keys are
    await store.save_crypto(OWNER, blob, clock.now())
    assert await store.load_crypto(OWNER) == blob


@pytest.mark.sql_only
async def test_each_save_counts_and_stamps_the_row(store: Store, clock: FakeClock) -> None:
    assert isinstance(store, SqlStore)
    await store.save_crypto(OWNER, b"a", clock.now())
    later = clock.advance(30)
    await store.save_crypto(OWNER, b"b", later)
    await store.save_crypto(OWNER, b"c", later)
    with store.engine.connect() as conn:
        row = conn.execute(select(CRYPTO).where(CRYPTO.c.owner == OWNER)).one()
    assert (row.version, row.updated_at, bytes(row.blob)) == (3, later, b"c")

"""The CryptoStates port on SQLite and PostgreSQL: a Matrix device's crypto
snapshot comes back byte for byte, a save replaces it whole, an unknown owner has none, and a save
fenced on the Matrix lease is written only by its live holder: one whose lease ran out or was
taken is refused and leaves the newer blob."""

from __future__ import annotations

import os
from datetime import timedelta

from sqlalchemy import select

from bot.domain.store import Store
from store.sql import SqlStore
from store.sql.crypto import CRYPTO
from tests.conftest import FakeClock

OWNER = "@elicitbot:example.org|ELICITBOT"
FIVE_MB = 5 * 1024 * 1024
LEASE = "matrix:@elicitbot:example.org"
TTL = timedelta(seconds=10)


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


async def test_each_save_counts_and_stamps_the_row(store: Store, clock: FakeClock) -> None:
    assert isinstance(store, SqlStore)
    await store.save_crypto(OWNER, b"a", clock.now())
    later = clock.advance(30)
    await store.save_crypto(OWNER, b"b", later)
    await store.save_crypto(OWNER, b"c", later)
    with store.engine.connect() as conn:
        row = conn.execute(select(CRYPTO).where(CRYPTO.c.owner == OWNER)).one()
    assert (row.version, row.updated_at, bytes(row.blob)) == (3, later, b"c")


async def test_a_save_by_the_live_holder_is_written(store: Store, clock: FakeClock) -> None:
    assert await store.acquire_lease(LEASE, "a", clock.now(), TTL)
    assert await store.save_crypto(OWNER, b"first", clock.now(), lease=(LEASE, "a"))
    assert await store.acquire_lease(LEASE, "a", clock.advance(9), TTL)  # renewed
    assert await store.save_crypto(OWNER, b"second", clock.advance(9), lease=(LEASE, "a"))
    assert await store.load_crypto(OWNER) == b"second"


async def test_a_save_by_a_holder_whose_lease_was_taken_is_refused_and_keeps_the_newer_blob(
    store: Store, clock: FakeClock
) -> None:
    assert await store.acquire_lease(LEASE, "a", clock.now(), TTL)
    assert await store.save_crypto(OWNER, b"old", clock.now(), lease=(LEASE, "a"))
    # a pauses; its lease runs out and b takes over, restores and saves newer state.
    takeover = clock.advance(TTL.total_seconds() + 1)
    assert await store.acquire_lease(LEASE, "b", takeover, TTL)
    assert await store.save_crypto(OWNER, b"newer", takeover, lease=(LEASE, "b"))
    # a wakes up: its save is refused, whether it reads its own clock or a stale one.
    assert not await store.save_crypto(OWNER, b"stale", clock.advance(1), lease=(LEASE, "a"))
    assert not await store.save_crypto(OWNER, b"stale", takeover - TTL, lease=(LEASE, "a"))
    assert await store.load_crypto(OWNER) == b"newer"


async def test_a_save_by_a_holder_whose_lease_ran_out_is_refused(
    store: Store, clock: FakeClock
) -> None:
    start = clock.now()
    assert await store.acquire_lease(LEASE, "a", start, TTL)
    assert await store.save_crypto(OWNER, b"kept", start, lease=(LEASE, "a"))
    # Nobody took it yet, but it ran out (at its very end already: not ours to rely on).
    assert not await store.save_crypto(OWNER, b"late", start + TTL, lease=(LEASE, "a"))
    assert not await store.save_crypto(OWNER, b"late", clock.advance(60), lease=(LEASE, "a"))
    assert await store.load_crypto(OWNER) == b"kept"


async def test_a_fenced_save_without_the_lease_creates_nothing(
    store: Store, clock: FakeClock
) -> None:
    assert not await store.save_crypto(OWNER, b"never held", clock.now(), lease=(LEASE, "a"))
    assert await store.acquire_lease("poller:other", "a", clock.now(), TTL)
    assert not await store.save_crypto(OWNER, b"another lease", clock.now(), lease=(LEASE, "a"))
    assert await store.load_crypto(OWNER) is None
    await store.release_lease("poller:other", "a")
    assert await store.acquire_lease(LEASE, "a", clock.now(), TTL)
    await store.release_lease(LEASE, "a")  # an orderly stop gives it up at once
    assert not await store.save_crypto(OWNER, b"released", clock.now(), lease=(LEASE, "a"))
    assert await store.load_crypto(OWNER) is None


async def test_a_refused_save_leaves_the_row_untouched(store: Store, clock: FakeClock) -> None:
    assert isinstance(store, SqlStore)
    start = clock.now()
    assert await store.acquire_lease(LEASE, "a", start, TTL)
    assert await store.save_crypto(OWNER, b"a1", start, lease=(LEASE, "a"))
    assert await store.save_crypto(OWNER, b"a2", start, lease=(LEASE, "a"))
    assert await store.acquire_lease(LEASE, "b", clock.advance(11), TTL)
    assert not await store.save_crypto(OWNER, b"stale", clock.now(), lease=(LEASE, "a"))
    with store.engine.connect() as conn:
        row = conn.execute(select(CRYPTO).where(CRYPTO.c.owner == OWNER)).one()
    assert (row.version, row.updated_at, bytes(row.blob)) == (2, start, b"a2")

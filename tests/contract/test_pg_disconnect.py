"""A PostgreSQL connection the server ends (a restart, ``pg_terminate_backend``) costs the store
nothing once the server has said so: the pool drops it at checkout (``store.db``), with no ping
before each transaction."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from store.db import make_engine
from store.sql import SqlStore
from tests.conftest import PG_URL


def _pooled_pids(store: SqlStore, count: int) -> list[int]:
    """Open ``count`` pooled connections at once and return them to the pool: their backends."""
    raws = [store.engine.raw_connection() for _ in range(count)]
    try:
        return [raw.driver_connection.info.backend_pid for raw in raws]  # type: ignore[union-attr]
    finally:
        for raw in raws:
            raw.close()


def _terminate(pids: list[int]) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        for pid in pids:  # waits (up to 5 s) until the backend is gone
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def test_a_connection_killed_server_side_fails_no_store_call(pg_url: str) -> None:
    store = SqlStore(make_engine(pg_url, pool_size=3))
    try:
        await store.ping()
        pids = _pooled_pids(store, 3)
        _terminate(pids)
        # Every pooled connection is dead; the very next calls, at once, open new ones.
        await asyncio.gather(*(store.ping() for _ in range(3)))
        assert await store.count("elicitation") == 0
        assert not set(_pooled_pids(store, 3)) & set(pids)
    finally:
        await store.close()


async def test_a_connection_killed_in_use_fails_that_call_only(pg_url: str) -> None:
    """Killed while its transaction runs: that call fails (it cannot know what was written), and
    the next ones do not."""
    store = SqlStore(make_engine(pg_url, pool_size=2))

    def killed(conn: Connection) -> None:
        _terminate([conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()])
        conn.exec_driver_sql("SELECT 1")

    try:
        await store.ping()
        with pytest.raises(OperationalError) as failed:
            await store._run(killed, write=True)
        assert failed.value.connection_invalidated
        await asyncio.gather(store.ping(), store.ping())
        assert await store.count("elicitation") == 0
    finally:
        await store.close()

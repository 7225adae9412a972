"""The Alembic migrations build exactly the tables the code declares, on both databases, and N
replicas starting at once on an empty database all come up on the same schema."""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlmodel import SQLModel

import store.tables  # noqa: F401 - registers the tables
from bot.domain.policy import DEFAULT_POLICY
from store.db import MIGRATIONS, make_sync_engine, upgrade
from store.sql import SqlStore
from tests.conftest import PG_URL
from tests.contract.migrate_worker import start_replica

REPLICAS = 3


def test_migrations_match_the_tables(db_url: str) -> None:
    upgrade(db_url)  # a second run is a no-op
    engine = make_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    finally:
        engine.dispose()
    assert diff == []


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A fresh, empty schema (not migrated): what N replicas meet on their first start."""
    schema = f"m_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return str(request.getfixturevalue("empty_pg_url"))


def test_replicas_migrating_at_once_all_start_on_the_head_schema(empty_url: str) -> None:
    """Each replica process runs ``upgrade`` at start. Unlocked, the racers each try CREATE TABLE
    (PostgreSQL: duplicate ``pg_type`` / "relation already exists", in about half the runs
    here); under the lock one migrates and the others find the schema at head.

    Processes, not threads: Alembic keeps its migration context in module globals."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(REPLICAS)
    replicas = [
        ctx.Process(target=start_replica, args=(empty_url, barrier)) for _ in range(REPLICAS)
    ]
    for replica in replicas:
        replica.start()
    try:
        for replica in replicas:
            replica.join(timeout=120)
        assert [r.exitcode for r in replicas] == [0] * REPLICAS
    finally:
        for replica in replicas:
            if replica.is_alive():
                replica.kill()

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(cfg).get_current_head()
    engine = make_sync_engine(empty_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn)
            assert context.get_current_heads() == (head,)
            assert compare_metadata(context, SQLModel.metadata) == []
    finally:
        engine.dispose()


async def test_routes_made_from_chat_before_0008_read_back_with_the_defaults(
    empty_url: str,
) -> None:
    """0008 adds the chat routes' policy: a route stored at 0007 keeps working, with who may
    decide as it was (anyone but the asker)."""
    upgrade(empty_url, "0007")
    engine = make_sync_engine(empty_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO chat_route (workspace, board, destination, created_by, "
                    "created_at) VALUES ('acme', NULL, 'slack:C0OLD', 'slack:U0ADA', :at)"
                ),
                {"at": datetime(2026, 11, 1, tzinfo=UTC).replace(tzinfo=None)},
            )
    finally:
        engine.dispose()
    upgrade(empty_url)
    store = SqlStore.from_url(empty_url)
    try:
        [route] = await store.chat_routes()
        assert (route.destination, route.policy) == ("slack:C0OLD", DEFAULT_POLICY)
    finally:
        await store.close()

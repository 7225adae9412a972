"""Shared fixtures: databases (SQLite file and the machine's PostgreSQL, never skipped), clocks."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from store.db import upgrade
from store.sql import SqlStore
from tests.synapse import cast, homeserver, synapse

__all__ = ["cast", "homeserver", "synapse"]  # one session Synapse for every Matrix test

REPO = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("ELICITBOT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


class FakeClock:
    """Time under the test's control: aware UTC, moved by advance()."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or datetime(2026, 11, 10, 9, 30, tzinfo=UTC)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _pg_schema_url(schema: str) -> str:
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh schema in the machine's PostgreSQL, migrated; dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = _pg_schema_url(schema)
    upgrade(url)
    try:
        yield url
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head per session; each test gets a copy (a copy takes about
    1 ms, a migration about 40)."""
    path = tmp_path_factory.mktemp("template") / "elicitbot.db"
    upgrade(f"sqlite:///{path}")
    # The migration's last connection closed checkpoints the WAL: the file alone is the database.
    if path.with_name(f"{path.name}-wal").exists():
        raise RuntimeError(f"{path}: the migrated template left a WAL file; copying would lose it")
    return path


def fresh_sqlite_url(template: Path, path: Path) -> str:
    """A migrated SQLite database of its own at ``path``."""
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    return fresh_sqlite_url(sqlite_template, tmp_path / "elicitbot.db")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on SQLite and on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
async def sqlite_store(sqlite_url: str) -> AsyncIterator[SqlStore]:
    """A store on a fresh SQLite file, for a test that needs one but no engine in particular."""
    s = SqlStore.from_url(sqlite_url)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SqlStore]:
    s = SqlStore.from_url(db_url)
    try:
        yield s
    finally:
        await s.close()

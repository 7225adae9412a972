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


_PG_READY: list[str] = []
"""Migrated schemas a finished test emptied, for the next test: a migration costs 0.2-0.4 s of
PostgreSQL DDL, emptying its tables a few ms (380 tests take a PostgreSQL store)."""


def _pg_empty(schema: str) -> bool:
    """Empty every table of ``schema`` but Alembic's, as a fresh migration leaves it; False when a
    connection the test left behind still holds a lock."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> %s",
                (schema, "alembic_version"),
            )
        ]
        names = ", ".join(f'"{schema}"."{t}"' for t in tables)
        try:
            conn.execute("SET lock_timeout = '2s'")
            conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
        except psycopg.errors.LockNotAvailable:
            return False
    return True


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A migrated schema of its own in the machine's PostgreSQL, empty (fresh, or one an earlier
    test emptied); dropped at the end of the session, or at once if it cannot be emptied."""
    if _PG_READY:
        schema = _PG_READY.pop()
    else:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        upgrade(_pg_schema_url(schema))
    try:
        yield _pg_schema_url(schema)
    finally:
        if _pg_empty(schema):
            _PG_READY.append(schema)
        else:
            _pg_drop(schema)


def _pg_drop(schema: str) -> None:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pytest_sessionfinish(session: pytest.Session) -> None:
    while _PG_READY:
        _pg_drop(_PG_READY.pop())


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

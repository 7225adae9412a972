"""The store contract runs on every store: in memory, SQLite (file, WAL) and PostgreSQL.

A test that takes ``store`` alone runs three times (ids ``memory``, ``sqlite``, ``postgresql``).
A test that needs a real database keeps to SQL, on both engines, never skipped:
- it asks for ``db_url`` (its ``store`` then opens that database: a race, a second process),
  ``sqlite_url`` or ``pg_url`` (its ``store``, if any, opens that one);
- or it is marked ``@pytest.mark.sql_only`` (an SQL-specific check: column types, statements).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.domain.store import Store
from store.memory import MemoryStore
from store.sql import SqlStore

BACKENDS = ("memory", "sqlite", "postgresql")
SQL_BACKENDS = ("sqlite", "postgresql")
REAL_DATABASE = frozenset({"db_url", "sqlite_url", "pg_url"})
URL_FIXTURE = {"sqlite": "sqlite_url", "postgresql": "pg_url"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sql_only: an SQL-specific store check (runs on SQLite and PostgreSQL only)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" not in metafunc.fixturenames or REAL_DATABASE & set(metafunc.fixturenames):
        return
    sql_only = metafunc.definition.get_closest_marker("sql_only") is not None
    backends = SQL_BACKENDS if sql_only else BACKENDS
    metafunc.parametrize("store_backend", backends, indirect=True)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str | None:
    """The backend this test's ``store`` runs on (None: the database the test asked for)."""
    backend: str | None = getattr(request, "param", None)
    return backend


@pytest.fixture
async def store(request: pytest.FixtureRequest, store_backend: str | None) -> AsyncIterator[Store]:
    if store_backend == "memory":
        memory = MemoryStore()
        try:
            yield memory
        finally:
            await memory.close()
        return
    s = SqlStore.from_url(_url(request, store_backend))
    try:
        yield s
    finally:
        await s.close()


def _url(request: pytest.FixtureRequest, backend: str | None) -> str:
    if backend is not None:
        return str(request.getfixturevalue(URL_FIXTURE[backend]))
    asked = [name for name in ("db_url", "sqlite_url", "pg_url") if name in request.fixturenames]
    return str(request.getfixturevalue(asked[0]))

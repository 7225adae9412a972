"""The store contract runs on both engines: SQLite (file, WAL) and PostgreSQL, never skipped.

A test that takes ``store`` alone runs twice (ids ``sqlite``, ``postgresql``). A test that needs
the database itself asks for ``db_url`` (its ``store`` then opens that database: a race, a second
process), ``sqlite_url`` or ``pg_url`` (its ``store``, if any, opens that one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.domain.store import Store
from store.sql import SqlStore

BACKENDS = ("sqlite", "postgresql")
REAL_DATABASE = frozenset({"db_url", "sqlite_url", "pg_url"})
URL_FIXTURE = {"sqlite": "sqlite_url", "postgresql": "pg_url"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" not in metafunc.fixturenames or REAL_DATABASE & set(metafunc.fixturenames):
        return
    metafunc.parametrize("store_backend", BACKENDS, indirect=True)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str | None:
    """The backend this test's ``store`` runs on (None: the database the test asked for)."""
    backend: str | None = getattr(request, "param", None)
    return backend


@pytest.fixture
async def store(request: pytest.FixtureRequest, store_backend: str | None) -> AsyncIterator[Store]:
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

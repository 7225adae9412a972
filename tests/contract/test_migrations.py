"""The Alembic migrations build exactly the tables the code declares, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import store.tables  # noqa: F401 - registers the tables
from store.db import make_sync_engine, upgrade


def test_migrations_match_the_tables(db_url: str) -> None:
    upgrade(db_url)  # a second run is a no-op
    engine = make_sync_engine(db_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    finally:
        engine.dispose()
    assert diff == []

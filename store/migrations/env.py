"""Alembic environment: the connection comes from store.db.upgrade (or a URL for autogenerate)."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import store.tables  # noqa: F401  - registers the tables on SQLModel.metadata

target_metadata = SQLModel.metadata
connection = context.config.attributes.get("connection")

if connection is None:  # pragma: no cover - only for `alembic revision --autogenerate`
    from store.db import make_sync_engine

    url = context.config.get_main_option("sqlalchemy.url") or "sqlite:///autogen.db"
    with make_sync_engine(url).begin() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    context.run_migrations()

"""Engines for SQLite (embedded default, WAL) and PostgreSQL, and the Alembic upgrade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.pool import NullPool

from bot.domain.errors import ConfigError

MIGRATIONS = Path(__file__).with_name("migrations")
SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY = "elicitbot_read_only"
"""Execution option: this connection only reads (SQLite then begins with a plain BEGIN)."""


def normalise_url(url: str) -> URL:
    """The driver URL for a config ``store.url``: sqlite:///file or postgresql[+psycopg]://..."""
    try:
        parsed = make_url(url)
    except Exception as exc:
        raise ConfigError(f"store.url: {url!r} is not a database URL") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite")
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg")
    raise ConfigError(f"store.url: {backend!r} is not supported (use sqlite:/// or postgresql://)")


def _sqlite_setup(engine: Engine) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE for every transaction.

    pysqlite's legacy transaction control emits no BEGIN before a SELECT, so a read-check-write
    would run outside the write lock; we take transaction control ourselves.
    """

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL: a commit survives a process crash (kill -9); fsync at checkpoints.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # Reads take no write lock (WAL lets them run beside the writer); writes take it at once.
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def make_engine(url: str, *, pool_size: int = 8) -> Engine:
    """The store's engine. Work runs on worker threads, one transaction per hop (store.sql)."""
    sync_url = normalise_url(url)
    if sync_url.get_backend_name() == "sqlite":
        engine = create_engine(sync_url, poolclass=NullPool if _memory(sync_url) else None)
        _sqlite_setup(engine)
        return engine
    return create_engine(sync_url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


def make_sync_engine(url: str) -> Engine:
    """A short-lived engine for migrations."""
    sync_url = normalise_url(url)
    engine = create_engine(sync_url, poolclass=NullPool)
    if sync_url.get_backend_name() == "sqlite":
        _sqlite_setup(engine)
    return engine


def _memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:")


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the migrations up to ``revision`` (``elicitbot db upgrade``; ``serve`` does too)."""
    engine = make_sync_engine(url)
    try:
        with engine.begin() as connection:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()

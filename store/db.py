"""Engines for SQLite (embedded default, WAL) and PostgreSQL, and the Alembic upgrade."""

from __future__ import annotations

import json
import select
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import NullPool

from bot.domain.errors import ConfigError

MIGRATIONS = Path(__file__).with_name("migrations")
MIGRATION_LOCK = 0x656C6963  # "elic": the advisory lock every replica's upgrade takes first
SQLITE_BUSY_TIMEOUT_MS = 30_000
POOL_RECYCLE_S = 1800
"""A PostgreSQL connection is replaced after this long (see :func:`_postgres_setup`)."""
READ_ONLY = "elicitbot_read_only"
"""Execution option: this connection only reads (SQLite then begins with a plain BEGIN)."""


class RawJson(str):
    """Text that is JSON already (a pydantic ``model_dump_json``), bound to a JSON column as it is
    rather than dumped a second time."""

    __slots__ = ()


def json_dumps(value: Any) -> str:
    """The engines' JSON serialiser: :class:`RawJson` as it is, anything else ``json.dumps``."""
    return value if type(value) is RawJson else json.dumps(value)


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
        engine = create_engine(
            sync_url,
            poolclass=NullPool if _memory(sync_url) else None,
            json_serializer=json_dumps,
        )
        _sqlite_setup(engine)
        return engine
    engine = create_engine(
        sync_url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=POOL_RECYCLE_S,
        json_serializer=json_dumps,
    )
    _postgres_setup(engine)
    return engine


def _postgres_setup(engine: Engine) -> None:
    """A pooled connection the server has closed is dropped at checkout, without a round trip.

    ``pool_pre_ping`` would cost a ``SELECT 1`` per transaction. A server ending a connection sends
    a FATAL message and closes the socket, so a checkout polls the socket (no wait): readable (or
    closed to psycopg) means discard it. Nothing else arrives on an idle connection (the store never
    LISTENs). A connection lost silently fails its first transaction, after which SQLAlchemy marks
    the older connections stale; ``pool_recycle`` also retires each after half an hour."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if _hung_up(dbapi_connection):
            raise DisconnectionError("the server closed this connection")


def _hung_up(connection: Any) -> bool:
    """The server has closed (or is closing) this idle psycopg connection."""
    if connection.closed or connection.broken:
        return True
    try:
        readable, _, _ = select.select([connection.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


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
    """Apply the migrations up to ``revision`` (``elicitbot db upgrade``; ``serve`` does too).
    Replicas starting at once: on PostgreSQL each takes an advisory lock first, so one migrates and
    the others find the schema at head; SQLite serialises it."""
    engine = make_sync_engine(url)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()

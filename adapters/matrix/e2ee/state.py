"""The bot device's nio crypto store as one blob, so it survives restarts and moves between
replicas with the Matrix lease (docs/matrix-e2ee.md §6).

The blob holds the device's keys (encrypted with the pickle key, never stored): never log it.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import zipfile
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from bot.domain.errors import ConfigError, ElicitBotError

FORMAT = 1
MANIFEST = "manifest.json"
TRUST_SUFFIXES = (".trusted_devices", ".blacklisted_devices", ".ignored_devices")
"""nio ``DefaultStore``'s side files (``<user id>_<device id><suffix>``)."""
SIDE_FILES = ("-journal", "-wal", "-shm")
"""SQLite's files beside a database: stale ones must not meet a restored database."""
MIN_PICKLE_KEY = 16
BUSY_TIMEOUT = 10.0
"""Seconds a snapshot waits for a writer (nio's connection) to finish its transaction."""


class CryptoStateError(ElicitBotError):
    """A blob that is not a crypto snapshot, or one of another user or device."""


def owner_key(user_id: str, device_id: str) -> str:
    """The key the store files a device's snapshot under (``matrix_crypto.owner``)."""
    return f"{user_id}|{device_id}"


def database_name(user_id: str, device_id: str) -> str:
    """nio's file name for the store when ``AsyncClientConfig.store_name`` is not set."""
    return f"{user_id}_{device_id}.db"


def pickle_key_from_env(environ: Mapping[str, str], env: str) -> str:
    """The pickle key from the environment variable ``env`` (``matrix.pickle_key_env``)."""
    key = environ.get(env, "")
    if not key:
        raise ConfigError(f"matrix.pickle_key_env: environment variable {env} is not set")
    if len(key) < MIN_PICKLE_KEY:
        raise ConfigError(
            f"matrix.pickle_key_env: {env} is shorter than {MIN_PICKLE_KEY} characters "
            "(use a random one, e.g. `openssl rand -base64 32`)"
        )
    return key


def snapshot(store_dir: Path | str, user_id: str, device_id: str) -> bytes:
    """nio's store for (user, device) in ``store_dir`` as one blob; :class:`CryptoStateError`
    when there is no store file."""
    directory = Path(store_dir)
    db_name = database_name(user_id, device_id)
    path = directory / db_name
    if not path.is_file():
        raise CryptoStateError(f"no crypto store for {user_id} {device_id} in {directory}")
    image = _backup(path)
    buffer = io.BytesIO()
    files: list[str] = [db_name]
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as out:
        out.writestr(db_name, image)
        for suffix in TRUST_SUFFIXES:
            side = directory / f"{user_id}_{device_id}{suffix}"
            if side.is_file():
                out.writestr(side.name, side.read_bytes())
                files.append(side.name)
        manifest = {
            "format": FORMAT,
            "user_id": user_id,
            "device_id": device_id,
            "database": db_name,
            "files": files,
        }
        out.writestr(MANIFEST, json.dumps(manifest, sort_keys=True))
    return buffer.getvalue()


def restore(blob: bytes, store_dir: Path | str, user_id: str, device_id: str) -> Path:
    """Write a :func:`snapshot` of (user, device) into ``store_dir``, before nio opens its store,
    each file atomically replacing what was there; returns the database path."""
    manifest, contents = _unpack(blob, user_id, device_id)
    directory = Path(store_dir)
    directory.mkdir(parents=True, exist_ok=True)
    db_name = str(manifest["database"])
    target = directory / db_name
    _check_database(contents[db_name])
    for suffix in SIDE_FILES:
        (directory / f"{db_name}{suffix}").unlink(missing_ok=True)
    _write_atomically(target, contents[db_name])
    for suffix in TRUST_SUFFIXES:
        side = f"{user_id}_{device_id}{suffix}"
        if side in contents:
            _write_atomically(directory / side, contents[side])
        else:
            (directory / side).unlink(missing_ok=True)
    return target


def changes(client: Any) -> int:
    """How many rows nio's store connection has changed since it opened (0: no store loaded).
    Call it on the event loop's thread: peewee keeps one connection per thread."""
    store = getattr(client, "store", None)
    database = getattr(store, "database", None)
    return 0 if database is None else int(database.connection().total_changes)


def _backup(path: Path) -> bytes:
    """A consistent image of the database at ``path`` through SQLite's backup API."""
    with (
        closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT)) as source,
        closing(sqlite3.connect(":memory:")) as copy,
    ):
        source.backup(copy)
        return copy.serialize()


def _check_database(image: bytes) -> None:
    """Refuse an image SQLite cannot open or finds damaged, before it replaces anything."""
    connection = sqlite3.connect(":memory:")
    try:
        connection.deserialize(image)
        (verdict,) = connection.execute("PRAGMA quick_check").fetchone()
    except sqlite3.DatabaseError as exc:
        raise CryptoStateError(f"the crypto snapshot's database is unreadable: {exc}") from exc
    finally:
        connection.close()
    if verdict != "ok":
        raise CryptoStateError(f"the crypto snapshot's database is damaged: {verdict}")


def _unpack(blob: bytes, user_id: str, device_id: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as archive:
            manifest = json.loads(archive.read(MANIFEST))
            contents = {name: archive.read(name) for name in manifest["files"]}
    except (zipfile.BadZipFile, KeyError, ValueError, TypeError) as exc:
        raise CryptoStateError("not a crypto snapshot") from exc
    if manifest.get("format") != FORMAT:
        raise CryptoStateError(f"crypto snapshot format {manifest.get('format')!r} unknown")
    if (manifest.get("user_id"), manifest.get("device_id")) != (user_id, device_id):
        raise CryptoStateError(
            f"the crypto snapshot is {manifest.get('user_id')} {manifest.get('device_id')}'s, "
            f"not {user_id} {device_id}'s"
        )
    db_name = manifest.get("database")
    plain_name = isinstance(db_name, str) and Path(db_name).name == db_name and db_name[:1] != "."
    allowed = {db_name, *(f"{user_id}_{device_id}{suffix}" for suffix in TRUST_SUFFIXES)}
    if not plain_name or db_name not in contents or not set(contents) <= allowed:
        raise CryptoStateError("the crypto snapshot names unexpected files")
    return manifest, contents


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f"{path.name}.restoring")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)

"""The crypto-state blob (adapters/matrix/e2ee/state.py) and the cross-signing bodies
(adapters/matrix/e2ee/cross_signing.py), without a homeserver: nio's real store on disk, vodozemac
checking every signature as a client would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vodozemac
from nio import AsyncClient, AsyncClientConfig
from nio.store import DefaultStore, SqliteStore

from adapters.matrix.e2ee import state as crypto_state
from adapters.matrix.e2ee.cross_signing import (
    CrossSigningError,
    CrossSigningKeys,
    signable,
    signatures_upload,
    signing_keys_upload,
)
from bot.domain.errors import ConfigError

USER, DEVICE = "@elicitbot:example.org", "ELICITBOT"
PICKLE_KEY = "unit-test-pickle-key-0123456789"


@pytest.fixture
def opened() -> Iterator[list[AsyncClient]]:
    clients: list[AsyncClient] = []
    yield clients
    for client in clients:
        if client.store is not None:
            client.store.database.close()


def load(opened: list[AsyncClient], store_dir: Path, store: type[Any] = SqliteStore) -> AsyncClient:
    """A client whose store (made on first use: a new Olm account) lives in ``store_dir``."""
    config = AsyncClientConfig(store=store, encryption_enabled=True, pickle_key=PICKLE_KEY)
    store_dir.mkdir(parents=True, exist_ok=True)
    client = AsyncClient("http://127.0.0.1:9", USER, DEVICE, str(store_dir), config=config)
    client.restore_login(USER, DEVICE, "not-a-token")
    opened.append(client)
    return client


def test_a_restored_snapshot_is_the_same_account(opened: list[AsyncClient], tmp_path: Path) -> None:
    first = load(opened, tmp_path / "a")
    assert first.olm is not None
    before = crypto_state.changes(first)
    first.olm.save_account()
    assert crypto_state.changes(first) > before, "nio's writes are counted"
    blob = crypto_state.snapshot(tmp_path / "a", USER, DEVICE)

    crypto_state.restore(blob, tmp_path / "b", USER, DEVICE)
    second = load(opened, tmp_path / "b")
    assert second.olm is not None
    assert second.olm.account.identity_keys == first.olm.account.identity_keys


def test_a_blob_of_another_device_or_no_blob_at_all_is_refused(
    opened: list[AsyncClient], tmp_path: Path
) -> None:
    load(opened, tmp_path / "a")
    blob = crypto_state.snapshot(tmp_path / "a", USER, DEVICE)
    target = tmp_path / "b"
    with pytest.raises(crypto_state.CryptoStateError, match="not @elicitbot"):
        crypto_state.restore(blob, target, USER, "OTHERDEVICE")
    with pytest.raises(crypto_state.CryptoStateError, match="not a crypto snapshot"):
        crypto_state.restore(b"PK\x03\x04 garbage", target, USER, DEVICE)
    assert not target.exists() or not any(target.iterdir()), "nothing written"
    with pytest.raises(crypto_state.CryptoStateError, match="no crypto store"):
        crypto_state.snapshot(tmp_path / "empty", USER, DEVICE)


def test_restore_replaces_the_directory_state_and_drops_a_stale_journal(
    opened: list[AsyncClient], tmp_path: Path
) -> None:
    load(opened, tmp_path / "a", DefaultStore)
    trusted = f"{USER}_{DEVICE}.trusted_devices"
    (tmp_path / "a" / trusted).write_text("@alice:example.org ALICE ed25519 AAAA\n")
    blob = crypto_state.snapshot(tmp_path / "a", USER, DEVICE)

    target = tmp_path / "b"
    target.mkdir()
    db = crypto_state.database_name(USER, DEVICE)
    (target / db).write_bytes(b"an older copy")
    (target / f"{db}-journal").write_bytes(b"a hot journal of a killed process")
    (target / f"{USER}_{DEVICE}.ignored_devices").write_text("stale\n")
    assert crypto_state.restore(blob, target, USER, DEVICE) == target / db
    assert sorted(p.name for p in target.iterdir()) == sorted([db, trusted])
    assert (target / trusted).read_text() == "@alice:example.org ALICE ed25519 AAAA\n"
    assert load(opened, target, DefaultStore).olm is not None


def test_the_pickle_key_comes_from_its_environment_variable() -> None:
    assert crypto_state.pickle_key_from_env({"K": PICKLE_KEY}, "K") == PICKLE_KEY
    with pytest.raises(ConfigError, match=r"matrix\.pickle_key_env: environment variable K"):
        crypto_state.pickle_key_from_env({}, "K")
    with pytest.raises(ConfigError, match="shorter than"):
        crypto_state.pickle_key_from_env({"K": "changeme"}, "K")


def test_sealed_cross_signing_keys_open_only_with_their_pickle_key() -> None:
    keys = CrossSigningKeys.generate()
    sealed = keys.seal(PICKLE_KEY)
    assert CrossSigningKeys.unseal(sealed, PICKLE_KEY) == keys
    assert keys.master not in sealed
    assert keys.master.hex() not in repr(keys)
    with pytest.raises(CrossSigningError, match="wrong pickle key"):
        CrossSigningKeys.unseal(sealed, "another-pickle-key-0123456789")
    with pytest.raises(CrossSigningError, match="wrong pickle key"):
        CrossSigningKeys.unseal(sealed[:-1] + bytes([sealed[-1] ^ 1]), PICKLE_KEY)


def test_the_upload_bodies_carry_signatures_a_client_accepts() -> None:
    keys = CrossSigningKeys.generate()
    device = vodozemac.Account()
    device_keys = {
        "user_id": USER,
        "device_id": DEVICE,
        "algorithms": ["m.olm.v1.curve25519-aes-sha2", "m.megolm.v1.aes-sha2"],
        "keys": {
            f"curve25519:{DEVICE}": device.curve25519_key.to_base64(),
            f"ed25519:{DEVICE}": device.ed25519_key.to_base64(),
        },
        "unsigned": {"device_display_name": "elicitbot"},
    }
    master, ssk = keys.public_key("master"), keys.public_key("self_signing")

    body = signing_keys_upload(USER, keys)
    assert body["master_key"] == {
        "user_id": USER,
        "usage": ["master"],
        "keys": {f"ed25519:{master}": master},
    }
    _verify(body["self_signing_key"], master, master)
    _verify(body["user_signing_key"], master, master)

    signed = signatures_upload(USER, device_keys, keys, lambda m: device.sign(m).to_base64())[USER]
    _verify(signed[DEVICE], ssk, ssk)
    assert "unsigned" not in signed[DEVICE]
    _verify(signed[master], DEVICE, device.ed25519_key.to_base64())


def _verify(obj: dict[str, Any], key_id: str, public_key: str) -> None:
    signature = obj["signatures"][USER][f"ed25519:{key_id}"]
    vodozemac.Ed25519PublicKey.from_base64(public_key).verify_signature(
        signable(obj), vodozemac.Ed25519Signature.from_base64(signature)
    )

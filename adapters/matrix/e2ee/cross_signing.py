"""Cross-signing of the bot's own device, which matrix-nio does not do (docs/matrix-e2ee.md §7).

Ed25519 keys from pycryptodome (vodozemac signs only with an Olm account's identity key); the first
upload on an account needs no user-interactive auth (MSC3967). :meth:`CrossSigningKeys.seal` keeps
the private keys for the store, under :func:`owner_key` (per user, so they outlive a device).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from Crypto.Cipher import AES
from Crypto.Hash import SHA256
from Crypto.Protocol.KDF import HKDF
from Crypto.PublicKey import ECC
from Crypto.Random import get_random_bytes
from Crypto.Signature import eddsa
from unpaddedbase64 import decode_base64, encode_base64

from adapters.matrix.api.client import send_json
from bot.domain.errors import ElicitBotError

USAGES = ("master", "self_signing", "user_signing")
SEALED_MAGIC = b"ebxs1"
"""Sealed keys: magic, 12-byte nonce, 16-byte GCM tag, ciphertext."""
_NONCE = 12
_TAG = 16
_KDF_CONTEXT = b"elicitbot cross-signing keys v1"
HTTP_OK = 200
HTTP_UNAUTHORIZED = 401


class CrossSigningError(ElicitBotError):
    """The homeserver refused a cross-signing request, or sealed keys would not open."""


class Outcome(StrEnum):
    SIGNED = "signed"
    """Cross-signing set up now (first upload) and the device signed."""
    DEVICE_SIGNED = "device_signed"
    """Our keys were on the server already; the device's signature added now."""
    ALREADY = "already"
    """Our keys and the device's signature were all on the server: nothing sent."""
    HELD_BY_OTHER = "held_by_other"
    """The account has another master key (set up by another client, e.g. Element with the bot's
    password): replacing it needs user-interactive auth, so nothing was changed."""
    NEEDS_AUTH = "needs_auth"
    """The homeserver wants user-interactive auth even for the first upload."""


def owner_key(user_id: str) -> str:
    """The store key of the sealed cross-signing keys (per user, not per device)."""
    return f"{user_id}|cross-signing"


@dataclass(frozen=True, repr=False)
class CrossSigningKeys:
    """The three Ed25519 private keys (32-byte seeds). Never log them; repr hides them."""

    master: bytes
    self_signing: bytes
    user_signing: bytes

    def __repr__(self) -> str:
        return f"CrossSigningKeys(master={self.public_key('master')}, …)"

    @classmethod
    def generate(cls) -> CrossSigningKeys:
        return cls(*(ECC.generate(curve="Ed25519").seed for _ in USAGES))

    def _key(self, usage: str) -> Any:
        return ECC.construct(curve="Ed25519", seed=getattr(self, usage))

    def public_key(self, usage: str) -> str:
        """The unpadded base64 public key (also its key id after ``ed25519:``)."""
        return str(encode_base64(self._key(usage).public_key().export_key(format="raw")))

    def sign(self, usage: str, obj: Mapping[str, Any]) -> str:
        return str(encode_base64(eddsa.new(self._key(usage), "rfc8032").sign(signable(obj))))

    def seal(self, pickle_key: str) -> bytes:
        nonce = get_random_bytes(_NONCE)
        cipher = AES.new(_derive(pickle_key), AES.MODE_GCM, nonce=nonce)
        payload = json.dumps({u: encode_base64(getattr(self, u)) for u in USAGES}).encode()
        ciphertext, tag = cipher.encrypt_and_digest(payload)
        return SEALED_MAGIC + nonce + tag + ciphertext

    @classmethod
    def unseal(cls, blob: bytes, pickle_key: str) -> CrossSigningKeys:
        if not blob.startswith(SEALED_MAGIC):
            raise CrossSigningError("not sealed cross-signing keys")
        body = blob[len(SEALED_MAGIC) :]
        nonce, tag, ciphertext = body[:_NONCE], body[_NONCE : _NONCE + _TAG], body[_NONCE + _TAG :]
        cipher = AES.new(_derive(pickle_key), AES.MODE_GCM, nonce=nonce)
        try:
            payload = json.loads(cipher.decrypt_and_verify(ciphertext, tag))
        except ValueError as exc:
            raise CrossSigningError(
                "sealed cross-signing keys: wrong pickle key or damaged"
            ) from exc
        return cls(*(decode_base64(payload[u]) for u in USAGES))


def signable(obj: Mapping[str, Any]) -> bytes:
    """The spec's signed-JSON bytes: canonical JSON without ``signatures`` and ``unsigned``."""
    body = {k: v for k, v in obj.items() if k not in ("signatures", "unsigned")}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def key_object(user_id: str, keys: CrossSigningKeys, usage: str) -> dict[str, Any]:
    """One cross-signing key as uploaded; the self- and user-signing keys signed by the master."""
    public = keys.public_key(usage)
    obj: dict[str, Any] = {
        "user_id": user_id,
        "usage": [usage],
        "keys": {f"ed25519:{public}": public},
    }
    if usage != "master":
        master_id = f"ed25519:{keys.public_key('master')}"
        obj["signatures"] = {user_id: {master_id: keys.sign("master", obj)}}
    return obj


def signing_keys_upload(user_id: str, keys: CrossSigningKeys) -> dict[str, Any]:
    """The body of ``POST /keys/device_signing/upload``."""
    return {f"{usage}_key": key_object(user_id, keys, usage) for usage in USAGES}


def signatures_upload(
    user_id: str,
    device_keys: Mapping[str, Any],
    keys: CrossSigningKeys,
    sign_as_device: Callable[[bytes], str],
) -> dict[str, Any]:
    """The body of ``POST /keys/signatures/upload``: the device (its keys as the server holds
    them) signed by the self-signing key, and the master key signed by the device."""
    device_id = str(device_keys["device_id"])
    device = {k: v for k, v in device_keys.items() if k not in ("signatures", "unsigned")}
    ssk_id = f"ed25519:{keys.public_key('self_signing')}"
    device["signatures"] = {user_id: {ssk_id: keys.sign("self_signing", device)}}
    master = key_object(user_id, keys, "master")
    master["signatures"] = {user_id: {f"ed25519:{device_id}": sign_as_device(signable(master))}}
    return {user_id: {device_id: device, keys.public_key("master"): master}}


def device_signed_by(device_keys: Mapping[str, Any], user_id: str, keys: CrossSigningKeys) -> bool:
    """Whether the server's copy of the device keys carries our self-signing key's signature."""
    ssk_id = f"ed25519:{keys.public_key('self_signing')}"
    return ssk_id in device_keys.get("signatures", {}).get(user_id, {})


def master_of(query: Mapping[str, Any], user_id: str) -> str | None:
    """The public master key a ``/keys/query`` answer holds for ``user_id`` (None: not set up)."""
    found = query.get("master_keys", {}).get(user_id)
    if not found:
        return None
    values = list(found.get("keys", {}).values())
    return str(values[0]) if values else None


async def cross_sign_device(client: Any, keys: CrossSigningKeys) -> Outcome:
    """Make ``client``'s device (its keys uploaded already) verified by its owner with ``keys``."""
    user_id, device_id = client.user_id, client.device_id
    query = await _call(client, "POST", "/keys/query", {"device_keys": {user_id: [device_id]}})
    device_keys = query.get("device_keys", {}).get(user_id, {}).get(device_id)
    if not device_keys:
        raise CrossSigningError(f"device {device_id} has no keys on the server: upload them first")
    ours = keys.public_key("master")
    on_server = master_of(query, user_id)
    outcome = Outcome.DEVICE_SIGNED
    if on_server is None:
        status, reply = await send_json(
            client, "POST", "/keys/device_signing/upload", signing_keys_upload(user_id, keys)
        )
        if status == HTTP_UNAUTHORIZED:
            return Outcome.NEEDS_AUTH
        _check(status, reply, "device_signing/upload")
        outcome = Outcome.SIGNED
    elif on_server != ours:
        return Outcome.HELD_BY_OTHER
    elif device_signed_by(device_keys, user_id, keys):
        return Outcome.ALREADY

    def sign_as_device(message: bytes) -> str:
        return str(client.olm.account.sign(message.decode()))

    body = signatures_upload(user_id, device_keys, keys, sign_as_device)
    reply = await _call(client, "POST", "/keys/signatures/upload", body)
    if reply.get("failures"):
        raise CrossSigningError(f"keys/signatures/upload refused: {reply['failures']}")
    return outcome


def _derive(pickle_key: str) -> bytes:
    key: bytes = HKDF(pickle_key.encode(), 32, b"", SHA256, context=_KDF_CONTEXT)
    return key


async def _call(client: Any, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    status, reply = await send_json(client, method, path, body)
    _check(status, reply, path)
    return reply


def _check(status: int, reply: Mapping[str, Any], what: str) -> None:
    if status != HTTP_OK:
        raise CrossSigningError(f"{what}: HTTP {status} {reply.get('errcode', '')}".rstrip())

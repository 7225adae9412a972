"""matrix-nio's end-to-end encryption made safe for elicitbot's own sync loop and concurrent sends.

nio (``matrix-nio[e2e]``, vodozemac) does Olm/Megolm itself: ``room_send`` to an encrypted room
fetches the members' device lists, claims one-time keys, shares a Megolm session over Olm and
encrypts; ``sync`` decrypts what it can. Three things it leaves to the caller:

- **A lock between handling a sync and sharing/encrypting** (:class:`EncryptingClient`). A
  membership change handled in a sync drops the room's outbound Megolm session. Sends running at
  that moment fail: one waiting for another's share then encrypts with a fresh, unshared session
  (``GroupEncryptionError``), the sharer itself finds its session gone (``KeyError``). Reproduced
  on Synapse: 15 of 90 concurrent sends failed across 6 joins; with the lock, none of 180.
  Handling a sync response and the share-and-encrypt step therefore take one lock; the HTTP of
  the long poll and of the event PUT stay outside it, so sends still go out concurrently.
- **The chores after each sync** (:func:`housekeeping`): upload one-time keys when the server
  runs low, query changed device lists, claim keys for wedged Olm sessions, send queued to-device
  messages (key requests, dummies). nio's ``sync_forever`` does them; a loop of one's own must, or a
  late joiner's devices are never fetched and never get the room key.
- **Write-ahead key upload** (:func:`upload_keys`): nio makes new one-time keys and uploads them in
  one call, saving the account after the server answered. A snapshot restored from before that
  makes the same key ids again with other keys, and the server refuses every later upload ("One
  time key … already exists", reproduced on Synapse): the device can no longer be reached by new
  Olm sessions. Here the account with the new keys is saved and persisted (the caller's
  ``persist``, e.g. a crypto snapshot into the store) before the upload is sent, so a restored
  state re-sends the very same keys, which the server accepts.

:func:`send_event` sends any event: encrypted in an encrypted room (reactions too, which
``room_send`` never encrypts), plaintext elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from nio import (
    AsyncClient,
    ErrorResponse,
    KeysUploadResponse,
    RoomSendResponse,
    SyncResponse,
)
from nio.api import Api

Persist = Callable[[], Awaitable[None]]


class EncryptingClient(AsyncClient):  # type: ignore[misc] # nio ships no type hints
    """nio's ``AsyncClient`` whose sync responses are handled under :attr:`crypto_lock`, the
    lock :func:`send_event` shares and encrypts under."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crypto_lock = asyncio.Lock()

    async def receive_response(self, response: Any) -> None:
        if isinstance(response, SyncResponse):
            async with self.crypto_lock:
                await super().receive_response(response)
            return
        await super().receive_response(response)


async def send_event(
    client: EncryptingClient,
    room_id: str,
    event_type: str,
    content: dict[str, Any],
    tx_id: str,
    *,
    ignore_unverified_devices: bool = True,
) -> Any:
    """Send one event (the ``RoomSendResponse`` or nio's error value, as ``room_send``).

    In an encrypted room: the members and their devices are made known, a Megolm session shared
    if the room has none shared, and the event encrypted, under the client's lock; then it is
    PUT (``tx_id`` keeps it idempotent). ``m.relates_to`` stays in the clear, so threads, edits
    and reactions still relate. Elsewhere, :func:`plain_send`."""
    room = client.rooms.get(room_id)
    if client.olm is None or room is None or not room.encrypted:
        return await plain_send(client, room_id, event_type, content, tx_id)
    async with client.crypto_lock:
        if not room.members_synced:
            members = await client.joined_members(room_id)
            if isinstance(members, ErrorResponse):
                return members
        if client.should_query_keys:
            queried = await client.keys_query()
            if isinstance(queried, ErrorResponse):
                return queried
        if client.olm.should_share_group_session(room_id):
            shared = await client.share_group_session(
                room_id, ignore_unverified_devices=ignore_unverified_devices
            )
            if isinstance(shared, ErrorResponse):
                return shared
        message_type, encrypted = client.encrypt(room_id, event_type, content)
    method, path, data = Api.room_send(client.access_token, room_id, message_type, encrypted, tx_id)
    # nio's own room_send path (its public one would encrypt once more): the response handled
    # as room_send's is.
    return await client._send(RoomSendResponse, method, path, data, (room_id,))


async def plain_send(
    client: AsyncClient, room_id: str, event_type: str, content: dict[str, Any], tx_id: str
) -> Any:
    """Send one event as it is, never encrypted: ``room_send`` without its encryption step
    (which, with a crypto store loaded, refuses a room nio has not synced yet)."""
    method, path, data = Api.room_send(client.access_token, room_id, event_type, content, tx_id)
    return await client._send(RoomSendResponse, method, path, data, (room_id,))


async def upload_keys(client: AsyncClient, persist: Persist | None = None) -> Any:
    """Upload the device's keys (first time) or new one-time keys, write-ahead: the account
    holding them is saved and ``persist`` awaited before the upload is sent."""
    assert client.olm is not None  # noqa: S101 - callers check should_upload_keys first
    content = client.olm.share_keys()
    client.olm.save_account()
    if persist is not None:
        await persist()
    method, path, data = Api.keys_upload(client.access_token, content)
    return await client._send(KeysUploadResponse, method, path, data)


async def housekeeping(client: AsyncClient, persist: Persist | None = None) -> list[Any]:
    """The crypto chores after a sync; returns every response (errors are values: check them).

    The device-list query and the key claim run under the client's ``crypto_lock``: a
    ``/keys/query`` answer naming a changed user drops the outbound Megolm session of every room
    that user is in, and a send between sharing and encrypting would then encrypt with a new
    session nobody received (reproduced: an invited person's first prompt unreadable)."""
    results: list[Any] = []
    if client.olm is None:
        return results
    if client.should_upload_keys:
        results.append(await upload_keys(client, persist))
    async with crypto_lock(client):
        if client.should_query_keys:
            results.append(await client.keys_query())
        if client.should_claim_keys:
            results.append(await client.keys_claim(client.get_users_for_key_claiming()))
    results.extend(await client.send_to_device_messages())
    return results


def crypto_lock(client: AsyncClient) -> contextlib.AbstractAsyncContextManager[Any]:
    """The client's lock between handling a sync and sharing/encrypting (none: a plain client)."""
    lock = getattr(client, "crypto_lock", None)
    return lock if isinstance(lock, asyncio.Lock) else contextlib.nullcontext()

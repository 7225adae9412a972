"""matrix-nio's end-to-end encryption made safe for elicitbot's own sync loop and concurrent sends:
what nio leaves to the caller (docs/matrix-e2ee.md §6, §8).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from nio import AsyncClient, ErrorResponse, KeysUploadResponse, RoomSendResponse, SyncResponse
from nio.api import Api

Persist = Callable[[], Awaitable[None]]


class EncryptingClient(AsyncClient):  # type: ignore[misc] # nio ships no type hints
    """nio's ``AsyncClient`` whose sync responses are handled under :attr:`crypto_lock`, the
    lock :func:`send_event` shares and encrypts under."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.crypto_lock = asyncio.Lock()

    async def receive_response(self, response: Any) -> None:
        sync = isinstance(response, SyncResponse)
        async with self.crypto_lock if sync else contextlib.nullcontext():
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
    """Send one event (the ``RoomSendResponse`` or nio's error value, as ``room_send``),
    encrypted in an encrypted room under the client's lock: reactions too, which nio's
    ``room_send`` never encrypts. ``m.relates_to`` stays in the clear, so relations still work."""
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
    # Sent as it is: nio's public room_send would encrypt it once more.
    return await plain_send(client, room_id, message_type, encrypted, tx_id)


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


async def housekeeping(client: EncryptingClient, persist: Persist | None = None) -> list[Any]:
    """The crypto chores after a sync; returns every response (errors are values: check them).
    The key query and claim run under ``crypto_lock``: a changed user drops rooms' outbound
    sessions, and a send between sharing and encrypting would use a session nobody received."""
    results: list[Any] = []
    if client.olm is None:
        return results
    if client.should_upload_keys:
        results.append(await upload_keys(client, persist))
    async with client.crypto_lock:
        if client.should_query_keys:
            results.append(await client.keys_query())
        if client.should_claim_keys:
            results.append(await client.keys_claim(client.get_users_for_key_claiming()))
    results.extend(await client.send_to_device_messages())
    return results

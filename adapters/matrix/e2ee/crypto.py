"""The bot device's end-to-end encryption as the Matrix adapter runs it (docs/matrix-e2ee.md §11).

The crypto store is live only on the Matrix lease holder; every snapshot is fenced on the lease
and a refused one stops the state here. Nothing is ever sent in plaintext to an encrypted room.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import structlog
from nio import (
    BadEvent,
    EncryptionError,
    ErrorResponse,
    Event,
    KeysUploadResponse,
    MatrixRoom,
    MegolmEvent,
    RoomGetStateResponse,
    RoomMemberEvent,
    UnknownBadEvent,
)

from adapters.matrix.api.client import call
from adapters.matrix.e2ee import state as crypto_state
from adapters.matrix.e2ee.client import EncryptingClient, housekeeping, send_event, upload_keys
from adapters.matrix.e2ee.cross_signing import (
    CrossSigningError,
    CrossSigningKeys,
    Outcome,
    cross_sign_device,
)
from adapters.matrix.e2ee.cross_signing import owner_key as signing_owner
from bot.domain.errors import ConfigError, TransientDeliveryError
from bot.domain.ports import Clock
from bot.domain.store import CryptoStates

log = structlog.get_logger("elicitbot.matrix")

Fence = Callable[[], Awaitable[bool]]
"""True while this process holds the Matrix lease (a read: for the hand-off and the last
snapshot; every snapshot is also fenced in the store by ``lease``)."""

NOT_HOLDER_RETRY = 5.0
"""Seconds before the outbox retries a send to an encrypted room this process cannot encrypt
for now (another replica holds the crypto state, or it is being restored)."""

NOT_CROSS_SIGNED = (
    "the bot's device is not cross-signed: Element users who exclude insecure devices send it "
    "no room keys (it cannot read their answers) and see its prompts as sent from an "
    "unverified device; see docs/matrix-e2ee.md §7"
)


class CryptoFencedError(TransientDeliveryError):
    """The store refused a snapshot: the Matrix lease it is fenced on is no longer ours."""


class MatrixCrypto:
    """The device's crypto state for ``client`` (which must be an ``EncryptingClient`` built by
    :func:`~adapters.matrix.api.client.make_client` with a pickle key)."""

    def __init__(
        self,
        client: EncryptingClient,
        states: CryptoStates,
        *,
        pickle_key: str,
        clock: Clock,
        fence: Fence | None = None,
        lease: tuple[str, str] | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.client = client
        self.states = states
        self.pickle_key = pickle_key
        self.clock = clock
        self.fence = fence
        self.lease = lease
        """(name, holder) of the Matrix lease every snapshot is fenced on (None: unfenced)."""
        self.scratch = scratch
        """Where the local store directories are made (default: the system's temp dir)."""
        self.active = False
        """True while the store is loaded here and ready to encrypt (the lease is ours)."""
        self.sync_token: str | None = None
        """The token of the last batch handled, as the restored state carries it."""
        self.cross_signing: Outcome | None = None
        self.saves = 0
        self._saved = -1
        self._dir: Path | None = None
        self._lock = asyncio.Lock()
        self._reading: dict[str, asyncio.Lock] = {}

    @property
    def user_id(self) -> str:
        return str(self.client.user_id)

    @property
    def device_id(self) -> str:
        return str(self.client.device_id)

    @property
    def owner(self) -> str:
        return crypto_state.owner_key(self.user_id, self.device_id)

    async def check(self) -> None:
        """At start, on every replica: the stored cross-signing keys open with this pickle key
        (a wrong key would otherwise show only when the lease is taken)."""
        sealed = await self.states.load_crypto(signing_owner(self.user_id))
        if sealed is None:
            return
        try:
            CrossSigningKeys.unseal(sealed, self.pickle_key)
        except CrossSigningError:
            raise ConfigError(
                "matrix.pickle_key_env: the stored crypto state does not open with this pickle "
                "key (it was saved with another one)"
            ) from None

    async def open(self) -> None:
        """Restore, load, upload keys, cross-sign, save: the device is ready to encrypt."""
        await self.close(save=False)
        directory = Path(tempfile.mkdtemp(prefix="elicitbot-crypto-", dir=self.scratch))
        blob = await self.states.load_crypto(self.owner)
        if blob is not None:
            crypto_state.restore(blob, directory, self.user_id, self.device_id)
        self.client.store_path = str(directory)
        self._dir = directory
        self.client.load_store()
        store = self.client.store
        if self.client.olm is None or store is None:
            raise ConfigError(
                "matrix.pickle_key_env: end-to-end encryption is not available here "
                "(install matrix-nio[e2e])"
            )
        self.sync_token = store.load_sync_token() or None
        self._saved = crypto_state.changes(self.client) if blob is not None else -1
        if self.client.should_upload_keys:
            uploaded = await upload_keys(self.client, self._persist)
            if not isinstance(uploaded, KeysUploadResponse):
                raise TransientDeliveryError(f"matrix keys upload: {uploaded}")
        await self._cross_sign()
        await self.save(force=True)  # refused (CryptoFencedError) unless the lease is ours
        self.active = True
        log.info(
            "matrix.crypto_ready",
            device_id=self.device_id,
            identity=self.client.olm.account.identity_keys["ed25519"],
            restored=blob is not None,
            cross_signing=str(self.cross_signing),
        )

    async def close(self, *, save: bool = True) -> None:
        """A last snapshot (fenced), then unload the store and remove its directory."""
        self.active = False
        store = self.client.store
        if store is not None:
            if save and await self._fence_holds():
                try:
                    await self.save()
                except Exception as exc:  # store down, or lease moved: the last saved state stands
                    log.warning("matrix.crypto_not_saved", error=str(exc) or type(exc).__name__)
            async with self.client.crypto_lock:
                self.client.olm = None
                self.client.store = None
                store.database.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def ours(self) -> bool:
        """The crypto state is live here and the lease (``fence``) is ours."""
        return self.active and await self._fence_holds()

    async def _fence_holds(self) -> bool:
        try:
            return self.fence is None or await self.fence()
        except Exception:  # the store is down: not known to be ours
            return False

    async def save(self, *, force: bool = False) -> bool:
        """Snapshot nio's store into the database if it changed; True when written. Raises
        :class:`CryptoFencedError` (and stops the state here) when the lease is no longer ours."""
        async with self._lock:
            if self.client.store is None or self._dir is None:
                return False
            changed = crypto_state.changes(self.client)
            if not force and changed == self._saved:
                return False
            blob = crypto_state.snapshot(self._dir, self.user_id, self.device_id)
            written = await self.states.save_crypto(
                self.owner, blob, self.clock.now(), lease=self.lease
            )
            if not written:
                self._fenced_out()
            self._saved = changed
            self.saves += 1
            return True

    def _fenced_out(self) -> NoReturn:
        self.active = False
        log.warning("matrix.crypto_fenced", problem="the Matrix lease is no longer ours")
        raise CryptoFencedError(
            "matrix: the bot's crypto state was not saved: the Matrix lease it is held under is "
            "no longer this process's (another replica carries on from its own snapshot)",
            retry_after=NOT_HOLDER_RETRY,
        )

    async def _persist(self) -> None:
        """Write-ahead for a key upload: the account with its new keys is saved first."""
        await self.save(force=True)

    async def handled(self, token: str) -> None:
        """A sync batch up to ``token`` is handled: the token goes into the blob, then saved."""
        store = self.client.store
        if store is None:
            return
        if token != self.sync_token:
            store.save_sync_token(token)
            self.sync_token = token
        await self.save()

    async def housekeeping(self) -> None:
        """nio's chores after a sync (keys, device lists, wedged sessions, to-device)."""
        if self.client.olm is None:
            return
        for result in await housekeeping(self.client, self._persist):
            if isinstance(result, ErrorResponse):
                log.warning("matrix.crypto_chore_failed", error=str(result))

    async def send(self, room_id: str, event_type: str, content: dict[str, Any], txn: str) -> Any:
        """Send one event to an encrypted room, encrypted (nio's response or error value)."""
        if not self.active or self.client.olm is None:
            raise TransientDeliveryError(
                f"matrix: room {room_id} is end-to-end encrypted and this process does not hold "
                "the bot's crypto state now (another replica holds the Matrix lease, or it is "
                "being restored)",
                retry_after=NOT_HOLDER_RETRY,
            )
        room = await self.room(room_id)
        if not room.encrypted:
            raise TransientDeliveryError(
                f"matrix: room {room_id} is end-to-end encrypted but its state does not say so "
                "yet; not sending in plaintext",
                retry_after=NOT_HOLDER_RETRY,
            )
        try:
            return await send_event(self.client, room_id, event_type, content, txn)
        finally:
            # Sent (or not) either way: a refused save stops the state here for the next send.
            with contextlib.suppress(CryptoFencedError):
                await self.save()

    async def room(self, room_id: str) -> MatrixRoom:
        """nio's room with every member, invited ones too, read from its full state the first
        time this process sends there (a lazy sync and nio's ``joined_members`` miss invitees,
        who would get no key for the first prompt)."""
        known = self.client.rooms.get(room_id)
        if known is not None and known.members_synced:
            return known
        async with self._reading.setdefault(room_id, asyncio.Lock()):  # once, not per send
            known = self.client.rooms.get(room_id)
            if known is not None and known.members_synced:
                return known
            state = await call(
                "room state", lambda: self.client.room_get_state(room_id), RoomGetStateResponse
            )
            assert state is not None  # noqa: S101 - no errcode is accepted
            async with self.client.crypto_lock:  # the sync changes rooms under it too
                room = self.client.rooms.get(room_id) or MatrixRoom(
                    room_id, self.user_id, room_id in self.client.encrypted_rooms
                )
                changed = False
                for raw in state.events:
                    event = Event.parse_event(raw)
                    if isinstance(event, RoomMemberEvent):
                        changed = room.handle_membership(event) or changed
                    else:
                        room.handle_event(event)
                room.members_synced = True
                self.client.rooms[room_id] = room
                if room.encrypted and self.client.olm is not None:
                    self.client.encrypted_rooms.add(room_id)
                    self.client.olm.update_tracked_users(room)
                    if changed:  # someone the room key may not have reached
                        self.client.invalidate_outbound_session(room_id)
            return room

    def decrypt(self, room_id: str, event: MegolmEvent) -> Event | None:
        """The event decrypted with the room keys this device holds, or None while its key is
        missing (or it does not decrypt at all): the caller reports it, never drops it."""
        if self.client.olm is None:
            return None
        event.room_id = room_id
        try:
            decrypted = self.client.decrypt_event(event)
        except EncryptionError:
            return None
        if decrypted is None or isinstance(decrypted, BadEvent | UnknownBadEvent):
            return None
        return decrypted

    async def sent_by_sender(self, room_id: str, event: Any) -> bool:
        """A decrypted event's Megolm key came from one of its sender's devices (nio binds the
        two only for devices marked verified, and elicitbot trusts on first use); logged if not."""
        olm = self.client.olm
        if olm is not None and event.sender_key not in self._curve_keys(event.sender):
            olm.users_for_key_query.add(event.sender)
            with contextlib.suppress(Exception):  # unknown now: checked once more below
                async with self.client.crypto_lock:  # see e2ee.housekeeping
                    await self.client.keys_query()
        if olm is not None and event.sender_key in self._curve_keys(event.sender):
            return True
        log.warning(
            "matrix.sender_key_unknown",
            room_id=room_id,
            event_id=event.event_id,
            sender=event.sender,
            problem="its key did not come from any device of its sender: ignored",
        )
        return False

    def _curve_keys(self, user_id: str) -> set[str]:
        return {d.curve25519 for d in self.client.device_store.active_user_devices(user_id)}

    async def request_key(self, event: Any) -> None:
        """Ask the sender's device for the Megolm key of an event we could not decrypt (nio's
        own ``request_room_key`` asks only the bot's own other devices)."""
        try:
            request = event.as_key_request(event.sender, self.device_id, None, event.device_id)
            await self.client.to_device(request)
        except Exception as exc:  # asking is best effort: the event stays unread, and is reported
            log.warning("matrix.key_request_failed", event_id=event.event_id, error=str(exc))

    async def _cross_sign(self) -> None:
        owner = signing_owner(self.user_id)
        sealed = await self.states.load_crypto(owner)
        if sealed is None:
            keys = CrossSigningKeys.generate()
            # Stored before anything is uploaded: the server never holds keys we do not. Fenced
            # too: a replica that lost the lease between the load and here must not replace the
            # keys its successor made (and maybe uploaded).
            sealed_now = keys.seal(self.pickle_key)
            if not await self.states.save_crypto(
                owner, sealed_now, self.clock.now(), lease=self.lease
            ):
                self._fenced_out()
        else:
            keys = CrossSigningKeys.unseal(sealed, self.pickle_key)
        try:
            self.cross_signing = await cross_sign_device(self.client, keys)
        except Exception:  # cross-signing is best effort: the bot works without it
            log.exception("matrix.cross_signing_failed", problem=NOT_CROSS_SIGNED)
            return
        if self.cross_signing in (Outcome.HELD_BY_OTHER, Outcome.NEEDS_AUTH):
            log.warning(
                "matrix.device_not_cross_signed",
                outcome=str(self.cross_signing),
                problem=NOT_CROSS_SIGNED,
            )


def log_undecryptable(room_id: str, event: MegolmEvent, **where: Any) -> None:
    log.warning(
        "matrix.undecryptable",
        room_id=room_id,
        event_id=event.event_id,
        sender=event.sender,
        device_id=event.device_id,
        session_id=event.session_id,
        **where,
    )

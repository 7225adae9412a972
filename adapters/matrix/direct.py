"""Direct messages: ``matrix:@user:server`` as a destination.

A person's direct room with the bot is found in the bot's ``m.direct`` account data (the list
Matrix clients keep of each account's direct rooms, per person) — the first room listed there
that the bot is in and the person is in or invited to — or else created: ``is_direct``, the
``trusted_private_chat`` preset, the person invited, end-to-end encrypted when encryption is on
(``m.room.encryption`` in the initial state, as Element makes them), and added to ``m.direct``.
The homeserver keeps ``m.direct``, so the room is found again after a restart, on any replica;
each process also remembers what it found. One lookup per person at a time (a lock), so a burst
of prompts to one person makes one room.

Not covered: two replicas making the first room for the same person at the same moment (each
makes one; both are listed and the first listed is used from then on), and a crash between
creating the room and listing it (a retry makes another).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

import structlog
from nio import (
    AsyncClient,
    DirectRoomsResponse,
    ErrorResponse,
    RoomCreateResponse,
    RoomGetStateEventResponse,
    RoomPreset,
)

from adapters.matrix.client import call
from adapters.matrix.errors import from_exception, from_response

log = structlog.get_logger("elicitbot.matrix")

MEGOLM = "m.megolm.v1.aes-sha2"
HTTP_OK = 200


def is_person(target: str) -> bool:
    """``@user:server`` (a person, a direct message) rather than ``!room:server``."""
    return target.startswith("@") and ":" in target[1:]


class DirectRooms:
    """The bot's direct rooms with people (``client``: the shared nio client)."""

    def __init__(self, client: AsyncClient, *, encrypted: bool) -> None:
        self.client = client
        self.encrypted = encrypted
        self.created = 0
        """Rooms made by this process (for tests and logs)."""
        self._rooms: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def known(self, user_id: str) -> str | None:
        return self._rooms.get(user_id)

    def person_of(self, room_id: str) -> str | None:
        """The person whose direct room ``room_id`` is, if this process knows it."""
        return next((u for u, r in self._rooms.items() if r == room_id), None)

    async def room_for(self, user_id: str) -> str:
        """The direct room with ``user_id``: remembered, listed in ``m.direct``, or new."""
        known = self._rooms.get(user_id)
        if known is not None:
            return known
        lock = self._locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            known = self._rooms.get(user_id)
            if known is not None:
                return known
            for room_id in (await self._direct()).get(user_id, []):
                if isinstance(room_id, str) and await self._usable(room_id, user_id):
                    self._rooms[user_id] = room_id
                    return room_id
            room_id = await self._create(user_id)
            self._rooms[user_id] = room_id
            return room_id

    # ------------------------------------------------------------------ helpers

    async def _direct(self) -> dict[str, list[str]]:
        """The bot's ``m.direct`` account data (person -> rooms)."""
        response = await call(
            "m.direct",
            self.client.list_direct_rooms,
            DirectRoomsResponse,
            accept=frozenset({"M_NOT_FOUND"}),  # no direct rooms yet
        )
        rooms = response.rooms if response is not None else {}
        return {u: list(r) for u, r in rooms.items() if isinstance(r, list)}

    async def _usable(self, room_id: str, user_id: str) -> bool:
        """The bot is in the room and the person is in it or invited."""
        ours = await self._membership(room_id, str(self.client.user_id))
        return ours == "join" and await self._membership(room_id, user_id) in ("join", "invite")

    async def _membership(self, room_id: str, user_id: str) -> str | None:
        state = await call(
            "get membership",
            lambda: self.client.room_get_state_event(room_id, "m.room.member", user_id),
            RoomGetStateEventResponse,
            accept=frozenset({"M_NOT_FOUND", "M_FORBIDDEN"}),
        )
        membership = state.content.get("membership") if state is not None else None
        return membership if isinstance(membership, str) else None

    async def _create(self, user_id: str) -> str:
        initial_state = (
            [{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}]
            if self.encrypted
            else []
        )
        created = await call(
            "create direct room",
            lambda: self.client.room_create(
                is_direct=True,
                preset=RoomPreset.trusted_private_chat,
                invite=[user_id],
                initial_state=initial_state,
            ),
            RoomCreateResponse,
        )
        assert created is not None  # noqa: S101 - no errcode is accepted
        room_id = str(created.room_id)
        self.created += 1
        # Re-read just before writing: another client of the account may have changed it.
        direct = await self._direct()
        listed = direct.setdefault(user_id, [])
        if room_id not in listed:
            listed.append(room_id)
        await self._put_direct(direct)
        log.info(
            "matrix.direct_room_created", user_id=user_id, room_id=room_id, encrypted=self.encrypted
        )
        return room_id

    async def _put_direct(self, direct: Mapping[str, Any]) -> None:
        user = urllib.parse.quote(str(self.client.user_id), safe="")
        path = f"/_matrix/client/v3/user/{user}/account_data/m.direct"
        try:
            response = await self.client.send(
                "PUT",
                path,
                json.dumps(direct),
                headers={
                    "Authorization": f"Bearer {self.client.access_token}",
                    "Content-Type": "application/json",
                },
            )
            try:
                status = int(response.status)
                reply = await response.json(content_type=None) if status != HTTP_OK else {}
            finally:
                response.release()
        except Exception as exc:  # nio raises aiohttp/timeout errors: mapped, never leaked
            raise from_exception("set m.direct", exc) from exc
        if status != HTTP_OK:
            error = ErrorResponse.from_dict(reply if isinstance(reply, dict) else {})
            raise from_response(f"set m.direct (HTTP {status})", error)

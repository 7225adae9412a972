"""Direct messages: ``matrix:@user:server`` as a destination.

A person's direct room is: the one found before; the first room listed for them in the bot's
``m.direct`` that the bot is in and they are in or invited to; else the room behind the bot's
alias for them, ``#elicitbot-dm-<digest>:<the bot's server>``, made if need be.

The alias is why a room is made at most once per person (and generation). Synapse takes the alias
under a unique constraint (400 ``M_ROOM_IN_USE``, or 409 when the check raced) *before* it sends
any event of the new room, so of two replicas making it at once the loser's room never invites
anyone; the loser resolves the alias and waits ``settle`` s for the winner's room. A retry after a
crash, or an ``m.direct`` entry lost to a concurrent write (account data is replaced whole), finds
the alias taken and resolves it to the room made before. A person who left is invited again; a
room the bot was removed from moves on to the next generation's alias. Whoever takes the alias
first only makes the bot wait ``settle`` s, then make an un-aliased room (logged).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from nio import (
    AsyncClient,
    DirectRoomsResponse,
    ErrorResponse,
    RoomCreateResponse,
    RoomPreset,
    RoomPutStateResponse,
    RoomResolveAliasResponse,
)

from adapters.matrix.api.client import call, send_json
from adapters.matrix.errors import from_exception, from_response, http_status

log = structlog.get_logger("elicitbot.matrix")

MEGOLM = "m.megolm.v1.aes-sha2"
HTTP_OK = 200
HTTP_CONFLICT = 409
ROOM_IN_USE = "M_ROOM_IN_USE"
ALIAS_PREFIX = "elicitbot-dm-"
GENERATIONS = 4
"""Aliases tried per person (a new one only when the bot was removed from the last one's room)."""
SETTLE = 5.0
"""Seconds, at most, to wait for a room another replica is making to have the bot and person."""
FIRST_POLL, LAST_POLL = 0.05, 0.5


def alias_name(bot: str, person: str, generation: int = 0) -> str:
    """The local part of the bot's alias for its direct room with ``person``."""
    digest = hashlib.sha256(f"{bot}\n{person}\n{generation}".encode()).hexdigest()[:32]
    return f"{ALIAS_PREFIX}{digest}"


def is_person(target: str) -> bool:
    """``@user:server`` (a person, a direct message) rather than ``!room:server``."""
    return target.startswith("@") and ":" in target[1:]


class DirectRooms:
    """The bot's direct rooms with people (``client``: the shared nio client)."""

    def __init__(
        self,
        client: AsyncClient,
        membership: Callable[[str, str], Awaitable[str | None]],
        *,
        encrypted: bool,
        settle: float = SETTLE,
    ) -> None:
        """``membership(room, user)``: what the room says of the user (the chat's own read)."""
        self.client = client
        self._membership = membership
        self.encrypted = encrypted
        self.settle = settle
        self.created = 0
        """Rooms made by this process (for tests and logs)."""
        self._rooms: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._writing = asyncio.Lock()

    def person_of(self, room_id: str) -> str | None:
        """The person whose direct room ``room_id`` is, if this process knows it."""
        return next((u for u, r in self._rooms.items() if r == room_id), None)

    async def room_for(self, user_id: str) -> str:
        """The direct room with ``user_id``: remembered, listed in ``m.direct``, or the alias's."""
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
            room_id = await self._open(user_id)
            await self._list(user_id, room_id)
            self._rooms[user_id] = room_id
            return room_id

    async def adopt(self, room_id: str, user_id: str) -> None:
        """``room_id`` is a direct room ``user_id`` made and the bot joined: list it for them
        (after any listed before, so every replica picks the same one)."""
        if await self._list(user_id, room_id):
            log.info("matrix.direct_room_adopted", user_id=user_id, room_id=room_id)

    @property
    def _me(self) -> str:
        return str(self.client.user_id)

    async def _open(self, user_id: str) -> str:
        """The room behind the bot's alias for ``user_id``: made now, or made before (by this
        process before a crash, or by another replica) and usable; else an un-aliased one."""
        deadline = asyncio.get_running_loop().time() + self.settle
        server = self._me.partition(":")[2]
        generation = 0
        for _ in range(2 * GENERATIONS):  # an alias removed between create and resolve: again
            name = alias_name(self._me, user_id, generation)
            room_id = await self._create(user_id, name)
            if room_id is not None:
                return room_id
            alias = f"#{name}:{server}"
            resolved = await call(
                "resolve direct room alias",
                functools.partial(self.client.room_resolve_alias, alias),
                RoomResolveAliasResponse,
                accept=frozenset({"M_NOT_FOUND"}),
            )
            if resolved is None:
                continue
            room_id = str(resolved.room_id)
            if await self._settled(room_id, user_id, deadline):
                log.info("matrix.direct_room_found", user_id=user_id, room_id=room_id, via="alias")
                return room_id
            if asyncio.get_running_loop().time() >= deadline:
                break
            generation += 1
            if generation == GENERATIONS:
                break
        log.warning("matrix.direct_alias_unusable", user_id=user_id, generation=generation)
        room_id = await self._create(user_id, None)
        assert room_id is not None  # noqa: S101 - without an alias no errcode is accepted
        return room_id

    async def _settled(self, room_id: str, user_id: str, deadline: float) -> bool:
        """The alias's room has the bot joined and the person joined or invited (invited again
        if they left). Waits, until ``deadline``, for a room another replica is still making."""
        delay = FIRST_POLL
        while True:
            ours = await self._membership(room_id, self._me)
            theirs = await self._membership(room_id, user_id) if ours == "join" else None
            if ours in ("leave", "ban") or theirs == "ban":
                return False  # the bot was removed, or removed the person: not this room
            if theirs in ("join", "invite"):
                return True
            if theirs == "leave":
                return await self._invite(room_id, user_id)
            now = asyncio.get_running_loop().time()
            if now >= deadline:
                # The bot is in but the person never was: the maker died before inviting.
                return ours == "join" and await self._invite(room_id, user_id)
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(2 * delay, LAST_POLL)

    async def _invite(self, room_id: str, user_id: str) -> bool:
        """Invite ``user_id`` (as a direct room: ``is_direct``, the same content as the invite
        ``createRoom`` sends, so the homeserver drops a duplicate from another replica)."""
        sent = await call(
            "invite to direct room",
            lambda: self.client.room_put_state(
                room_id, "m.room.member", {"membership": "invite", "is_direct": True}, user_id
            ),
            RoomPutStateResponse,
            accept=frozenset({"M_FORBIDDEN"}),
        )
        if sent is not None:
            log.info("matrix.direct_room_reinvited", user_id=user_id, room_id=room_id)
        return sent is not None

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

    async def _list(self, user_id: str, room_id: str) -> bool:
        """Add ``room_id`` to ``user_id``'s rooms in ``m.direct``; False: it was there."""
        async with self._writing:
            # Re-read just before writing: another client of the account may have changed it.
            direct = await self._direct()
            listed = direct.setdefault(user_id, [])
            if room_id in listed:
                return False
            listed.append(room_id)
            await self._put_direct(direct)
            return True

    async def _usable(self, room_id: str, user_id: str) -> bool:
        """The bot is in the room and the person is in it or invited."""
        ours = await self._membership(room_id, self._me)
        return ours == "join" and await self._membership(room_id, user_id) in ("join", "invite")

    async def _create(self, user_id: str, alias: str | None) -> str | None:
        """A new direct room (under ``alias``, its local part); None: the alias is taken."""
        initial_state = (
            [{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": MEGOLM}}]
            if self.encrypted
            else []
        )
        if alias is not None:  # kept out of the room's state: clients would name the room by it
            initial_state.append({"type": "m.room.canonical_alias", "state_key": "", "content": {}})

        async def create() -> Any:
            response = await self.client.room_create(
                alias=alias,
                is_direct=True,
                preset=RoomPreset.trusted_private_chat,
                invite=[user_id],
                initial_state=initial_state,
            )
            status = http_status(response)
            if isinstance(response, ErrorResponse) and status == HTTP_CONFLICT:
                response.status_code = ROOM_IN_USE  # Synapse's alias insert lost a race: taken
            if isinstance(response, ErrorResponse) and response.status_code == ROOM_IN_USE:
                log.info("matrix.direct_alias_taken", user_id=user_id, alias=alias, http=status)
            return response

        created = await call(
            "create direct room",
            create,
            RoomCreateResponse,
            accept=frozenset({ROOM_IN_USE} if alias is not None else ()),
        )
        if created is None:
            return None
        room_id = str(created.room_id)
        self.created += 1
        log.info(
            "matrix.direct_room_created",
            user_id=user_id,
            room_id=room_id,
            encrypted=self.encrypted,
            alias=alias,
        )
        return room_id

    async def _put_direct(self, direct: Mapping[str, Any]) -> None:
        user = urllib.parse.quote(str(self.client.user_id), safe="")
        try:
            status, reply = await send_json(
                self.client, "PUT", f"/user/{user}/account_data/m.direct", direct
            )
        except Exception as exc:  # nio raises aiohttp/timeout errors: mapped, never leaked
            raise from_exception("set m.direct", exc) from exc
        if status != HTTP_OK:
            raise from_response(f"set m.direct (HTTP {status})", ErrorResponse.from_dict(reply))

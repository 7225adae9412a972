"""A person's power level in the room they act in, for ``matrix-power:<n>`` approvers (rule 9).

:class:`RoomPowers` follows the state events the sync walks, in order, so a change counts from the
next event. Each replaces the room's levels whole, as the spec says (nio's
``MatrixRoom.power_levels`` merges ``users`` across events and knows nothing of room version 12's
creators). A room not seen yet is read once; when that fails the level is unknown (None) and the
core counts the person as no approver (fail closed).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from bot.domain.errors import DeliveryError
from bot.domain.policy import Standing

log = structlog.get_logger("elicitbot.matrix")

CREATOR_POWER = 2**53
"""A room version 12 creator's level: above any level an event can give (canonical JSON
integers stop at 2**53 - 1)."""
NO_LEVELS_CREATOR = 100
"""The creator's level in a room with no ``m.room.power_levels`` event (before version 12)."""
PRIVILEGED_CREATORS_FROM = 12
"""The first room version whose creators outrank every power level."""

POWER_LEVELS = "m.room.power_levels"
CREATE = "m.room.create"
_INTEGER = re.compile(r"^[+-]?\d{1,16}$")


def _level(value: Any) -> int | None:
    """A power level as an event holds it: an integer (before room version 10 also a string of
    digits, which servers accept); anything else is no level."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def creators(create: Mapping[str, Any] | None) -> frozenset[str]:
    """Who outranks every level: in room version 12 and later, the ``m.room.create`` event's
    sender and its ``additional_creators``; nobody in earlier versions (or an unknown one)."""
    content = _mapping((create or {}).get("content"))
    version = content.get("room_version", "1")
    if not (isinstance(version, str) and version.isdigit()):
        return frozenset()
    if int(version) < PRIVILEGED_CREATORS_FROM:
        return frozenset()
    sender = (create or {}).get("sender")
    extra = content.get("additional_creators")
    named = [u for u in extra if isinstance(u, str)] if isinstance(extra, list) else []
    return frozenset([*named, *([sender] if isinstance(sender, str) else [])])


def level_of(
    user_id: str, levels: Mapping[str, Any] | None, create: Mapping[str, Any] | None
) -> int:
    """``user_id``'s power level, from the room's ``m.room.power_levels`` content (``levels``;
    None: the room has none) and its ``m.room.create`` event (sender and content)."""
    if user_id in creators(create):
        return CREATOR_POWER
    if levels is None:
        content = _mapping((create or {}).get("content"))
        creator = content.get("creator", (create or {}).get("sender"))
        return NO_LEVELS_CREATOR if creator == user_id else 0
    listed = _level(_mapping(levels.get("users")).get(user_id))
    if listed is not None:
        return listed
    default = _level(levels.get("users_default"))
    return default if default is not None else 0


def _state(event: Mapping[str, Any], kind: str) -> bool:
    return event.get("type") == kind and event.get("state_key") == ""


@dataclass
class _Room:
    levels: Mapping[str, Any] | None = None
    """The latest ``m.room.power_levels`` content seen; None: none seen (or the room has none)."""
    create: Mapping[str, Any] | None = None
    """The room's ``m.room.create`` event; None: not seen."""
    read: bool = False
    """The room's whole state was read: ``levels`` None then means it has no such event."""

    @property
    def known(self) -> bool:
        return self.read or (self.levels is not None and self.create is not None)


ReadState = Callable[[str], Awaitable[Iterable[Mapping[str, Any]]]]
"""The room's current state events (``GET /rooms/{id}/state``)."""


class RoomPowers:
    """The power levels of the bot's rooms, as the sync shows them; ``read_state`` reads a room
    this process has not seen yet."""

    def __init__(self, read_state: ReadState) -> None:
        self.read_state = read_state
        self.reads = 0
        """Rooms read from the homeserver (a restart's first action in a room; tests)."""
        self._rooms: dict[str, _Room] = {}

    def saw(self, room_id: str, event: Mapping[str, Any]) -> None:
        """A state event the sync carried (state or timeline, in order): power levels replace
        the room's levels whole; the create event names its creators."""
        if _state(event, POWER_LEVELS):
            self._rooms.setdefault(room_id, _Room()).levels = _mapping(event.get("content"))
        elif _state(event, CREATE):
            self._rooms.setdefault(room_id, _Room()).create = event

    async def level(self, room_id: str, user_id: str) -> int | None:
        """``user_id``'s level in the room now; None when it is not known and cannot be read."""
        room = self._rooms.get(room_id)
        if room is None or not room.known:
            try:
                events = list(await self.read_state(room_id))
            except DeliveryError as exc:
                log.warning("matrix.power_unknown", room_id=room_id, error=str(exc))
                return None
            self.reads += 1
            room = self._rooms[room_id] = _Room(read=True)
            for event in events:
                self.saw(room_id, event)
        return level_of(user_id, room.levels, room.create)

    async def standing(self, room_id: str, user_id: str) -> Standing:
        """What the core judges a Matrix person's answer with: their power level here."""
        return Standing(power=await self.level(room_id, user_id))

"""What the Matrix adapter reads from rooms (and the one moderation write, a redaction): the
read half of :class:`~adapters.matrix.chat.MatrixChat`."""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import structlog
from nio import (
    AsyncClient,
    MegolmEvent,
    MessageDirection,
    RoomGetEventResponse,
    RoomGetStateEventResponse,
    RoomGetStateResponse,
    RoomMessagesResponse,
    RoomRedactResponse,
)
from nio.api import Api, RelationshipType
from nio.responses import RoomEventRelationsResponse

from adapters.matrix.api.client import MAX_INLINE_WAIT, MAX_RETRIES, call
from adapters.matrix.e2ee.crypto import MatrixCrypto, log_undecryptable
from adapters.matrix.markup.html import remember, txn_digest
from bot.domain.errors import DeliveryError

log = structlog.get_logger("elicitbot.matrix")

PAGE = 100
MAX_PAGES = 10
"""Pages of ``/relations`` read at most (a prompt has a handful of reactions)."""


class RoomReads:
    """Reads for one bot account on ``client``."""

    crypto: MatrixCrypto | None = None
    """End-to-end encryption (set by :class:`~adapters.matrix.chat.MatrixChat`): what decrypts
    the encrypted annotations :meth:`annotations` reads."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        max_retries: int = MAX_RETRIES,
        max_inline_wait: float = MAX_INLINE_WAIT,
    ) -> None:
        self.client = client
        self.max_retries = max_retries
        self.max_inline_wait = max_inline_wait
        self._encrypted: dict[str, bool] = {}
        self._names: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._asked: OrderedDict[str, None] = OrderedDict()

    async def display_name(self, room_id: str, user_id: str) -> str | None:
        """``user_id``'s name in the room (disambiguated as the spec says, by nio's synced room
        state); None when they have none or it cannot be read now. A member nio does not know
        (an event backfilled from ``/messages``) is read once and remembered."""
        room = self.client.rooms.get(room_id)
        if room is not None and user_id in room.users:
            if not room.users[user_id].display_name:
                return None
            name = room.user_name(user_id)
            return name if isinstance(name, str) and name.strip() else None
        if (room_id, user_id) in self._names:
            return self._names[(room_id, user_id)]
        try:
            state = await call(
                "get member",
                lambda: self.client.room_get_state_event(room_id, "m.room.member", user_id),
                RoomGetStateEventResponse,
                max_retries=self.max_retries,
                max_inline_wait=self.max_inline_wait,
                accept=frozenset({"M_NOT_FOUND", "M_FORBIDDEN"}),
            )
        except DeliveryError as exc:
            log.info("matrix.name_unknown", room_id=room_id, user_id=user_id, error=str(exc))
            return None
        raw = state.content.get("displayname") if state is not None else None
        found = raw if isinstance(raw, str) and raw.strip() else None
        remember(self._names, (room_id, user_id), found)
        return found

    def mark_encrypted(self, room_id: str) -> None:
        self._encrypted[room_id] = True

    async def is_encrypted(self, room_id: str) -> bool:
        known = self._encrypted.get(room_id)
        if known is not None:
            return known
        state = await call(
            "get m.room.encryption",
            lambda: self.client.room_get_state_event(room_id, "m.room.encryption"),
            RoomGetStateEventResponse,
            max_retries=self.max_retries,
            max_inline_wait=self.max_inline_wait,
            accept=frozenset({"M_NOT_FOUND"}),
        )
        encrypted = state is not None and bool(state.content)
        self._encrypted[room_id] = encrypted
        return encrypted

    async def get_event(self, room_id: str, event_id: str) -> dict[str, Any] | None:
        """An event's raw JSON, or None when the homeserver does not have it (or hides it)."""
        response = await call(
            "get event",
            lambda: self.client.room_get_event(room_id, event_id),
            RoomGetEventResponse,
            max_retries=self.max_retries,
            max_inline_wait=self.max_inline_wait,
            accept=frozenset({"M_NOT_FOUND", "M_FORBIDDEN"}),
        )
        if response is None:
            return None
        source = getattr(response.event, "source", None)
        return source if isinstance(source, dict) else None

    async def power_level(self, room_id: str, user_id: str) -> int:
        """``user_id``'s power level in the room (``users_default`` when not listed)."""
        state = await call(
            "get power levels",
            lambda: self.client.room_get_state_event(room_id, "m.room.power_levels"),
            RoomGetStateEventResponse,
            accept=frozenset({"M_NOT_FOUND"}),
        )
        content: Mapping[str, Any] = state.content if state is not None else {}
        users = content.get("users")
        level = (users if isinstance(users, Mapping) else {}).get(
            user_id, content.get("users_default", 0)
        )
        return level if isinstance(level, int) else 0

    async def room_state(self, room_id: str) -> list[dict[str, Any]]:
        """The room's current state events (the power levels of a room this process has not
        synced: :mod:`adapters.matrix.api.power`)."""
        state = await call(
            "room state",
            lambda: self.client.room_get_state(room_id),
            RoomGetStateResponse,
            max_retries=self.max_retries,
            max_inline_wait=self.max_inline_wait,
        )
        assert state is not None  # noqa: S101 - no errcode is accepted
        return [e for e in state.events if isinstance(e, dict)]

    async def membership(self, room_id: str, user_id: str) -> str | None:
        """``join``, ``invite``, ``leave``…: what the room says of ``user_id`` (None: unknown)."""
        state = await call(
            "get membership",
            lambda: self.client.room_get_state_event(room_id, "m.room.member", user_id),
            RoomGetStateEventResponse,
            accept=frozenset({"M_NOT_FOUND", "M_FORBIDDEN"}),
        )
        membership = state.content.get("membership") if state is not None else None
        return membership if isinstance(membership, str) else None

    async def redact(self, room_id: str, event_id: str, reason: str) -> None:
        """Redact an event (someone else's needs power in the room)."""
        await call(
            "redact",
            lambda: self.client.room_redact(
                room_id, event_id, reason=reason, tx_id=f"elicitbot-redact-{txn_digest(event_id)}"
            ),
            RoomRedactResponse,
        )
        log.info("matrix.redacted", room_id=room_id, event_id=event_id)

    async def messages_between(self, room_id: str, start: str, stop: str, limit: int) -> list[Any]:
        """The room's events from pagination token ``start`` back to ``stop`` (a sync token),
        oldest first, at most ``limit``, as nio parsed (and where it could, decrypted) them."""
        found: list[Any] = []
        token = start
        while len(found) < limit:
            page = await call(
                "messages",
                functools.partial(
                    self.client.room_messages,
                    room_id,
                    start=token,
                    end=stop,
                    direction=MessageDirection.back,
                    limit=min(PAGE, limit - len(found)),
                ),
                RoomMessagesResponse,
            )
            assert page is not None  # noqa: S101 - no errcode is accepted
            chunk = [e for e in page.chunk if isinstance(getattr(e, "source", None), dict)]
            found.extend(chunk)
            if not chunk or not page.end or page.end == token:
                break
            token = page.end
        return list(reversed(found))

    async def annotations(self, room_id: str, event_id: str) -> list[dict[str, Any]]:
        """The annotations on ``event_id`` as the homeserver holds them now, raw JSON, newest
        first, encrypted ones decrypted (:meth:`_readable`). Pages go through :func:`call` (nio's
        iterator hides errors), asking no event type (an encrypted one's is not readable)."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(MAX_PAGES):
            method, path = Api.room_get_event_relations(
                self.client.access_token, room_id, event_id, RelationshipType.annotation,
                paginate_from=token, limit=PAGE,
            )  # fmt: skip
            page = await call(
                "relations",
                functools.partial(
                    self.client._send,
                    RoomEventRelationsResponse,
                    method,
                    path,
                    response_data=(room_id, event_id),
                ),
                RoomEventRelationsResponse,
                max_retries=self.max_retries,
                max_inline_wait=self.max_inline_wait,
            )
            assert page is not None  # noqa: S101 - no errcode is accepted
            for event in page.events:
                source = await self._readable(room_id, event)
                if source is not None:
                    found.append(source)
            if not page.next_batch or page.next_batch == token:
                break
            token = page.next_batch
        return found

    async def _readable(self, room_id: str, event: Any) -> dict[str, Any] | None:
        """One annotation as the caller reads it: an encrypted one decrypted, and kept only if its
        key came from one of its sender's devices (the sync's rule); one that cannot be decrypted
        stays ``m.room.encrypted`` (:meth:`_unreadable`), for the caller to count as unknown."""
        source = getattr(event, "source", None)
        if not isinstance(source, dict):
            return None
        if not isinstance(event, MegolmEvent) or event.sender == self.client.user_id:
            return source  # plaintext, redacted, or the bot's own (no one's selection)
        crypto = self.crypto
        decrypted = crypto.decrypt(room_id, event) if crypto is not None else None
        if crypto is None or decrypted is None:
            await self._unreadable(room_id, event)
            return source
        if not await crypto.sent_by_sender(room_id, decrypted):
            return None
        readable = getattr(decrypted, "source", None)
        return readable if isinstance(readable, dict) else None

    async def _unreadable(self, room_id: str, event: MegolmEvent) -> None:
        """Logged, and its key asked of the sender's device, once per event in this process."""
        if event.event_id in self._asked:
            return
        remember(self._asked, event.event_id, None)
        log_undecryptable(room_id, event, read="relations")
        if self.crypto is not None and self.crypto.client.olm is not None:
            await self.crypto.request_key(event)  # the reaction stays unknown anyway

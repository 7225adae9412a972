"""The Matrix :class:`~bot.domain.ports.ChatAdapter`: post, edit and threaded notices (matrix-nio).

Destinations are ``matrix:<room id>`` or, for a direct message, ``matrix:<user id>``
(:mod:`adapters.matrix.api.direct`). Every send carries a deterministic transaction id, so a retry
gets the event the first attempt made instead of a second one; the homeserver keeps that mapping
per device for 24 hours, which is why the bot always reuses its access token and device. A post's
id also digests the elicitation key: the outbox row id alone could repeat after a database reset.

A prompt too long to hold the whole request (answer rule 2) is posted in steps, each safe to
repeat: the cut message offering no approving option, the whole request in its thread, then an
edit that offers approving. A crash in between leaves a copy that offers no approve, and the
retry walks the same steps with the same transaction ids. Keycap reactions are the outbox's
``seed`` effect, claimed once the room's lane has no post left, so a burst of questions is all
visible before the first one's reactions go out.

With ``crypto`` every event to an encrypted room is encrypted, or not sent at all; without it,
posts to an encrypted room are refused (a plaintext prompt there is neither private nor
answerable by clients that only read encrypted events).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from datetime import datetime
from typing import Any

import structlog
from nio import AsyncClient, RoomSendResponse

from adapters.matrix.api.client import MAX_INLINE_WAIT, MAX_RETRIES, call, make_client
from adapters.matrix.api.direct import DirectRooms, is_person
from adapters.matrix.api.reads import RoomReads
from adapters.matrix.e2ee.client import plain_send
from adapters.matrix.e2ee.crypto import MatrixCrypto
from adapters.matrix.errors import DUPLICATE_ANNOTATION
from adapters.matrix.intake.notices import notice_content
from adapters.matrix.intake.reactions import reaction_content, reaction_keys
from adapters.matrix.markup.html import matrix_users, remember, txn_digest
from adapters.matrix.markup.thread import part_contents, part_txn
from adapters.matrix.render import MARKER, edit_content, message_content, needs_thread, shown
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Destination, ElicitationKey
from bot.domain.ports import MessageRef, Notice, PromptView
from bot.domain.refs import MatrixRef

__all__ = ["MatrixChat", "call", "make_client", "post_txn"]

log = structlog.get_logger("elicitbot.matrix")


def target_of(destination: Destination) -> str:
    """The room id or, for a direct message, the person's user id a destination names."""
    target = destination.target
    if destination.platform != "matrix" or not (target.startswith("!") or is_person(target)):
        raise PermanentDeliveryError(
            f"{destination!r} is not a Matrix room or person (matrix:!room:server, "
            "matrix:@user:server)"
        )
    return target


def post_txn(idempotency_key: str, elicitation_key: str) -> str:
    return f"{idempotency_key}.{txn_digest(elicitation_key)[:12]}"


def edit_txn(event_id: str, version: int) -> str:
    return f"elicitbot-edit-{txn_digest(event_id)}-v{version}"


def seed_txn(event_id: str, key: str) -> str:
    return f"elicitbot-seed-{txn_digest(event_id, key)}"


class MatrixChat(RoomReads):
    """Outbound Matrix for one bot account; ``client`` comes from :func:`make_client`."""

    platform = "matrix"
    post_interval = 0.0
    """The homeserver paces us with 429s, per user, not per room."""
    seeds = True
    """A prompt is answered by keycap reactions: the outbox seeds them after the lane's posts."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        crypto: MatrixCrypto | None = None,
        max_retries: int = MAX_RETRIES,
        max_inline_wait: float = MAX_INLINE_WAIT,
    ) -> None:
        super().__init__(client, max_retries=max_retries, max_inline_wait=max_inline_wait)
        self.crypto = crypto
        """End-to-end encryption (None: off, encrypted rooms are refused)."""
        self.direct = DirectRooms(client, self.membership, encrypted=crypto is not None)
        self._posted: OrderedDict[str, ElicitationKey] = OrderedDict()
        self._threaded: OrderedDict[str, None] = OrderedDict()
        self._subjects: OrderedDict[str, tuple[int | None, str | None]] = OrderedDict()
        """Prompt event id -> the approval subject (revision, digest) this process last sent it
        with (a post or an edit), for rule 2's stale check of a reaction on it."""

    @property
    def user_id(self) -> str:
        return str(self.client.user_id)

    async def post(
        self,
        destination: Destination,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MatrixRef:
        room_id = await self.room_for(destination)
        if self.crypto is None and await self.is_encrypted(room_id):
            raise PermanentDeliveryError(
                f"matrix post: room {room_id} is end-to-end encrypted; elicitbot cannot work there"
            )
        txn = post_txn(idempotency_key, view.elicitation.key)
        event_id = await self.send(room_id, "m.room.message", message_content(view), txn, "post")
        remember(self._posted, event_id, view.elicitation.key)
        self._sent_subject(event_id, view)
        if needs_thread(view):
            return await self._thread(room_id, event_id, view)
        if uncertain:
            # An earlier attempt may have made this event with an older version of the prompt.
            await self._refresh(room_id, event_id, view)
        return MatrixRef(room_id, event_id)

    async def update(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        if not isinstance(ref, MatrixRef):
            raise PermanentDeliveryError(f"matrix edit: {ref!r} is not a Matrix message ref")
        await self._edit(ref.room_id, ref.event_id, view, full_in_thread=ref.full_in_thread)
        await self._seed(ref, view)

    async def seed(
        self, destination: Destination, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        """The keycaps of a posted prompt (the outbox's ``seed`` effect)."""
        if not isinstance(ref, MatrixRef):
            raise PermanentDeliveryError(f"matrix seed: {ref!r} is not a Matrix message ref")
        await self._seed(ref, view)

    async def notify(
        self,
        destination: Destination,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        """A threaded ``m.notice`` naming (and, unless ``notice.mention`` is False, mentioning)
        the Matrix people of ``notice``; without a Matrix thread, unthreaded in the room."""
        thread = notice.thread if isinstance(notice.thread, MatrixRef) else None
        room_id = (thread and thread.room_id) or await self.room_for(destination)
        content = notice_content(
            notice.text,
            users=matrix_users([notice.user, *notice.mentions]),
            mention=notice.mention,
            thread_root=(thread and thread.event_id) or None,
            reply_to=notice.reply_to or None,
        )
        await self.send(room_id, "m.room.message", content, idempotency_key, "notice")

    async def room_for(self, destination: Destination) -> str:
        """The room a destination names: itself, or a person's direct room."""
        target = target_of(destination)
        return await self.direct.room_for(target) if is_person(target) else target

    def posted_key(self, event_id: str) -> ElicitationKey | None:
        """The elicitation of a prompt this process posted (before its ref is stored)."""
        return self._posted.get(event_id)

    def shown_subject(self, event_id: str) -> tuple[int | None, str | None]:
        """The approval subject (revision, digest) prompt ``event_id`` was last sent with here;
        (None, None) when unknown (another replica, a restart): the core then does not check."""
        return self._subjects.get(event_id, (None, None))

    def full_in_thread(self, event_id: str) -> bool:
        """This process posted the whole request in the thread of prompt ``event_id`` and
        offered approving on it (before its ref, saying so, is stored)."""
        return event_id in self._threaded

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str
    ) -> str:
        """Send one event with transaction id ``txn``; returns its event id."""
        response = await self._deliver(room_id, event_type, content, txn, what)
        assert response is not None  # noqa: S101 - no errcode is accepted here
        return str(response.event_id)

    async def encrypted(self, room_id: str) -> bool:
        """With encryption on: whether events to the room must be encrypted. The crypto holder
        reads its synced room; any other process asks the homeserver each time, never trusting
        an old "not encrypted" (encryption can be turned on in a room at any moment)."""
        if self.crypto is not None and self.crypto.active:
            return bool((await self.crypto.room(room_id)).encrypted)
        if self._encrypted.get(room_id):
            return True
        self._encrypted.pop(room_id, None)
        return await self.is_encrypted(room_id)

    async def _deliver(
        self,
        room_id: str,
        event_type: str,
        content: dict[str, Any],
        txn: str,
        what: str,
        *,
        accept: frozenset[str] = frozenset(),
    ) -> RoomSendResponse | None:
        crypto = self.crypto
        if crypto is None:
            request = functools.partial(
                self.client.room_send, room_id, event_type, content, tx_id=txn
            )
        elif await self.encrypted(room_id):
            request = functools.partial(crypto.send, room_id, event_type, content, txn)
        else:
            request = functools.partial(plain_send, self.client, room_id, event_type, content, txn)
        return await call(
            what,
            request,
            RoomSendResponse,
            max_retries=self.max_retries,
            max_inline_wait=self.max_inline_wait,
            accept=accept,
        )

    async def _edit(
        self, room_id: str, event_id: str, view: PromptView, *, full_in_thread: bool = False
    ) -> None:
        content = edit_content(event_id, view, full_in_thread=full_in_thread)
        await self.send(
            room_id, "m.room.message", content, edit_txn(event_id, view.version), "edit"
        )
        self._sent_subject(event_id, view)

    async def _thread(self, room_id: str, event_id: str, view: PromptView) -> MatrixRef:
        """Steps 2 and 3 of a long prompt: the whole request in its thread, then the edit that
        offers approving. Any failure raises before the edit: nothing approving is offered."""
        for content in part_contents(view.elicitation, event_id):
            await self.send(
                room_id, "m.room.message", content, part_txn(event_id, content), "thread part"
            )
        await self._edit(room_id, event_id, view, full_in_thread=True)
        remember(self._threaded, event_id, None)
        log.info("matrix.full_in_thread", room_id=room_id, event_id=event_id)
        return MatrixRef(room_id, event_id, full_in_thread=True)

    async def _refresh(self, room_id: str, event_id: str, view: PromptView) -> None:
        """Edit an adopted prompt whose content shows an older version than ``view``."""
        event = await self.get_event(room_id, event_id)
        marker = ((event or {}).get("content") or {}).get(MARKER) or {}
        shown = marker.get("version") if isinstance(marker, dict) else None
        if isinstance(shown, int) and shown < view.version:
            log.info("matrix.post_adopted", room_id=room_id, event_id=event_id, shown=shown)
            await self._edit(room_id, event_id, view)

    async def _seed(self, ref: MatrixRef, view: PromptView) -> None:
        """One reaction per option offered on the copy, each with its own transaction id; a
        reaction the bot already made is fine."""
        room_id, event_id = ref.room_id, ref.event_id
        keys = reaction_keys(view, shown=shown(view, full_in_thread=ref.full_in_thread))
        if not keys:
            return

        async def react(key: str) -> None:
            await self._deliver(
                room_id,
                "m.reaction",
                reaction_content(event_id, key),
                seed_txn(event_id, key),
                "seed reaction",
                accept=frozenset({DUPLICATE_ANNOTATION}),
            )

        results = await asyncio.gather(*(react(key) for key in keys), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _sent_subject(self, event_id: str, view: PromptView) -> None:
        s = view.elicitation.subject
        remember(
            self._subjects, event_id, (s.revision, s.digest) if s is not None else (None, None)
        )

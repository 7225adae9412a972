"""The Matrix :class:`~bot.domain.ports.ChatAdapter`: post, edit and threaded notices (matrix-nio).

Destinations are ``matrix:<room id>``. Every send carries a deterministic transaction id, so a
retry (by the outbox after a crash, a dropped connection or a homeserver outage) gets the event
the first attempt made instead of a second one; the homeserver keeps that mapping per device for
24 hours, which is why the bot always reuses its access token and device (never a new login):

- a post: ``<idempotency key>.<digest of the elicitation key>`` (the outbox row id alone could
  repeat after a database reset and map to an old message of the same room);
- the parts of a long copy's thread: ``elicitbot-part-<digest of event id and content>``
  (:mod:`adapters.matrix.thread`);
- the reactions seeded on it: ``elicitbot-seed-<digest of event id and key>``;
- an edit: ``elicitbot-edit-<digest of event id>-v<version>``, one per version of the prompt;
- a notice: the idempotency key it is given (a selection notice: one per prompt and person,
  each edit per triggering event, :mod:`adapters.matrix.selection`).

The client must be built by :func:`make_client`: nio's defaults retry a 429 forever, sleeping 5 s
whatever ``Retry-After`` says, and retry connection failures forever; here nio gives every failure
back at once, :func:`call` retries a 429 a bounded number of times honouring ``Retry-After`` (or
``retry_after_ms``), and everything else is a Transient/PermanentDeliveryError for the outbox.
Requests time out after ``request_timeout``, so nothing here can hang a shutdown.

A prompt too long to hold the whole request (answer rule 2) is posted in steps, each safe to
repeat: (1) the message, cut and offering no approving option (nor its reaction); (2) the whole
request in its thread, part by part, in order; (3) an edit of the message (transaction id per
version) that offers approving and says the thread holds everything; (4) the reactions. Only
then is the ref, with ``full_in_thread``, returned for the store. A crash or an uncertain send
anywhere in between leaves a message that offers no approve (a crafted approving reaction on it
is refused: the listener finds no ref saying the thread is complete), and the outbox's retry
walks the same steps with the same transaction ids, so it gets back the message, the parts and
the edit it already made instead of making them twice.

Encrypted rooms are refused: elicitbot does not do end-to-end encryption, and a plaintext prompt
in an encrypted room is neither private nor answerable by clients that only read encrypted events.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import structlog
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    MessageDirection,
    RoomGetEventResponse,
    RoomGetStateEventResponse,
    RoomMessagesResponse,
    RoomRedactResponse,
    RoomSendResponse,
)
from nio.api import Api, RelationshipType
from nio.responses import RoomEventRelationsResponse

from adapters.matrix.errors import DUPLICATE_ANNOTATION, errcode, from_exception, from_response
from adapters.matrix.markup import matrix_users, txn_digest
from adapters.matrix.notices import notice_content
from adapters.matrix.reactions import reaction_content, reaction_keys
from adapters.matrix.render import MARKER, edit_content, message_content, needs_thread, shown
from adapters.matrix.thread import part_contents, part_txn
from bot.domain.errors import DeliveryError, PermanentDeliveryError, TransientDeliveryError
from bot.domain.ports import MessageRef, Notice, PromptView
from bot.domain.refs import MatrixRef

log = structlog.get_logger("elicitbot.matrix")

T = TypeVar("T")

REQUEST_TIMEOUT = 20.0
MAX_RETRIES = 3
"""429s retried in place, at most; then the outbox reschedules with the server's delay."""
MAX_INLINE_WAIT = 5.0
"""A longer ``Retry-After`` is not slept here: the outbox retries after it instead."""
REMEMBERED = 4096
PAGE = 100
MAX_PAGES = 10
"""Pages of ``/relations`` read at most (a prompt has a handful of reactions)."""


def make_client(
    homeserver: str,
    user_id: str,
    device_id: str,
    access_token: str,
    *,
    request_timeout: float = REQUEST_TIMEOUT,
) -> AsyncClient:
    """An ``AsyncClient`` on the configured access token and fixed device (no login, so the
    device, and with it the homeserver's transaction-id dedupe, survives restarts)."""
    config = AsyncClientConfig(
        max_limit_exceeded=0,
        max_timeouts=0,
        request_timeout=request_timeout,
        encryption_enabled=False,
        store_sync_tokens=False,
    )
    client = AsyncClient(homeserver.rstrip("/"), user_id, device_id=device_id, config=config)
    client.user_id = user_id
    client.device_id = device_id
    client.access_token = access_token
    return client


async def call(
    what: str,
    request: Callable[[], Awaitable[Any]],
    ok: type[T],
    *,
    max_retries: int = MAX_RETRIES,
    max_inline_wait: float = MAX_INLINE_WAIT,
    accept: frozenset[str] = frozenset(),
) -> T | None:
    """Make a nio request; return the response when it is an ``ok``, None for an errcode in
    ``accept``; otherwise raise the mapped DeliveryError. A 429 whose delay is at most
    ``max_inline_wait`` is retried here, ``max_retries`` times at most."""
    for attempt in range(max_retries + 1):
        try:
            response = await request()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # nio raises aiohttp/timeout errors: mapped, never leaked
            raise from_exception(what, exc) from exc
        if isinstance(response, ok):
            return response
        if isinstance(response, ErrorResponse) and errcode(response) in accept:
            return None
        error: DeliveryError = (
            from_response(what, response)
            if isinstance(response, ErrorResponse)
            else PermanentDeliveryError(f"matrix {what}: unexpected {type(response).__name__}")
        )
        wait = error.retry_after if isinstance(error, TransientDeliveryError) else None
        if wait is None or wait > max_inline_wait or attempt == max_retries:
            raise error
        log.info("matrix.rate_limited", call=what, wait=round(wait, 3), attempt=attempt + 1)
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def room_of(destination: str) -> str:
    platform, _, room_id = destination.partition(":")
    if platform != "matrix" or not room_id.startswith("!"):
        raise PermanentDeliveryError(f"{destination!r} is not a Matrix room (matrix:!room:server)")
    return room_id


def post_txn(idempotency_key: str, elicitation_key: str) -> str:
    return f"{idempotency_key}.{txn_digest(elicitation_key)[:12]}"


def edit_txn(event_id: str, version: int) -> str:
    return f"elicitbot-edit-{txn_digest(event_id)}-v{version}"


def seed_txn(event_id: str, key: str) -> str:
    return f"elicitbot-seed-{txn_digest(event_id, key)}"


class MatrixChat:
    """Outbound Matrix for one bot account; ``client`` comes from :func:`make_client`."""

    platform = "matrix"
    post_interval = 0.0
    """The homeserver paces us with 429s, per user, not per room."""

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
        self._posted: OrderedDict[str, str] = OrderedDict()
        self._threaded: OrderedDict[str, None] = OrderedDict()
        self._names: OrderedDict[tuple[str, str], str | None] = OrderedDict()

    @property
    def user_id(self) -> str:
        return str(self.client.user_id)

    # ------------------------------------------------------------------ ChatAdapter

    async def post(
        self,
        destination: str,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MatrixRef:
        room_id = room_of(destination)
        await self._refuse_encrypted(room_id)
        txn = post_txn(idempotency_key, view.elicitation.key)
        event_id = await self.send(room_id, "m.room.message", message_content(view), txn, "post")
        self._remember(event_id, view.elicitation.key)
        if needs_thread(view):
            ref = await self._thread(room_id, event_id, view)
        else:
            ref = MatrixRef(room_id, event_id)
            if uncertain:
                # An earlier attempt may have made this event with an older version of the prompt.
                await self._refresh(room_id, event_id, view)
        await self._seed(ref, view)
        return ref

    async def update(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        if not isinstance(ref, MatrixRef):
            raise PermanentDeliveryError(f"matrix edit: {ref!r} is not a Matrix message ref")
        await self._edit(ref.room_id, ref.event_id, view, full_in_thread=ref.full_in_thread)
        await self._seed(ref, view)

    async def notify(
        self,
        destination: str,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        """A threaded ``m.notice`` in the thread of ``notice.thread`` naming (and, unless
        ``notice.mention`` is False, mentioning) ``notice.user`` and the identities in
        ``notice.mentions`` (a reminder's people); other platforms' are left out. Without a
        Matrix thread it goes to the destination room unthreaded."""
        thread = notice.thread if isinstance(notice.thread, MatrixRef) else None
        room_id = thread.room_id if thread is not None and thread.room_id else room_of(destination)
        content = notice_content(
            notice.text,
            users=matrix_users([notice.user, *notice.mentions]),
            mention=notice.mention,
            thread_root=thread.event_id if thread is not None and thread.event_id else None,
            reply_to=notice.reply_to or None,
        )
        await self.send(room_id, "m.room.message", content, idempotency_key, "notice")

    # ------------------------------------------------------------------ for the listener

    def posted_key(self, event_id: str) -> str | None:
        """The elicitation of a prompt this process posted (before its ref is stored)."""
        return self._posted.get(event_id)

    def full_in_thread(self, event_id: str) -> bool:
        """This process posted the whole request in the thread of prompt ``event_id`` and
        offered approving on it (before its ref, saying so, is stored)."""
        return event_id in self._threaded

    async def display_name(self, room_id: str, user_id: str) -> str | None:
        """``user_id``'s name in the room; None when they have none (or it cannot be read now).

        From nio's room state, which the sync keeps current (the listener's filter asks for
        the member event of everyone whose events a batch holds): the display name,
        disambiguated with the Matrix ID when another member shares it (the spec's rule,
        ``MatrixRoom.user_name``). A member nio does not know (an event backfilled from
        ``/messages``) is read from the room's member state once and remembered."""
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
        self._names[(room_id, user_id)] = found
        while len(self._names) > REMEMBERED:
            self._names.popitem(last=False)
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

    async def send(
        self, room_id: str, event_type: str, content: dict[str, Any], txn: str, what: str
    ) -> str:
        """Send one event with transaction id ``txn``; returns its event id."""
        response = await call(
            what,
            lambda: self.client.room_send(room_id, event_type, content, tx_id=txn),
            RoomSendResponse,
            max_retries=self.max_retries,
            max_inline_wait=self.max_inline_wait,
        )
        assert response is not None  # noqa: S101 - no errcode is accepted here
        return str(response.event_id)

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

    async def messages_between(
        self, room_id: str, start: str, stop: str, limit: int
    ) -> list[dict[str, Any]]:
        """The room's events from pagination token ``start`` back to ``stop`` (a sync token),
        oldest first, at most ``limit`` (``/messages``)."""
        found: list[dict[str, Any]] = []
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
            chunk = [source for e in page.chunk if (source := getattr(e, "source", None))]
            found.extend(chunk)
            if not chunk or not page.end or page.end == token:
                break
            token = page.end
        return list(reversed(found))

    async def annotations(self, room_id: str, event_id: str) -> list[dict[str, Any]]:
        """The ``m.reaction`` annotations on ``event_id`` as the homeserver holds them now
        (``/relations``: a redacted reaction is gone), raw JSON, newest first. nio's iterator
        hides error responses, so the pages are fetched here through :func:`call`."""
        found: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(MAX_PAGES):
            method, path = Api.room_get_event_relations(
                self.client.access_token, room_id, event_id, RelationshipType.annotation,
                "m.reaction", paginate_from=token, limit=PAGE,
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
            found.extend(source for e in page.events if (source := getattr(e, "source", None)))
            if not page.next_batch or page.next_batch == token:
                break
            token = page.next_batch
        return found

    # ------------------------------------------------------------------ helpers

    async def _refuse_encrypted(self, room_id: str) -> None:
        if await self.is_encrypted(room_id):
            raise PermanentDeliveryError(
                f"matrix post: room {room_id} is end-to-end encrypted; elicitbot cannot work there"
            )

    async def _edit(
        self, room_id: str, event_id: str, view: PromptView, *, full_in_thread: bool = False
    ) -> None:
        content = edit_content(event_id, view, full_in_thread=full_in_thread)
        await self.send(
            room_id, "m.room.message", content, edit_txn(event_id, view.version), "edit"
        )

    async def _thread(self, room_id: str, event_id: str, view: PromptView) -> MatrixRef:
        """Steps 2 and 3 of a long prompt: the whole request in its thread, then the edit that
        offers approving. Any failure raises before the edit: nothing approving is offered."""
        for content in part_contents(view.elicitation, event_id):
            await self.send(
                room_id, "m.room.message", content, part_txn(event_id, content), "thread part"
            )
        await self._edit(room_id, event_id, view, full_in_thread=True)
        self._threaded[event_id] = None
        while len(self._threaded) > REMEMBERED:
            self._threaded.popitem(last=False)
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
        """One reaction per option offered on the copy, so a tap answers (an approving one only
        where the copy shows the whole request). A reaction the bot already made is fine."""
        room_id, event_id = ref.room_id, ref.event_id
        keys = reaction_keys(view, shown=shown(view, full_in_thread=ref.full_in_thread))
        if not keys:
            return

        async def react(key: str) -> None:
            await call(
                "seed reaction",
                lambda: self.client.room_send(
                    room_id,
                    "m.reaction",
                    reaction_content(event_id, key),
                    tx_id=seed_txn(event_id, key),
                ),
                RoomSendResponse,
                max_retries=self.max_retries,
                max_inline_wait=self.max_inline_wait,
                accept=frozenset({DUPLICATE_ANNOTATION}),
            )

        results = await asyncio.gather(*(react(key) for key in keys), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _remember(self, event_id: str, key: str) -> None:
        self._posted[event_id] = key
        self._posted.move_to_end(event_id)
        while len(self._posted) > REMEMBERED:
            self._posted.popitem(last=False)

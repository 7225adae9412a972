"""The Matrix sync loop: reactions, thread replies, edits, commands and invites in; answers out.

Each ``/sync`` batch is handled before its ``next_batch`` is saved, so a crash replays the batch
rather than losing it (nio's ``store_sync_tokens`` saves before its callbacks run); replayed
events, and two replicas syncing one account, are deduped by event id in the store. A ``limited``
batch is backfilled from ``/messages`` first, oldest first, so a reply in the gap still answers.
With no saved token the first sync's timelines are history and skipped; Synapse may answer it
from a cache of up to two minutes, so later events are matched only to prompts this database
posted (or is posting), never by the elicitation key alone.

With encryption on, this loop holds the device's crypto state (under the Matrix lease): each run
restores it and resumes from the token it carries; after each batch the token goes into the state
and a snapshot into the database before the ``kv`` token, and only then the next long poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable
from typing import Any

import structlog
from nio import ErrorResponse, MegolmEvent, SyncResponse, WhoamiResponse

from adapters.matrix import translate as inbound
from adapters.matrix.chat import MatrixChat, call
from adapters.matrix.e2ee.crypto import MatrixCrypto
from adapters.matrix.e2ee.undecryptable import KEY_WAIT, Undecryptable, report
from adapters.matrix.errors import from_exception, from_response
from adapters.matrix.intake.handling import RoomEvents
from bot.domain.errors import (
    ConfigError,
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from bot.domain.ports import Elicitations
from bot.domain.store import Values

log = structlog.get_logger("elicitbot.matrix")

POLL_TIMEOUT_MS = 30_000
TIMELINE_LIMIT = 50
BACKFILL_LIMIT = 1_000
MAX_BACKOFF = 5.0
MAX_EVENT_FAILURES = 5
STOP_GRACE = 2.0


def token_key(user_id: str, device_id: str) -> str:
    """Where the sync token lives in the Values store."""
    return f"matrix.next_batch:{user_id}:{device_id}"


class MatrixListener:
    """Syncs the bot account; ``ready`` is True while the last sync succeeded."""

    def __init__(
        self,
        chat: MatrixChat,
        elicitations: Elicitations,
        values: Values,
        *,
        device_id: str,
        bots: Iterable[str] = (),
        timeline_limit: int = TIMELINE_LIMIT,
        max_backoff: float = MAX_BACKOFF,
        key_wait: float = KEY_WAIT,
    ) -> None:
        self.chat = chat
        self.client = chat.client
        self.crypto = chat.crypto
        self.elicitations = elicitations
        self.values = values
        self.user_id = chat.user_id
        self.device_id = device_id
        self.bots = frozenset(bots)
        self.max_backoff = max_backoff
        self.filter: dict[str, Any] = {
            "room": {
                # The bot's own events too (``inbound.classify`` drops them): with a
                # ``not_senders`` filter each own event of a burst woke this sync on Synapse,
                # which recomputed it over every event so far to find nothing: quadratic.
                "timeline": {"limit": timeline_limit},
                # Every sender's member event, every time, so nio knows their names after a
                # restart too (RoomEvents names people by their display name).
                "state": {"lazy_load_members": True, "include_redundant_members": True},
                "ephemeral": {"not_types": ["*"]},
                "account_data": {"not_types": ["*"]},
            },
            "presence": {"not_types": ["*"]},
            "account_data": {"not_types": ["*"]},
        }
        self.events = RoomEvents(chat, elicitations, bots=self.bots)
        self.undecryptable: Undecryptable | None = None
        if self.crypto is not None:
            notify = functools.partial(report, self.events)
            self.undecryptable = Undecryptable(self.crypto, notify, key_wait=key_wait)
        self.since: str | None = None
        self.ready = False
        self.backfilled = 0
        self.last_event_id: str | None = None
        """The last timeline event this listener went through (handled or not)."""
        self._loaded = False
        self._connected = False
        self._task: asyncio.Task[None] | None = None
        self._failures: dict[str, int] = {}

    @property
    def key(self) -> str:
        return token_key(self.user_id, self.device_id)

    @property
    def handled(self) -> int:
        """Events acted on (an answer attempt, a claim, a command, an edit)."""
        return self.events.handled

    async def connect(self) -> None:
        """``whoami``: the token works and belongs to the configured user and device."""
        try:
            who = await call("whoami", self.client.whoami, WhoamiResponse)
        except PermanentDeliveryError as exc:
            raise ConfigError(
                f"matrix.access_token_env: the homeserver refused the token ({exc})"
            ) from None
        except DeliveryError as exc:
            raise ConfigError(f"matrix.homeserver: no answer to whoami ({exc})") from None
        assert who is not None  # noqa: S101 - no errcode is accepted
        if who.user_id != self.user_id:
            raise ConfigError(
                f"matrix.user_id: the token belongs to {who.user_id}, not {self.user_id}"
            )
        if who.device_id is not None and who.device_id != self.device_id:
            raise ConfigError(
                f"matrix.device_id: the token belongs to device {who.device_id}, "
                f"not {self.device_id}"
            )
        if self.crypto is not None:
            await self.crypto.check()
        self._connected = True
        log.info(
            "matrix.connected",
            user_id=self.user_id,
            device_id=self.device_id,
            encryption=self.crypto is not None,
        )

    async def start(self) -> None:
        """Check the token (unless ``connect()`` already did) and start syncing in a task."""
        if not self._connected:
            await self.connect()
        self._task = asyncio.create_task(self.run(), name="matrix-sync")

    async def stop(self) -> None:
        """Cancel the long poll at once; give notices in flight ``STOP_GRACE`` seconds."""
        self.ready = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.undecryptable is not None:
            await self.undecryptable.aclose()
        if self.events.background:
            _, pending = await asyncio.wait(self.events.background, timeout=STOP_GRACE)
            for left in pending:
                left.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def drain(self) -> None:
        """Wait for the notices sent in the background (tests, benchmarks)."""
        while self.events.background:
            await asyncio.gather(*list(self.events.background), return_exceptions=True)

    async def run(self) -> None:
        """Sync until cancelled; failures back off and never end the loop. Each run starts from
        the stored token: under a lease another replica may have synced on meanwhile."""
        self._loaded = False
        self.ready = False
        failures = 0
        try:
            while True:
                try:
                    await self.sync_once()
                    failures = 0
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the loop's one boundary: log, back off, sync again
                    failures += 1
                    self.ready = False
                    error = exc if isinstance(exc, DeliveryError) else from_exception("sync", exc)
                    wait = error.retry_after if isinstance(error, TransientDeliveryError) else None
                    delay = wait if wait is not None else min(self.max_backoff, 0.25 * 2**failures)
                    log.warning(
                        "matrix.sync_failed", error=str(error), failures=failures, retry_in=delay
                    )
                    await asyncio.sleep(delay)
        finally:
            if self.crypto is not None:
                await self._hand_off(self.crypto)

    async def _hand_off(self, crypto: MatrixCrypto) -> None:
        """The lease handoff: answers still waiting for their key reported now (while the lease
        is ours: after it, only its new holder may send encrypted), a last snapshot (likewise),
        then the crypto state unloaded."""
        if self.undecryptable is not None and await crypto.ours():

            async def report_all() -> None:
                assert self.undecryptable is not None  # noqa: S101 - checked above
                await self.undecryptable.flush()
                await self.drain()  # their notices, sent while the state is still here

            with contextlib.suppress(Exception):  # best effort, bounded: the stop goes on
                await asyncio.wait_for(report_all(), timeout=STOP_GRACE)
        await crypto.close()

    async def sync_once(self) -> None:
        """One ``/sync`` from the saved token; its events handled, then its token saved."""
        if self.crypto is not None and not self.crypto.active:
            await self.crypto.open()
            self._loaded = False
        if not self._loaded:
            stored = await self.values.get_value(self.key)
            # The restored crypto state carries the token its keys match (docs/matrix-e2ee.md).
            self.since = (self.crypto.sync_token if self.crypto is not None else None) or stored
            self._loaded = True
        first = self.since is None
        self.client.next_batch = self.since  # nio syncs from it when since is None
        response = await self.client.sync(
            # The first sync of a run returns at once, so readiness does not wait a long poll.
            timeout=POLL_TIMEOUT_MS if self.ready else 0,
            sync_filter=self.filter,
            since=self.since,
        )
        if isinstance(response, ErrorResponse):
            raise from_response("sync", response)
        if not isinstance(response, SyncResponse):
            raise TransientDeliveryError(f"matrix sync: unexpected {type(response).__name__}")
        # When the batch came in (the benchmark's trace of an answer: sync → recorded → edit).
        log.debug(
            "matrix.synced",
            events=sum(len(room.timeline.events) for room in response.rooms.join.values()),
        )
        await self._handle(response, first=first)
        if self.crypto is not None:
            await self.crypto.housekeeping()
            await self.crypto.handled(response.next_batch)
        await self.values.set_value(self.key, response.next_batch)
        self.since = response.next_batch
        self.ready = True

    async def _handle(self, response: SyncResponse, *, first: bool) -> None:
        for room_id, invite in response.rooms.invite.items():
            await self.events.on_invite(room_id, [_source(e) for e in invite.invite_state])
        for room_id, room in response.rooms.join.items():
            for state in room.state:
                await self._on_event(room_id, _source(state))
            if first:
                # The first sync of a new bot replays recent history: nothing there is new,
                # but its state changes are the rooms' state now (power levels).
                for event in room.timeline.events:
                    self.events.powers.saw(room_id, _source(event))
                continue
            events = list(room.timeline.events)
            if room.timeline.limited and room.timeline.prev_batch and self.since:
                events = await self._backfill(room_id, room.timeline.prev_batch) + events
            for event in events:
                await self._on_timeline(room_id, event)
                self.last_event_id = _source(event).get("event_id")
        if self.undecryptable is not None:
            # Keys that came in this batch (to-device) may open events that waited for them.
            for room_id, event in self.undecryptable.retry():
                await self._on_timeline(room_id, event)

    async def _on_timeline(self, room_id: str, event: Any) -> None:
        """A timeline event as nio gave it: an undecryptable one waits for its key; a decrypted
        one counts only if its key came from one of its sender's devices."""
        own = getattr(event, "sender", None) == self.user_id  # never acted on
        if self.crypto is not None and self.undecryptable is not None and not own:
            if isinstance(event, MegolmEvent):
                self.undecryptable.saw(room_id, event)
                return
            decrypted = getattr(event, "decrypted", False)
            if decrypted and not await self.crypto.sent_by_sender(room_id, event):
                return
        await self._on_event(room_id, _source(event))

    async def _backfill(self, room_id: str, start: str) -> list[Any]:
        """The events a limited sync left out, back to the saved token, oldest first."""
        assert self.since is not None  # noqa: S101 - only incremental syncs are limited
        found = await self.chat.messages_between(room_id, start, self.since, BACKFILL_LIMIT)
        if len(found) >= BACKFILL_LIMIT:
            log.warning("matrix.backfill_capped", room_id=room_id, events=len(found))
        self.backfilled += len(found)
        log.info("matrix.backfilled", room_id=room_id, events=len(found))
        return found

    async def _on_event(self, room_id: str, event: dict[str, Any]) -> None:
        """Act on one event. A transient failure fails the batch (retried from the same token);
        an event failing again and again is given up on, so one event cannot stall the room."""
        self.events.powers.saw(room_id, event)  # a state change counts from the next event
        item = inbound.classify(event, own_user_id=self.user_id)
        if item is None:
            return
        event_id = item.event_id
        try:
            await self.events.handle(room_id, item)
        except PermanentDeliveryError as exc:
            log.warning(
                "matrix.event_failed", room_id=room_id, event_id=item.event_id, error=str(exc)
            )
        except Exception:
            count = self._failures.get(event_id, 0) + 1
            self._failures[event_id] = count
            if count >= MAX_EVENT_FAILURES:
                log.exception("matrix.event_given_up", room_id=room_id, event_id=event_id)
                self.events.finished(event_id)
                return
            raise
        self._failures.pop(event_id, None)
        self.events.finished(event_id)


def _source(event: Any) -> dict[str, Any]:
    """An event's raw JSON. nio pops ``content`` out of the source of some events it parses
    (an invite's member event): it is put back from the parsed event."""
    source = getattr(event, "source", None)
    if not isinstance(source, dict):
        return {}
    content = getattr(event, "content", None)
    if "content" not in source and isinstance(content, dict):
        return {**source, "content": content}
    return source

"""The Matrix sync loop: reactions, thread replies, edits, commands and invites in; answers out.

:class:`MatrixListener` uses the bot's access token and fixed device from the config (no login:
a new login would make a new device and lose the homeserver's transaction-id dedupe). Each
``/sync`` batch is handled first and its ``next_batch`` saved through the
:class:`~bot.domain.ports.KeyValue` port afterwards, so a crash replays the batch rather than
losing it (nio's own ``store_sync_tokens`` saves before its callbacks run, reliability.md §2.2).
Replayed events are recognised by event id in the store (``Elicitations.first_time``), which also
keeps two replicas syncing the same account from handling one event twice.

A ``limited`` batch (more events than the timeline limit since the last sync) is backfilled from
``/messages`` back to the saved token before the batch's own events, oldest first, so a reply in
the gap still answers, in order.

With no saved token (a new bot, or a new database) the first sync's timelines are history and
are skipped; only its invites are acted on. Synapse may answer that first sync from a cache of up
to two minutes, so the next batches can still carry older events: they are matched only to
prompts this database posted (or is posting), never by the elicitation key alone.

Invites are accepted from configured workspace admins only; any other invite is declined.
Encrypted rooms are not supported: the bot says so once, in the room (unencrypted) and in the
log, and refuses to post there.

Refusals, help and confirmations go back as threaded notices (sent in the background, so a slow
homeserver never holds up the next answer). Stopping cancels the long poll at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

import structlog
from nio import (
    ErrorResponse,
    JoinResponse,
    RoomLeaveResponse,
    SyncResponse,
    WhoamiResponse,
)

from adapters.matrix import inbound
from adapters.matrix.chat import MatrixChat, call
from adapters.matrix.commands import parse_command, run_command
from adapters.matrix.errors import from_exception, from_response
from adapters.matrix.render import MARKER, reply_content, txn_digest
from bot.domain.errors import (
    ConfigError,
    DeliveryError,
    PermanentDeliveryError,
    TransientDeliveryError,
)
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    Elicitation,
    RefusalCode,
    Status,
)
from bot.domain.ports import AnswerOutcome, Elicitations, KeyValue, Notice
from bot.domain.replies import HelpReply
from bot.domain.rules import describe_answer, format_time, judge

CLAIM_REACTION = "🙋"
"""A reaction starting with this (any skin tone or gender) claims the question."""
CLAIM_COMMANDS = frozenset({"!elicitbot claim", "!elicitbot i'm on it", "i'm on it"})

log = structlog.get_logger("elicitbot.matrix")

POLL_TIMEOUT_MS = 30_000
TIMELINE_LIMIT = 50
BACKFILL_LIMIT = 1_000
BACKFILL_PAGE = 100
MAX_BACKOFF = 5.0
MAX_EVENT_FAILURES = 5
STOP_GRACE = 2.0
REMEMBERED = 4096

ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted. elicitbot does not support encryption, so it cannot "
    "read answers or post questions here. Route elicitbot to an unencrypted room instead."
)
REDACTION_REASON = "A secret answer is never taken from a chat message."
_IDENTITY_REFUSALS = frozenset({RefusalCode.ASKER, RefusalCode.AGENT, RefusalCode.BOT})


def claim_id(item: inbound.InboundEvent) -> str:
    """What dedupes an event in the store: its event id, except a reaction, which counts once per
    sender, message and key (a reaction taken back and made again is not a new attempt)."""
    if isinstance(item, inbound.Reaction):
        return f"reaction:{txn_digest(item.target, item.sender, item.key)}"
    return item.event_id


def token_key(user_id: str, device_id: str) -> str:
    """Where the sync token lives in the KeyValue store."""
    return f"matrix.next_batch:{user_id}:{device_id}"


class _Lru:
    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._items: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, item: str) -> bool:
        return item in self._items

    def add(self, item: str) -> None:
        self._items[item] = None
        self._items.move_to_end(item)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class MatrixListener:
    """Syncs the bot account and turns what people do in rooms into answers.

    ``start()`` checks the token (``whoami``: the configured user and device) and runs the loop
    in a task; ``stop()`` cancels it. ``ready`` is True while the last sync succeeded.
    """

    def __init__(
        self,
        chat: MatrixChat,
        elicitations: Elicitations,
        values: KeyValue,
        *,
        device_id: str,
        bots: Iterable[str] = (),
        poll_timeout_ms: int = POLL_TIMEOUT_MS,
        timeline_limit: int = TIMELINE_LIMIT,
        backfill_limit: int = BACKFILL_LIMIT,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self.chat = chat
        self.client = chat.client
        self.elicitations = elicitations
        self.values = values
        self.user_id = chat.user_id
        self.device_id = device_id
        self.bots = frozenset(bots)
        self.poll_timeout_ms = poll_timeout_ms
        self.backfill_limit = backfill_limit
        self.max_backoff = max_backoff
        self.filter: dict[str, Any] = {
            "room": {
                "timeline": {"limit": timeline_limit},
                "state": {"lazy_load_members": True},
                "ephemeral": {"not_types": ["*"]},
                "account_data": {"not_types": ["*"]},
            },
            "presence": {"not_types": ["*"]},
            "account_data": {"not_types": ["*"]},
        }
        self.since: str | None = None
        self.ready = False
        self.handled = 0
        """Events acted on (an answer attempt, a command, an edit), for tests and metrics."""
        self.backfilled = 0
        self.last_event_id: str | None = None
        """The last timeline event this listener went through (handled or not)."""
        self._loaded = False
        self._connected = False
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._unfinished: set[str] = set()
        self._failures: dict[str, int] = {}
        self._not_ours = _Lru()
        self._warned: set[str] = set()

    @property
    def key(self) -> str:
        return token_key(self.user_id, self.device_id)

    # ------------------------------------------------------------------ lifecycle

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
        self._connected = True
        log.info("matrix.connected", user_id=self.user_id, device_id=self.device_id)

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
        if self._background:
            _, pending = await asyncio.wait(self._background, timeout=STOP_GRACE)
            for left in pending:
                left.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def drain(self) -> None:
        """Wait for the notices sent in the background (tests, benchmarks)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def run(self) -> None:
        """Sync until cancelled; failures back off (the homeserver's delay, else 0.5 s doubling
        up to ``max_backoff``) and never end the loop."""
        failures = 0
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

    async def sync_once(self) -> None:
        """One ``/sync`` from the saved token; its events handled, then its token saved."""
        if not self._loaded:
            self.since = await self.values.get_value(self.key)
            self._loaded = True
        first = self.since is None
        self.client.next_batch = self.since  # nio syncs from it when since is None
        response = await self.client.sync(
            # The first sync of a run returns at once, so readiness does not wait a long poll.
            timeout=self.poll_timeout_ms if self.ready else 0,
            sync_filter=self.filter,
            since=self.since,
        )
        if isinstance(response, ErrorResponse):
            raise from_response("sync", response)
        if not isinstance(response, SyncResponse):
            raise TransientDeliveryError(f"matrix sync: unexpected {type(response).__name__}")
        await self._handle(response, first=first)
        await self.values.set_value(self.key, response.next_batch)
        self.since = response.next_batch
        self.ready = True

    # ------------------------------------------------------------------ one batch

    async def _handle(self, response: SyncResponse, *, first: bool) -> None:
        for room_id, invite in response.rooms.invite.items():
            await self._on_invite(room_id, [_source(e) for e in invite.invite_state])
        for room_id, room in response.rooms.join.items():
            for state in room.state:
                await self._on_event(room_id, _source(state))
            if first:
                # The first sync of a new bot replays recent history: nothing there is new.
                continue
            events = [_source(e) for e in room.timeline.events]
            if room.timeline.limited and room.timeline.prev_batch and self.since:
                events = await self._backfill(room_id, room.timeline.prev_batch) + events
            for event in events:
                await self._on_event(room_id, event)
                self.last_event_id = event.get("event_id")

    async def _backfill(self, room_id: str, start: str) -> list[dict[str, Any]]:
        """The events a limited sync left out, back to the saved token, oldest first."""
        assert self.since is not None  # noqa: S101 - only incremental syncs are limited
        found = await self.chat.messages_between(room_id, start, self.since, self.backfill_limit)
        if len(found) >= self.backfill_limit:
            log.warning("matrix.backfill_capped", room_id=room_id, events=len(found))
        self.backfilled += len(found)
        log.info("matrix.backfilled", room_id=room_id, events=len(found))
        return found

    async def _on_event(self, room_id: str, event: dict[str, Any]) -> None:
        """Act on one event. A transient failure fails the batch (retried from the same token);
        an event failing again and again is given up on, so one event cannot stall the room."""
        item = inbound.classify(event, own_user_id=self.user_id)
        if item is None:
            return
        claimed = claim_id(item)
        try:
            await self._dispatch(room_id, item)
        except PermanentDeliveryError as exc:
            log.warning(
                "matrix.event_failed", room_id=room_id, event_id=item.event_id, error=str(exc)
            )
        except Exception:
            count = self._failures.get(claimed, 0) + 1
            self._failures[claimed] = count
            if count >= MAX_EVENT_FAILURES:
                log.exception("matrix.event_given_up", room_id=room_id, event_id=item.event_id)
                self._unfinished.discard(claimed)
                return
            raise
        self._failures.pop(claimed, None)
        self._unfinished.discard(claimed)

    async def _dispatch(self, room_id: str, item: inbound.InboundEvent) -> None:
        if isinstance(item, inbound.Encrypted):
            await self._encrypted_room(room_id)
        elif isinstance(item, inbound.Reaction):
            await self._on_reaction(room_id, item)
        elif isinstance(item, inbound.Reply):
            await self._on_reply(room_id, item)
        elif isinstance(item, inbound.Edit):
            await self._on_edit(room_id, item)
        else:
            await self._on_command(room_id, item)

    async def _claim(self, claimed: str) -> bool:
        """First sight of this event (store-deduped by :func:`claim_id`); one whose handling
        failed here before is ours to finish."""
        if claimed in self._unfinished:
            return True
        if not await self.elicitations.first_time("matrix", claimed):
            return False
        self._unfinished.add(claimed)
        return True

    # ------------------------------------------------------------------ answers

    async def _on_reaction(self, room_id: str, r: inbound.Reaction) -> None:
        key = await self._key_for(room_id, r.target)
        if key is None:
            return
        view = await self.elicitations.view(key)
        if view is None:
            return
        if r.key.startswith(CLAIM_REACTION):
            if await self._claim(claim_id(r)):
                self.handled += 1
                await self._on_im_on_it(room_id, key, r.target, r.sender, trigger=r.event_id)
            return
        chosen = inbound.reaction_choice(view.elicitation, r.key)
        if chosen is None or not await self._claim(claim_id(r)):
            return
        self.handled += 1
        who = inbound.identity(r.sender, bots=self.bots)
        attempt = Attempt(respondent=who, option_ids=chosen, via=f"matrix:{room_id}")
        outcome = await self.elicitations.answer(key, attempt)
        # A notice cannot reply to a reaction: it goes in the prompt's thread.
        self._tell(
            room_id,
            r.target,
            view.elicitation,
            outcome,
            r.sender,
            trigger=r.event_id,
            reply_to=r.target,
        )

    async def _on_reply(self, room_id: str, reply: inbound.Reply) -> None:
        key = await self._key_for(room_id, reply.root)
        if key is None or not await self._claim(reply.event_id):
            return
        self.handled += 1
        if " ".join(reply.body.split()).casefold() in CLAIM_COMMANDS:
            await self._on_im_on_it(room_id, key, reply.root, reply.sender, trigger=reply.event_id)
            return
        await self._attempt_text(
            room_id,
            key,
            reply.root,
            reply.sender,
            reply.body,
            trigger=reply.event_id,
            reply_to=reply.event_id,
        )

    async def _on_edit(self, room_id: str, edit: inbound.Edit) -> None:
        """An edited reply is a new attempt while nobody has answered; it never changes a
        recorded answer, and an edit by anyone but the reply's sender is ignored."""
        original = await self.chat.get_event(room_id, edit.original)
        if original is None or original.get("sender") != edit.sender:
            return
        root = inbound.reply_root(original)
        key = None if root is None else await self._key_for(room_id, root)
        if key is None or root is None:
            return
        view = await self.elicitations.view(key)
        if view is None or view.status is not Status.PENDING:
            return
        if not await self._claim(edit.event_id):
            return
        self.handled += 1
        await self._attempt_text(
            room_id,
            key,
            root,
            edit.sender,
            edit.body,
            trigger=edit.event_id,
            reply_to=edit.original,
        )

    async def _attempt_text(
        self,
        room_id: str,
        key: str,
        root: str,
        sender: str,
        body: str,
        *,
        trigger: str,
        reply_to: str,
    ) -> None:
        view = await self.elicitations.view(key)
        if view is None:
            return
        e = view.elicitation
        if e.answer_mode is AnswerMode.SECRET:
            # A secret typed in a room is not taken (rule 7): it is taken out of the room too.
            for event_id in {trigger, reply_to}:
                self._spawn(
                    self.chat.redact(room_id, event_id, REDACTION_REASON), what="redact a secret"
                )
        who = inbound.identity(sender, bots=self.bots)
        via = f"matrix:{room_id}"
        attempt = inbound.reply_attempt(e, body, who, via)
        if isinstance(attempt, HelpReply):
            empty = Attempt(respondent=who, via=via)
            if view.status is Status.PENDING and not self._refused_as_person(e, empty, view.now):
                self._notify(
                    room_id,
                    root,
                    sender,
                    attempt.message,
                    trigger=trigger,
                    reply_to=reply_to,
                    mention=True,
                )
                return
            attempt = empty  # the rules say who answered, or that this person may not
        outcome = await self.elicitations.answer(key, attempt)
        self._tell(room_id, root, e, outcome, sender, trigger=trigger, reply_to=reply_to)

    def _refused_as_person(self, e: Elicitation, attempt: Attempt, now: Any) -> bool:
        result = judge(e, attempt, self.elicitations.people, now)
        return getattr(result, "code", None) in _IDENTITY_REFUSALS

    async def _on_im_on_it(
        self, room_id: str, key: str, root: str, sender: str, *, trigger: str
    ) -> None:
        """ "I'm on it" (🙋 on the prompt, or ``!elicitbot claim`` in its thread): escalation and
        follow-ups wait; every copy shows who (the outbox edits them)."""
        who = inbound.identity(sender, bots=self.bots)
        outcome = await self.elicitations.claim(key, who)
        if outcome.claim is not None:
            text = (
                f"🙋 {sender} is on it until {format_time(outcome.claim.until)}: "
                "escalation and follow-ups wait."
            )
            mention = False
        else:
            text = outcome.refusal.message if outcome.refusal else "Nothing to claim."
            mention = True
        self._notify(
            room_id, root, sender, text, trigger=trigger, reply_to=trigger, mention=mention
        )

    def _tell(
        self,
        room_id: str,
        root: str,
        e: Elicitation,
        outcome: AnswerOutcome,
        sender: str,
        *,
        trigger: str,
        reply_to: str,
    ) -> None:
        """The thread hears the result: a confirmation, or the refusal, naming (and for a
        refusal mentioning) the person."""
        result = outcome.result
        if isinstance(result, Answer):
            text = f"✅ Recorded: {describe_answer(e, result)}. Thank you."
            mention = False
        else:
            text, mention = result.message, True
        self._notify(
            room_id, root, sender, text, trigger=trigger, reply_to=reply_to, mention=mention
        )

    def _notify(
        self,
        room_id: str,
        root: str,
        sender: str,
        text: str,
        *,
        trigger: str,
        reply_to: str,
        mention: bool,
    ) -> None:
        """A threaded notice; its transaction id follows from the event that caused it, so a
        replayed event cannot notify twice."""
        notice = Notice(
            user=f"matrix:{sender}",
            text=text,
            thread={"room_id": room_id, "event_id": root},
            extra={"mention": mention, "reply_to": reply_to},
        )
        self._spawn(
            self.chat.notify(
                f"matrix:{room_id}",
                notice,
                idempotency_key=f"elicitbot-notice-{txn_digest(trigger)}",
            ),
            what="notice",
        )

    async def _key_for(self, room_id: str, event_id: str) -> str | None:
        """The elicitation a message belongs to: the store's delivery refs, a prompt this process
        just posted, or our own prompt whose post is still in flight elsewhere (another replica
        posted it and has not stored its ref yet), known by its content marker."""
        key = self.chat.posted_key(event_id) or await self.elicitations.key_for_message(event_id)
        if key is not None or event_id in self._not_ours:
            return key
        event = await self.chat.get_event(room_id, event_id)
        content = (event or {}).get("content")
        marker = content.get(MARKER) if isinstance(content, Mapping) else None
        claimed = marker.get("key") if isinstance(marker, Mapping) else None
        if (
            event is not None
            and event.get("sender") == self.user_id
            and isinstance(claimed, str)
            and await self._in_flight(claimed, room_id)
        ):
            return claimed
        self._not_ours.add(event_id)
        return None

    async def _in_flight(self, key: str, room_id: str) -> bool:
        """A post of ``key`` to this room is under way (no ref stored). An old prompt naming the
        same key (left from an earlier database) does not pass: its delivery has another ref."""
        return any(
            d.get("destination") == f"matrix:{room_id}" and d.get("state") in ("planned", "posting")
            for d in await self.elicitations.deliveries(key)
        )

    # ------------------------------------------------------------------ rooms

    async def _on_command(self, room_id: str, message: inbound.CommandMessage) -> None:
        command = parse_command(message.body)
        if command is None or not await self._claim(message.event_id):
            return
        self.handled += 1
        reply = await run_command(
            command,
            elicitations=self.elicitations,
            room_id=room_id,
            sender=message.sender,
            power_level=lambda: self.chat.power_level(room_id, message.sender),
        )
        log.info("matrix.command", room_id=room_id, sender=message.sender, verb=command.verb)
        self._spawn(
            self.chat.send(
                room_id,
                "m.room.message",
                reply_content(reply, message.event_id),
                f"elicitbot-cmd-{txn_digest(message.event_id)}",
                "command reply",
            ),
            what="command reply",
        )

    async def _on_invite(self, room_id: str, invite_state: list[dict[str, Any]]) -> None:
        inviter = None
        encrypted = False
        for event in invite_state:
            raw = event.get("content")
            content: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            if (
                event.get("type") == "m.room.member"
                and event.get("state_key") == self.user_id
                and content.get("membership") == "invite"
            ):
                inviter = event.get("sender")
            if event.get("type") == "m.room.encryption" and content:
                encrypted = True
        if not isinstance(inviter, str):
            log.warning("matrix.invite_unreadable", room_id=room_id)
            return
        if f"matrix:{inviter}" not in self.elicitations.people.admins:
            if await self.chat.membership(room_id, self.user_id) == "join":
                return  # a stale invite of a room the bot is in: declining would leave it
            log.info("matrix.invite_declined", room_id=room_id, inviter=inviter)
            await self._quietly(
                call("decline invite", lambda: self.client.room_leave(room_id), RoomLeaveResponse)
            )
            return
        await call("join", lambda: self.client.join(room_id), JoinResponse)
        log.info("matrix.joined", room_id=room_id, inviter=inviter)
        if encrypted or await self.chat.is_encrypted(room_id):
            await self._encrypted_room(room_id)

    async def _encrypted_room(self, room_id: str) -> None:
        self.chat.mark_encrypted(room_id)
        if room_id in self._warned:
            return
        self._warned.add(room_id)
        log.warning(
            "matrix.encrypted_room",
            room_id=room_id,
            problem="end-to-end encrypted: elicitbot cannot read or post questions here",
        )
        content = {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}
        await self._quietly(
            self.chat.send(
                room_id,
                "m.room.message",
                content,
                f"elicitbot-e2ee-{txn_digest(room_id)}",
                "e2ee notice",
            )
        )

    # ------------------------------------------------------------------ background work

    async def _quietly(self, work: Coroutine[Any, Any, Any]) -> None:
        try:
            await work
        except DeliveryError as exc:
            log.warning("matrix.call_failed", error=str(exc))

    def _spawn(self, work: Coroutine[Any, Any, Any], *, what: str) -> None:
        async def run() -> None:
            try:
                await work
            except DeliveryError as exc:
                log.warning("matrix.send_failed", what=what, error=str(exc))

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)


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

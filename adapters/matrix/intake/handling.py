"""What people do in rooms, handed to the core (``Elicitations.act``) one classified event at a
time, the outcome shown as a threaded notice or a command's rich reply.

Notices go out in the background, so a slow homeserver never holds up the next answer; each
one's transaction id follows from the event that caused it, so a replayed event cannot notify
twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from functools import partial
from typing import Any

import structlog
from nio import JoinResponse, RoomLeaveResponse

from adapters.matrix import translate as inbound
from adapters.matrix.api.approvers import ApproverNames
from adapters.matrix.api.power import RoomPowers
from adapters.matrix.chat import MatrixChat, call
from adapters.matrix.intake.commands import reply_text
from adapters.matrix.intake.notices import (
    REDACTION_REASON,
    Said,
    encrypted_content,
    reply_content,
    said,
)
from adapters.matrix.intake.prompts import Prompts
from adapters.matrix.intake.reactions import key_index
from adapters.matrix.intake.selection import (
    NOTHING_CHOSEN,
    SUBMIT_KEY,
    Selections,
    Toggle,
    cannot_read,
    toggles,
)
from adapters.matrix.markup.html import txn_digest
from bot.domain.actions import (
    MODERATOR_LEVEL,
    Choose,
    ClaimIt,
    OnView,
    OutcomeKind,
    Reply,
    Translated,
)
from bot.domain.errors import DeliveryError
from bot.domain.model import (
    AnswerMode,
    Destination,
    Elicitation,
    ElicitationKey,
    IdentityKey,
    Status,
)
from bot.domain.policy import Standing
from bot.domain.ports import Elicitations, Notice, PromptView
from bot.domain.records import NoticeKind
from bot.domain.refs import MatrixRef

log = structlog.get_logger("elicitbot.matrix")


class RoomEvents:
    """Acts on classified room events and invites for one bot account."""

    def __init__(
        self, chat: MatrixChat, elicitations: Elicitations, *, bots: frozenset[str]
    ) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.user_id = chat.user_id
        self.bots = bots
        self.handled = 0
        """Events acted on (an answer attempt, a claim, a command, an edit)."""
        self.background: set[asyncio.Task[None]] = set()
        self._unfinished: set[str] = set()
        """Dedupe ids whose handling began here and has not finished (failed: ours to retry)."""
        self._claims: dict[str, str] = {}
        """Event id -> the dedupe id its handling claimed, until :meth:`finished`."""
        self._warned: set[str] = set()
        self.selections = Selections(chat)
        self.prompts = Prompts(chat, elicitations)
        self.powers = RoomPowers(chat.room_state)
        """Power levels in the rooms, fed by the sync loop (``matrix-power:<n>`` approvers)."""
        self.names = ApproverNames(chat.display_name, elicitations)
        """The route's Matrix approvers by name, for the refusal that says who may decide."""

    async def handle(self, room_id: str, item: inbound.InboundEvent) -> None:
        if isinstance(item, inbound.Encrypted):
            if self.chat.crypto is not None:
                self.chat.mark_encrypted(room_id)  # fine: encrypted events decrypt in the sync
            else:
                await self.encrypted_room(room_id)
        elif isinstance(item, inbound.Reaction):
            await self._on_reaction(room_id, item)
        elif isinstance(item, inbound.Reply):
            await self._on_reply(room_id, item)
        elif isinstance(item, inbound.Edit):
            await self._on_edit(room_id, item)
        elif isinstance(item, inbound.Redaction):
            await self._on_redaction(room_id, item)
        else:
            await self._on_command(room_id, item)

    def finished(self, event_id: str) -> None:
        """The event ``event_id`` is done with (handled, or given up on): whatever it claimed."""
        claimed = self._claims.pop(event_id, None)
        if claimed is not None:
            self._unfinished.discard(claimed)

    async def _standing(self, room_id: str, sender: str, e: Elicitation) -> Standing:
        """The sender's power level here, and the route's Matrix approvers by name in this room."""
        standing, names = await asyncio.gather(
            self.powers.standing(room_id, sender), self.names.names(room_id, e)
        )
        return replace(standing, names=names) if names else standing

    async def _first_time(self, event_id: str, claimed: str | None = None) -> bool:
        """First sight of this event, store-deduped by ``claimed`` (else its event id); one whose
        handling failed here before is ours to finish."""
        claimed = claimed or event_id
        if claimed not in self._unfinished:
            if not await self.elicitations.first_time("matrix", claimed):
                return False
            self._unfinished.add(claimed)
        self._claims[event_id] = claimed
        return True

    # ------------------------------------------------------------------ answers

    async def _on_reaction(self, room_id: str, r: inbound.Reaction) -> None:
        """The core reads the elicitation once, :meth:`_reacted` translates the reaction against
        that view, the core judges it; the thread hears the outcome."""
        key = await self.prompts.key_for(room_id, r.target)
        if key is None:
            return
        name = await self.chat.display_name(room_id, r.sender)
        who = inbound.identity(r.sender, bots=self.bots, name=name)
        chosen: list[tuple[str, ...]] = []  # a ✅'s options, for its selection notice after
        translate = partial(self._reacted, room_id, key, r, name, chosen)
        outcome = await self.elicitations.act(OnView(key, who, inbound.via(room_id), translate))
        view = outcome.view
        if view is not None and outcome.kind is not OutcomeKind.IGNORED:
            e = view.elicitation
            # A notice cannot reply to a reaction: it goes in the prompt's thread (a claim's
            # names the reaction itself).
            claim = r.key.startswith(inbound.CLAIM_REACTION)
            words = said(outcome, e, r.sender)
            if words is not None:
                reply_to = r.event_id if claim else r.target
                self.tell(room_id, r.target, r.sender, words, trigger=r.event_id, reply_to=reply_to)
            if chosen and outcome.kind is OutcomeKind.ANSWERED:
                done = self.selections.submitted(
                    room_id, r.target, e, r.sender, chosen[0], trigger=r.event_id
                )
                self._spawn(done, what="selection submitted")
        self.finished(r.event_id)

    async def _reacted(
        self,
        room_id: str,
        key: ElicitationKey,
        r: inbound.Reaction,
        name: str | None,
        chosen: list[tuple[str, ...]],
        view: PromptView,
    ) -> Translated:
        """The reaction ``r`` on a copy of ``view`` as the core's action (None: nothing to
        judge), deduped by its :func:`inbound.claim_id`."""
        e = view.elicitation
        if toggles(view) and not r.key.startswith(inbound.CLAIM_REACTION):
            return await self._on_selection(room_id, key, view, r, name, chosen)
        action = inbound.on_reaction(
            key,
            e,
            r,
            room_id,
            shown=await self.prompts.shown_on(view, r.target),
            bots=self.bots,
            name=name,
            standing=await self._standing(room_id, r.sender, e),
            subject=self.chat.shown_subject(r.target),
        )
        claimed = inbound.claim_id(r, reopened=inbound.reopenings(view.writeback))
        if action is None or not await self._first_time(r.event_id, claimed):
            return None
        self.handled += 1
        return action

    async def _on_selection(
        self,
        room_id: str,
        key: ElicitationKey,
        view: PromptView,
        r: inbound.Reaction,
        name: str | None,
        chosen: list[tuple[str, ...]],
    ) -> Choose | None:
        """A pending multiple choice: a keycap toggles (the notice refreshed in the background),
        ✅ submits what the keycaps choose now (its options added to ``chosen``)."""
        e = view.elicitation
        index = key_index(r.key)
        if index is not None:
            if index >= len(e.options) or f"matrix:{r.sender}" in self.bots:
                return None  # names no option; a bot's taps are no one's selection
            self.selections.saw(r.event_id, Toggle(room_id, r.target, key, r.sender))
            self._spawn(
                self.selections.show(room_id, r.target, e, r.sender, trigger=r.event_id),
                what="selection",
            )
            return None
        # Each ✅ is its own attempt (after "nothing chosen" or a refusal, a new ✅ counts).
        if r.key.strip() != SUBMIT_KEY or not await self._first_time(r.event_id):
            return None
        self.handled += 1
        now = await self.selections.read(room_id, r.target, e, r.sender)
        if now.unreadable or not now.chosen:  # a keycap not decrypted yet is unknown, not absent
            text = cannot_read(now.unreadable) if now.unreadable else NOTHING_CHOSEN
            nothing = Said(text, mention=True, kind=NoticeKind.REFUSAL)
            self.tell(room_id, r.target, r.sender, nothing, trigger=r.event_id, reply_to=r.target)
            return None
        chosen.append(now.chosen)
        return inbound.submit(
            key,
            r,
            room_id,
            now.chosen,
            shown=await self.prompts.shown_on(view, r.target),
            bots=self.bots,
            name=name,
            standing=await self._standing(room_id, r.sender, e),
            subject=self.chat.shown_subject(r.target),
        )

    async def _on_redaction(self, room_id: str, redaction: inbound.Redaction) -> None:
        """A keycap taken back: refresh its sender's selection notice (while the question is
        open). One this process did not see needs nothing: ✅ reads the room as it is."""
        toggle = self.selections.toggled_by(redaction.redacts)
        if toggle is None or toggle.room_id != room_id:
            return
        view = await self.elicitations.view(toggle.key)
        if view is None or not toggles(view):
            return
        refresh = self.selections.show(
            room_id, toggle.prompt, view.elicitation, toggle.sender, trigger=redaction.event_id
        )
        self._spawn(refresh, what="selection")

    async def _on_reply(self, room_id: str, reply: inbound.Reply) -> None:
        key = await self.prompts.key_for(room_id, reply.root)
        if key is None or not await self._first_time(reply.event_id):
            return
        await self._text(
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
        key = None if root is None else await self.prompts.key_for(room_id, root)
        if key is None or root is None:
            return
        view = await self.elicitations.view(key)
        pending = view is not None and view.status is Status.PENDING
        if not pending or not await self._first_time(edit.event_id):
            return
        await self._text(
            room_id,
            key,
            root,
            edit.sender,
            edit.body,
            trigger=edit.event_id,
            reply_to=edit.original,
        )

    async def _text(
        self,
        room_id: str,
        key: ElicitationKey,
        root: str,
        sender: str,
        body: str,
        *,
        trigger: str,
        reply_to: str,
    ) -> None:
        """A thread reply or its edit: a claim, or a reply the core reads. The thread hears the
        outcome, naming (and for a refusal or how to answer, mentioning) the person."""
        self.handled += 1
        view = await self.elicitations.view(key)
        if view is None:
            return
        action = inbound.on_reply(
            key,
            sender,
            body,
            room_id,
            shown=await self.prompts.shown_on(view, root),
            bots=self.bots,
            name=await self.chat.display_name(room_id, sender),
            standing=await self._standing(room_id, sender, view.elicitation),
            subject=self.chat.shown_subject(root),
        )
        if isinstance(action, Reply) and view.elicitation.answer_mode is AnswerMode.SECRET:
            # A secret typed in a room is never taken, and it is taken out of the room too.
            for event_id in {trigger, reply_to}:
                self._spawn(
                    self.chat.redact(room_id, event_id, REDACTION_REASON), what="redact a secret"
                )
        if isinstance(action, ClaimIt):
            reply_to = trigger
        words = said(await self.elicitations.act(action), view.elicitation, sender)
        if words is not None:
            self.tell(room_id, root, sender, words, trigger=trigger, reply_to=reply_to)

    def tell(
        self, room_id: str, root: str, sender: str, words: Said, *, trigger: str, reply_to: str
    ) -> None:
        """A notice for ``sender`` in the thread of ``root``, sent in the background; its
        transaction id follows from ``trigger``, so a replayed event cannot notify twice."""
        notice = Notice(
            user=IdentityKey(f"matrix:{sender}"),
            text=words.text,
            thread=MatrixRef(room_id, root),
            kind=words.kind,
            mention=words.mention,
            reply_to=reply_to,
        )
        digest = txn_digest(trigger)
        work = self.chat.notify(
            Destination(f"matrix:{room_id}"), notice, idempotency_key=f"elicitbot-notice-{digest}"
        )
        self._spawn(work, what="notice")

    # ------------------------------------------------------------------ rooms

    async def _on_command(self, room_id: str, message: inbound.CommandMessage) -> None:
        if inbound.command_words(message.body) is None:
            return
        if not await self._first_time(message.event_id):
            return
        self.handled += 1
        level = await self.chat.power_level(room_id, message.sender)
        command = inbound.on_command(
            message,
            room_id,
            elevated=level >= MODERATOR_LEVEL,
            bots=self.bots,
            name=await self.chat.display_name(room_id, message.sender),
        )
        if command is None:
            return
        outcome = await self.elicitations.act(command)
        if outcome.command is None:
            return
        log.info(
            "matrix.command", room_id=room_id, sender=message.sender, verb=outcome.command.verb
        )
        self._spawn(
            self.chat.send(
                room_id,
                "m.room.message",
                reply_content(reply_text(outcome.command), message.event_id),
                f"elicitbot-cmd-{txn_digest(message.event_id)}",
                "command reply",
            ),
            what="command reply",
        )

    async def on_invite(self, room_id: str, invite_state: list[dict[str, Any]]) -> None:
        """Join when a configured workspace admin invites; decline anyone else's invite. A
        direct room the admin made (``is_direct`` on the invite, as Element sends it) is then
        listed as theirs (:meth:`DirectRooms.adopt`), unless the bot cannot post in it."""
        invite = inbound.read_invite(invite_state, own_user_id=self.user_id)
        if invite is None:
            log.warning("matrix.invite_unreadable", room_id=room_id)
            return
        inviter = invite.inviter
        if f"matrix:{inviter}" not in self.elicitations.people.admins:
            if await self.chat.membership(room_id, self.user_id) == "join":
                return  # a stale invite of a room the bot is in: declining would leave it
            log.info("matrix.invite_declined", room_id=room_id, inviter=inviter)
            await self._quietly(
                call(
                    "decline invite",
                    lambda: self.chat.client.room_leave(room_id),
                    RoomLeaveResponse,
                )
            )
            return
        await call("join", lambda: self.chat.client.join(room_id), JoinResponse)
        log.info("matrix.joined", room_id=room_id, inviter=inviter)
        if self.chat.crypto is not None:
            if invite.encrypted:
                self.chat.mark_encrypted(room_id)
        elif invite.encrypted or await self.chat.is_encrypted(room_id):
            await self.encrypted_room(room_id)
            return  # posts here are refused: not a direct room to use
        if invite.direct:
            await self._quietly(self.chat.direct.adopt(room_id, inviter))

    async def encrypted_room(self, room_id: str) -> None:
        """Say once, in the room (unencrypted) and in the log, that elicitbot cannot work here;
        posts to it are refused from now on."""
        self.chat.mark_encrypted(room_id)
        if room_id in self._warned:
            return
        self._warned.add(room_id)
        log.warning(
            "matrix.encrypted_room",
            room_id=room_id,
            problem="end-to-end encrypted: elicitbot cannot read or post questions here",
        )
        await self._quietly(
            self.chat.send(
                room_id,
                "m.room.message",
                encrypted_content(),
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
        self.background.add(task)
        task.add_done_callback(self.background.discard)

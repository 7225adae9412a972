"""Carrying out one outbox row through the ports (:class:`Effects`, for the dispatcher). The row's
id is the idempotency key handed to the adapter; a reminder or escalation whose elicitation closed
before it went out raises :class:`Stale`: dropped and audited, not sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta

from bot.domain import deadlines, lanes
from bot.domain.errors import PermanentDeliveryError
from bot.domain.model import Destination, Elicitation, IdentityKey, Status
from bot.domain.payloads import NotifyPayload, PostPayload, WritebackPayload
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, CopyPolicy, Notice, PromptView
from bot.domain.records import (
    EffectKind,
    NoticeKind,
    OutboxItem,
    Purpose,
    StoredElicitation,
    Timeline,
)
from bot.domain.refs import MessageRef
from bot.domain.store import Store
from bot.domain.views import prompt_view

RENDERED = (EffectKind.POST, EffectKind.UPDATE, EffectKind.SEED)
"""The kinds of row that render their elicitation (their timelines are read with them)."""


class Stale(Exception):  # noqa: N818 - not an error: a row with nothing left to do
    """A reminder or escalation whose question is no longer pending when its turn comes."""


PolicyOf = Callable[[Elicitation], Awaitable[CopyPolicy]]
"""An elicitation's policy route as its copies need it (:meth:`bot.service.Service.copy_policy`):
where approving counts and who may approve."""


class Effects:
    """What one row does, through the chat adapters and answer sinks it is given."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        chats: Mapping[str, ChatAdapter],
        sinks: Mapping[str, AnswerSink],
        link_for: Callable[[str], str],
        policy: PolicyOf | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.chats = chats
        self.sinks = sinks
        self.link_for = link_for
        self.policy = policy
        """None: every surface, anyone."""

    def uncertain(self, item: OutboxItem) -> datetime | None:
        """When an earlier attempt began, if one may have reached the platform."""
        if item.attempts <= 1:
            return None
        return item.first_attempt_at or self.clock.now() - timedelta(days=1)

    async def _view(
        self,
        item: OutboxItem,
        stored: StoredElicitation | None,
        timeline: Timeline | None = None,
        escalation: deadlines.Escalation | None = None,
        *,
        rendered: bool = True,
    ) -> PromptView:
        """The view a copy renders; ``escalation`` on an escalation copy (mentions, originals);
        ``rendered=False`` (a write-back): no copy, so the policy route is not asked."""
        if stored is None:
            raise PermanentDeliveryError(f"elicitation {item.elicitation_key} is gone")
        ask = self.policy if rendered else None
        policy = None if ask is None else await ask(stored.elicitation)
        return prompt_view(
            stored,
            timeline,
            link=self.link_for(item.elicitation_key),
            now=self.clock.now(),
            escalation=escalation,
            policy=policy,
        )

    def seeds(self, destination: Destination) -> bool:
        chat = self.chats.get(destination.platform)
        return chat is not None and chat.seeds

    def _chat(self, destination: Destination) -> ChatAdapter:
        chat = self.chats.get(destination.platform)
        if chat is None:
            raise PermanentDeliveryError(f"{destination.platform} is not configured")
        return chat

    async def execute(
        self,
        item: OutboxItem,
        stored: StoredElicitation | None,
        timeline: Timeline | None = None,
    ) -> MessageRef | None:
        """Carry out one row; returns the message ref of a post."""
        key = f"elicitbot-{item.id}"
        payload = item.payload
        where = Destination(item.target)  # a chat row's target (a write-back's is its source)
        if item.kind is EffectKind.POST:
            escalation = None
            if isinstance(payload, PostPayload) and payload.purpose is Purpose.ESCALATION:
                if stored is None or stored.status is not Status.PENDING:
                    raise Stale("escalation")  # answered (or closed) since it fired
                delivery = await self.store.delivery(item.delivery_id or -1)
                escalation = (
                    delivery.escalation
                    if delivery is not None and delivery.escalation is not None
                    else deadlines.Escalation(mentions=())
                )
            chat = self._chat(where)
            try:
                return await chat.post(
                    where,
                    await self._view(item, stored, timeline, escalation),
                    idempotency_key=key,
                    uncertain=self.uncertain(item),
                )
            finally:
                if chat.post_interval > 0:
                    # Until the lane's next slot its next post (claimed at once, by whichever
                    # replica, to wait for that slot in the adapter) is not one it could make
                    # now: its updates and notices go meanwhile (messages first).
                    await self.store.set_pace(
                        lanes.pace_key(item.lane),
                        self.clock.now() + timedelta(seconds=chat.post_interval),
                    )
        if item.kind is EffectKind.UPDATE:
            delivery = await self.store.delivery(item.delivery_id or -1)
            if delivery is None or delivery.ref is None:
                raise PermanentDeliveryError("no posted message to update")
            escalation = None
            if delivery.purpose is Purpose.ESCALATION:
                escalation = delivery.escalation or deadlines.Escalation(mentions=())
            view = await self._view(item, stored, timeline, escalation)
            await self._chat(where).update(where, delivery.ref, view, idempotency_key=key)
            return None
        if item.kind is EffectKind.SEED:
            if stored is None or stored.status is not Status.PENDING:
                return None  # answered (or closed) before its reactions went out: none needed
            delivery = await self.store.delivery(item.delivery_id or -1)
            if delivery is None or delivery.ref is None:
                raise PermanentDeliveryError("no posted message to seed")
            await self._chat(where).seed(
                where,
                delivery.ref,
                await self._view(item, stored, timeline),
                idempotency_key=key,
            )
            return None
        if item.kind is EffectKind.NOTIFY:
            if not isinstance(payload, NotifyPayload):
                raise PermanentDeliveryError(f"a notice row without a notice: {payload!r}")
            notice = notice_of(payload)
            if notice.kind is NoticeKind.REMINDER and (
                stored is None or stored.status is not Status.PENDING
            ):
                raise Stale("reminder")  # answered (or closed) since it fired
            await self._chat(where).notify(
                where, notice, idempotency_key=key, uncertain=self.uncertain(item)
            )
            return None
        if item.kind is EffectKind.WRITEBACK:
            view = await self._view(item, stored, rendered=False)
            sink = self.sinks.get(view.elicitation.source)
            if sink is not None:
                round_ = payload.round if isinstance(payload, WritebackPayload) else 1
                await sink.deliver(
                    view, idempotency_key=writeback_key(item.elicitation_key, round_)
                )
            return None
        raise PermanentDeliveryError(f"unknown outbox kind {item.kind!r}")


def notice_of(payload: NotifyPayload) -> Notice:
    """The notice a ``notify`` row's payload describes, as the chat adapters take it."""
    return Notice(
        user=IdentityKey(payload.user),
        text=payload.text,
        thread=payload.thread,
        kind=payload.kind,
        mentions=tuple(map(IdentityKey, payload.mentions)),
        mention=payload.mention,
        reply_to=payload.reply_to,
    )


def writeback_key(elicitation_key: str, round_: int = 1) -> str:
    """Stable per outcome written back: every retry of one answer's write-back carries the same
    key; an answer given after the upstream refused the first (the question reopened) is round
    2 and carries its own."""
    base = f"elicitbot:{elicitation_key}:closed"
    return base if round_ == 1 else f"{base}:{round_}"

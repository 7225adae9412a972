"""Slack interactions handled, Bolt-free: translated, handed to ``Elicitations.act`` (the core
judges) and the outcome shown. Modals open only when the core's outcome is ``FORM``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

import structlog
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack import translate
from adapters.slack.chat import SlackChat
from adapters.slack.intake import commands
from adapters.slack.intake.durable import Durable
from adapters.slack.modals.reply import reply_modal
from adapters.slack.render import CLAIM_ACTION, REPLY_ACTION, REVIEW_ACTION
from adapters.slack.render import shown as message_shown
from adapters.slack.review import modal as review_modal
from adapters.slack.review.flow import ReviewFlow
from adapters.slack.translate import EVENT_CHANNEL, MESSAGE_CHANNEL, Click, ThreadReply, Where
from adapters.slack.wording import thread_note
from bot.domain.actions import (
    NOT_FOUND_TEXT,
    Choose,
    ClaimIt,
    OnView,
    Open,
    Outcome,
    OutcomeKind,
    Reply,
    Submit,
)
from bot.domain.errors import DeliveryError, TransientDeliveryError
from bot.domain.model import Answer, Disclosure, ElicitationKey, Identity, Status
from bot.domain.policy import NO_STANDING, Standing
from bot.domain.ports import Elicitations, PromptView
from bot.domain.refs import SlackRef

log = structlog.get_logger("elicitbot.slack.app")

ANNOUNCE_ATTEMPTS = 20
"""Transient failures (rate limits, Slack hiccups) a refusal or a thread note waits out."""


class SlackHandling:
    """What each interaction does once acked: the chat, the core, the review flow."""

    def __init__(
        self,
        chat: SlackChat,
        elicitations: Elicitations,
        durable: Durable,
        *,
        announce_in_thread: bool = True,
    ) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.durable = durable
        """Where interactions are recorded before their ack (``raw`` None: acked unrecorded)."""
        self.announce_in_thread = announce_in_thread
        self.review = ReviewFlow(chat, elicitations, act=self._act_in_review, tell=self._tell)
        """The Review… modal (answer rule 2): :mod:`adapters.slack.review.flow`."""

    identify: Callable[[Identity], Awaitable[Identity]] | None = None
    """Gives the actor their display name (``SlackNames.identify``); None: the payload's."""

    standing: Callable[[Identity, ElicitationKey], Awaitable[Standing]] | None = None
    """The route's approver user groups the actor is in (``SlackStanding``)."""

    async def _act(
        self,
        action: Choose | Submit | Reply | Open | OnView,
        where: Where,
        seen: PromptView | None = None,
        *,
        quiet: bool = False,
        in_modal: bool = False,
    ) -> Outcome | None:
        """Hand an answer to the core and show its outcome (None: not delivered, person told).
        ``seen``: the view just read, reused by the thread note. ``quiet``: nothing said when
        the elicitation is gone. ``in_modal``: the review says the outcome, nothing private."""
        if not isinstance(action, Open | OnView):
            # An Open records no answer, and its modal must open within the click's three
            # seconds; an OnView names its person already.
            action = replace(action, who=await self._named(action.who))
        if self.standing is not None and not isinstance(action, OnView):
            # An OnView's translation carries the standing its click read (see _click).
            action = replace(action, standing=await self.standing(action.who, action.key))
        who = action.who
        try:
            outcome = await self.elicitations.act(action)
        except DeliveryError as exc:
            # Only a secret goes upstream during act(); the error names no secret, but the
            # person is told without it and it is logged by kind only.
            log.warning("slack.secret_not_delivered", key=action.key, error=type(exc).__name__)
            await self.durable.settle()
            await self._tell(who, where, translate.not_delivered(exc))
            return None
        await self.durable.settle()
        seen = seen or outcome.view
        kind = outcome.kind
        if kind in (OutcomeKind.ANSWERED, OutcomeKind.REFUSED):
            log.info(
                "slack.attempt",
                key=action.key,
                by=who.key,
                won=kind is OutcomeKind.ANSWERED,
                refused=outcome.refusal.code.value if outcome.refusal is not None else None,
            )
        if kind is OutcomeKind.ANSWERED:
            await self._announce(action.key, where, seen, outcome.answer)
        elif in_modal:
            pass
        elif kind is OutcomeKind.REFUSED:
            await self._tell(who, where, translate.refusal_text(outcome))
        elif kind in (OutcomeKind.HELP, OutcomeKind.VOTED):
            await self._tell(who, where, outcome.message)
        elif kind is OutcomeKind.NOT_FOUND and not quiet:
            await self._tell(who, where, outcome.message or NOT_FOUND_TEXT)
        return outcome

    async def _named(self, who: Identity) -> Identity:
        """Every copy says who by name ("Answered by Alice")."""
        return who if self.identify is None else await self.identify(who)

    async def _act_in_review(
        self, action: Choose | Open, where: Where, seen: PromptView | None
    ) -> Outcome | None:
        return await self._act(action, where, seen, in_modal=True)

    async def _claim(self, action: ClaimIt, where: Where) -> None:
        """ "I'm on it": escalation and follow-ups wait; every copy shows who (via the outbox)."""
        if self.standing is not None:  # only an approver may claim
            action = replace(action, standing=await self.standing(action.who, action.key))
        outcome = await self.elicitations.act(action)
        await self.durable.settle()
        gone = outcome.kind is OutcomeKind.NOT_FOUND
        text = (outcome.message or NOT_FOUND_TEXT) if gone else translate.claim_text(outcome)
        await self._tell(action.who, where, text)

    async def _announce(
        self, key: ElicitationKey, where: Where, seen: PromptView | None, answer: Answer | None
    ) -> None:
        """The win in the thread; never "Answered", which the message says once accepted."""
        if not self.announce_in_thread or not where.root_ts:
            return
        read = seen is None or answer is None
        view = await self.elicitations.view(key) if read else seen
        if view is not None:
            note, root = thread_note(view, answer), where.root_ts
            await _paced(lambda: self.chat.say(where.channel, note, thread_ts=root))

    async def _tell(self, who: Identity, where: Where, text: str) -> None:
        if who.is_bot:  # bots read no ephemerals; the refusal is in the audit log
            return
        await _paced(
            lambda: self.chat.ephemeral(where.channel, who.user, text, thread_ts=where.thread_ts)
        )

    async def _key_for(self, channel: str, ts: str | None) -> ElicitationKey | None:
        if ts is None:
            return None
        return await self.elicitations.key_for_message(SlackRef(channel, ts).key)

    async def _click(self, body: Mapping[str, Any], action: Mapping[str, Any]) -> None:
        if review_modal.in_review(body):  # inside the Review… modal
            who = translate.person(body)
            read = review_modal.read_review_click(body, action, who)
            if read is not None:
                await self.review.on_click(read)
            return
        click = translate.read_click(body, action)
        if click is None:
            return
        where = click.where
        key = click.key or await self._key_for(where.channel, click.message_ts)
        if key is None:
            await self._tell(click.who, where, NOT_FOUND_TEXT)
            return
        if click.action_id == CLAIM_ACTION:
            await self._claim(translate.claim_it(click, key), where)
            return
        opens = click.action_id in (REVIEW_ACTION, REPLY_ACTION)
        if not opens:  # Reply… and Review… record no answer, and open within three seconds
            click = replace(click, who=await self._named(click.who))
        # One read: the core hands this the request as it stands, to name the option the button
        # carries and what this message shows, from our own rendering of it (never from the
        # payload): approving needs the whole of it (rule 2).
        standing = NO_STANDING if self.standing is None else await self.standing(click.who, key)
        clicked = OnView(key, click.who, where.via, partial(_clicked, click, key, standing))
        outcome = await self._act(clicked, where)
        if outcome is None or outcome.kind is not OutcomeKind.FORM or outcome.view is None:
            return
        view = outcome.view
        if click.action_id == REVIEW_ACTION:
            await self.review.open(click, view)
        else:  # Reply…, or an option that needs a comment
            await self._open_modal(click, view, message_shown(view), option_id=outcome.option_id)

    async def _open_modal(
        self, click: Click, view: PromptView, shown: Disclosure, *, option_id: str | None = None
    ) -> None:
        key, where, who = view.elicitation.key, click.where, click.who
        if click.trigger_id is None:
            return
        modal = reply_modal(
            view,
            channel=where.channel,
            message_ts=click.message_ts,
            thread_ts=where.thread_ts,
            option_id=option_id,
            shown=shown,
            digest=translate.digest_of(click.value),
        )
        try:
            await self.chat.open_view(click.trigger_id, modal)
        except DeliveryError as exc:
            log.warning("slack.modal_not_opened", key=key, error=str(exc))
            await self._tell(who, where, translate.MODAL_NOT_OPENED)

    async def _submitted(
        self,
        body: Mapping[str, Any],
        meta: Mapping[str, Any],
        text: str | None,
        chosen: list[dict[str, Any]],
        *,
        withheld: bool = False,
    ) -> None:
        """``withheld``: a replayed secret submission, whose secret was never kept: the person is
        asked again while the question is open (it may have gone upstream before the kill)."""
        submission = translate.read_submission(body, meta, text, chosen)
        if submission is None:
            return
        where = submission.where
        key = submission.key or await self._key_for(where.channel, submission.message_ts)
        view = await self.elicitations.view(key) if key is not None else None
        if key is None or view is None:
            await self._tell(submission.who, where, NOT_FOUND_TEXT)
            return
        if withheld:
            await self.durable.settle()
            if view.status is Status.PENDING:
                await self._tell(submission.who, where, translate.RESEND_PRIVATE)
            return
        # What the modal's surface showed: the message it opened from, or a review that showed
        # everything (its metadata, which only we write, checked against the request now).
        shown = review_modal.reply_shown(meta, view)
        submit = translate.submit(submission, key, view.elicitation, shown=shown)
        await self._act(submit, where, view)

    def _read_reply(self, body: Mapping[str, Any], event: Mapping[str, Any]) -> ThreadReply | None:
        return translate.read_reply(
            body,
            event,
            bot_id=self.chat.bot_id,
            bot_user_id=self.chat.bot_user_id,
            agents=self.elicitations.people.agents,
        )

    async def _message(
        self,
        body: Mapping[str, Any],
        event: Mapping[str, Any],
        *,
        key: ElicitationKey | None = None,
        deduped: bool = False,
    ) -> None:
        """``key``: when already found. ``deduped``: recorded once already; else deduplicated
        here by ``event_id`` and channel/ts."""
        reply = self._read_reply(body, event)
        if reply is None:
            return
        key = key or await self._key_for(reply.channel, reply.root_ts)
        if key is None:
            return  # a thread that is not ours
        if not deduped:
            first_time = self.elicitations.first_time
            if reply.event_id is not None and not await first_time(EVENT_CHANNEL, reply.event_id):
                log.info("slack.event_redelivered", event_id=reply.event_id)
                return
            if not await first_time(MESSAGE_CHANNEL, SlackRef(reply.channel, reply.ts).key):
                log.info("slack.message_redelivered", channel=reply.channel, ts=reply.ts)
                return
        # What the message replied under shows (rule 2): a reply naming an approving option
        # counts only where the message holds the whole request.
        view = await self.elicitations.view(key)
        shown = message_shown(view) if view is not None else None
        await self._act(reply.reply(key, shown=shown), reply.where, view, quiet=True)

    async def _command(self, body: Mapping[str, Any]) -> None:
        read = commands.read_command(body)
        if read is None:
            return
        command, channel = read
        outcome = await self.elicitations.act(command)
        result = outcome.command
        if result is None:
            return
        if result.refused:
            log.info("slack.command_refused", by=command.who.key)
        else:
            log.info("slack.command", verb=result.verb, by=command.who.key, channel=channel)
        await self._reply_command(body, commands.command_text(result, channel))

    async def _reply_command(self, body: Mapping[str, Any], text: str) -> None:
        """To the one who ran the command only: the command's response_url, else ephemeral."""
        url, user, channel = commands.command_reply_to(body)
        if url is not None:
            with contextlib.suppress(Exception):
                sent = await AsyncWebhookClient(url).send_dict(
                    {"response_type": "ephemeral", "text": text}
                )
                if sent.status_code == 200:  # noqa: PLR2004 - HTTP OK
                    return
        if user is not None and channel is not None:
            await self.chat.ephemeral(channel, user, text)


def _clicked(
    click: Click, key: ElicitationKey, standing: Standing, view: PromptView
) -> Choose | Open | None:
    """Reply… or Review… asks for its form; anything else chooses. ``standing`` is read before
    the core's one read."""
    if click.action_id in (REVIEW_ACTION, REPLY_ACTION):
        return Open(key, click.who, click.where.via, standing=standing)
    choice = translate.choice(click, key, view.elicitation, shown=message_shown(view))
    return None if choice is None else replace(choice, standing=standing)


async def _paced(send: Callable[[], Awaitable[object]], attempts: int = ANNOUNCE_ATTEMPTS) -> None:
    """Send, waiting out rate limits (the pacer says how long; no polling); give up after
    ``attempts`` transient failures. Permanent failures are raised at once."""
    for attempt in range(1, attempts + 1):
        try:
            await send()
        except TransientDeliveryError as exc:
            if attempt == attempts:
                raise
            await asyncio.sleep(exc.retry_after if exc.retry_after is not None else attempt)
        else:
            return

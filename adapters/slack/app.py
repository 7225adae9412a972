"""Slack interactivity: the Bolt ``AsyncApp`` whose listeners turn clicks, thread replies, the reply
modal and ``/elicitbot`` commands into the core's actions (:mod:`adapters.slack.translate`), hand
each to :meth:`Elicitations.act <bot.domain.ports.Elicitations.act>` and show the outcome.

Every listener acks as soon as it can (Bolt answers Slack when the listener returns) and does
its work in a task of its own, tracked so shutdown and tests can wait for it. The one check made
before an ack is pure: a modal submission over its text limit is answered
``response_action: errors`` (the modal stays open, the limit stated).

- **Durable before ack** (rule 4, given a :class:`~bot.domain.store.RawEvents` store; the
  service always passes one): :mod:`adapters.slack.durable` records a click, a modal submission
  and a thread reply in one of our threads before the ack (trimmed to what their handling reads:
  :func:`~adapters.slack.translate.durable_click` and its siblings), marks it handled once
  ``act`` returns, and replays what a killed process left open through :meth:`_replayed`, the
  listeners' own path. When it cannot be recorded the answer is 503, never an ack. Never
  recorded: a secret (a replayed secret submission asks for it again while the question is open;
  rule 10), and slash commands (they answer no question, and whoever typed one sees at once
  whether it did anything).
- **Which elicitation.** What the payload names (:func:`~adapters.slack.translate.payload_key`),
  else the message's ref key (:meth:`Elicitations.key_for_message`); a thread reply by its
  thread root's. elicitbot's own messages are ignored outright.
- **Redelivery.** Deduplicated in the database, never by the retry header
  (:func:`~adapters.slack.translate.raw_key`): a click by its ``trigger_id`` (a second click is
  a new one: judged, and told "already answered"), a modal by its view id and hash, a thread
  reply by its message's channel/ts (Slack can send one message under several event ids).
  Without a raw-events store, thread replies are deduplicated by ``event_id`` and channel/ts
  through ``first_time``.
- **Slack's own UI** stays here: *Reply…* and an option that needs a comment open the modal
  (while the question is pending); the core decides everything else.
- **What you see is what you approve** (rule 2). Every Choose, Reply and Submit built from a
  message carries ``shown`` = :func:`adapters.slack.render.shown` of the request as stored now
  (our own rendering, never the payload), so a crafted approve on a message that cannot hold
  everything is refused (``NOT_SHOWN``) like any refusal. *Review…* and every click inside the
  review modal go to :class:`~adapters.slack.review_flow.ReviewFlow`; a reply modal takes the
  ``shown`` of what it was opened from (:func:`adapters.slack.review_modal.reply_shown`).
- **Outcomes.** A refusal, how to answer, or a claim is an ephemeral message to the one person,
  in the thread when the attempt was in a thread (bots are told nothing: they read no
  ephemerals); a win is said in the message's thread, and the outbox rewrites every copy. A
  command's reply goes to its ``response_url``.
- **Secrets** (Pinework ``secret_input``) come only from the modal and go straight upstream
  inside ``act``: never logged, stored or echoed.

Bolt's authorization is precomputed from the ``auth.test`` that ran at start (no lazy
``auth.test`` per request, which would turn a Slack outage into HTTP 500s and retry storms), and
its loggers are kept at WARNING: at INFO Bolt logs the whole body of a refused request.

(About 650 lines, kept whole: what is left shares one class's state (the chat, the core, the
tracked tasks, the review flow) between the listeners and the work each starts. The seam that
stood alone, record/replay, is :mod:`adapters.slack.durable`; the next one, if this grows, is
the Bolt shell (authorization, listeners, tasks) apart from the Bolt-free handling (``_act``
onward), which needs only the chat and the core.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.response import BoltResponse
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack import review_modal, translate
from adapters.slack.chat import SlackChat
from adapters.slack.durable import REPLAY_EVERY, REPLAY_GRACE, Durable, NotRecordedError
from adapters.slack.modal import REPLY_CALLBACK, closes_all, reply_modal
from adapters.slack.outcome import thread_note
from adapters.slack.render import CLAIM_ACTION, MULTI_ACTION, REPLY_ACTION
from adapters.slack.review_flow import ReviewFlow
from adapters.slack.review_parts import REVIEW_ACTION
from adapters.slack.review_parts import shown as message_shown
from adapters.slack.translate import (
    EVENT_CHANNEL,
    MESSAGE_CHANNEL,
    Click,
    ThreadReply,
    Where,
)
from bot.clock import SystemClock
from bot.domain.actions import (
    NOT_FOUND_TEXT,
    Choose,
    ClaimIt,
    Outcome,
    OutcomeKind,
    Reply,
    Submit,
)
from bot.domain.errors import DeliveryError, TransientDeliveryError
from bot.domain.model import Answer, AnswerMode, Disclosure, Identity, Status
from bot.domain.ports import Clock, Elicitations, PromptView
from bot.domain.records import RawEvent
from bot.domain.refs import SlackRef
from bot.domain.store import RawEvents

log = structlog.get_logger("elicitbot.slack.app")

COMMAND = "/elicitbot"
ANNOUNCE_ATTEMPTS = 20
"""Transient failures (rate limits, Slack hiccups) a refusal or a thread note waits out."""

_ACTIONS = re.compile(r"^elicitbot\.")


class SlackInteractivity:
    """The Bolt app and its listeners; ``app`` goes to :func:`adapters.slack.routes.slack_router`
    (HTTP mode) or :class:`adapters.slack.socket.SlackSocket` (Socket Mode)."""

    def __init__(
        self,
        chat: SlackChat,
        elicitations: Elicitations,
        *,
        signing_secret: str | None,
        announce_in_thread: bool = True,
        raw: RawEvents | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.announce_in_thread = announce_in_thread
        self.clock: Clock = clock or SystemClock()
        self.durable = Durable(raw, self.clock, self._replayed)
        """Where interactions are recorded before their ack (``raw`` None: acked unrecorded)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._authorized: AuthorizeResult | None = None

        async def authorize() -> AuthorizeResult | None:
            return self._authorization()

        bolt_logger = logging.getLogger("elicitbot.slack.bolt")
        # Quiet while it is built: it warns that the client's token gives way to `authorize`,
        # which is the point (the token is the same one, checked by auth.test at start).
        bolt_logger.setLevel(logging.ERROR)
        self.app = AsyncApp(
            client=chat.client,
            # Bolt's annotation says AuthorizeResult, but it handles None (refuses the request).
            authorize=authorize,  # type: ignore[arg-type]
            # No secret (Socket Mode only): an unguessable one, so a signed HTTP request never
            # passes. Socket Mode requests are not signed and skip the check.
            signing_secret=signing_secret or secrets.token_hex(32),
            # Listeners only ack and start a task, so Bolt may run them before it answers: the
            # ack goes out as the listener returns, not at Bolt's next 10 ms poll for it.
            process_before_response=True,
            logger=bolt_logger,
            # Bolt sets the level of the logger named after the app: never "elicitbot", whose
            # children are every structlog logger of ours.
            name="elicitbot_slack_app",
        )
        bolt_logger.setLevel(logging.WARNING)
        self.review = ReviewFlow(chat, elicitations, act=self._act_in_review, tell=self._tell)
        """The Review… modal (answer rule 2): :mod:`adapters.slack.review_flow`."""
        self._register()

    def _authorization(self) -> AuthorizeResult | None:
        """Bolt's authorization, from the ``auth.test`` SlackChat.verify() made at start (None
        before it: Bolt then refuses the request rather than calling auth.test itself)."""
        chat = self.chat
        if chat.bot_user_id is None:
            return None
        if self._authorized is None or self._authorized.bot_user_id != chat.bot_user_id:
            self._authorized = AuthorizeResult(
                enterprise_id=chat.enterprise_id,
                team_id=chat.team_id,
                bot_user_id=chat.bot_user_id,
                bot_id=chat.bot_id,
                bot_token=chat.client.token,
            )
        return self._authorized

    # ------------------------------------------------------------------ tasks

    def spawn(
        self,
        work: Coroutine[Any, Any, None],
        what: str,
        *,
        sensitive: bool = False,
        raw_id: int | None = None,
    ) -> None:
        """Run one interaction's work in a tracked task. ``sensitive``: it may hold a secret, so a
        failure is logged by kind only (no message, no traceback). ``raw_id``: the recorded
        event it handles, marked handled when the work is done."""
        work_done = self.durable.guard(work, what, sensitive, raw_id)
        task = asyncio.get_running_loop().create_task(work_done)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ replays

    async def run_replays(
        self,
        stop: asyncio.Event,
        *,
        ours: bool,
        every: float = REPLAY_EVERY,
        grace: timedelta = REPLAY_GRACE,
    ) -> None:
        """Replay what a killed process recorded and never handled: :meth:`Durable.run_replays
        <adapters.slack.durable.Durable.run_replays>`, through :meth:`_replayed`."""
        await self.durable.run_replays(stop, ours=ours, every=every, grace=grace)

    async def _replayed(self, event: RawEvent) -> None:
        """A recorded interaction handled again, by the listeners' own path."""
        body = event.body
        kind = body.get("type")
        if kind == "block_actions":
            action = translate.first_action(body)
            if action.get("action_id") != MULTI_ACTION:
                await self._click(body, action)
        elif kind == "view_submission":
            meta, text, chosen, withheld = translate.kept_submission(body)
            await self._submitted(body, meta, text, chosen, withheld=withheld)
        elif kind == "event_callback":
            await self._message(body, translate.kept_event(body), deduped=True)
        else:
            log.warning("slack.replay_unknown", raw_id=event.id, kind=str(kind))

    async def idle(self, settle: float = 0.05) -> None:
        """Wait until no interaction is running: Bolt starts a listener just after its ack, so
        this first gives listeners ``settle`` seconds to start, and checks again after each
        round."""
        while True:
            await asyncio.sleep(settle)
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, grace: float = 0.0) -> None:
        """Let running interactions finish for up to ``grace`` seconds, then cancel the rest."""
        if grace > 0 and self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ listeners

    def _register(self) -> None:
        app = self.app

        @app.action(_ACTIONS)
        async def on_action(
            ack: Callable[..., Awaitable[Any]], body: dict[str, Any]
        ) -> BoltResponse | None:
            action = translate.first_action(body)
            if action.get("action_id") in (MULTI_ACTION, review_modal.MANY_ACTION):
                await ack()  # a selection changing: nothing yet
                return None
            kept = translate.durable_click(body)
            try:
                handle, raw_id = await self.durable.record(kept)
            except NotRecordedError:
                return _not_recorded()
            await ack()
            if handle:
                action = translate.first_action(kept)
                self.spawn(self._click(kept, action), "click", raw_id=raw_id)
            return None

        @app.view(REPLY_CALLBACK)
        async def on_submit(
            ack: Callable[..., Awaitable[Any]], body: dict[str, Any], view: dict[str, Any]
        ) -> BoltResponse | None:
            meta, text, chosen = translate.parse_submission(view)
            errors = translate.submission_errors(meta, text, view)
            if errors:
                await ack(response_action="errors", errors=errors)
                return None
            kept = translate.durable_submission(body)  # without the secret
            try:
                handle, raw_id = await self.durable.record(kept)
            except NotRecordedError:
                return _not_recorded()
            if closes_all(meta):  # on top of a review: the decision is made, close both
                await ack(response_action="clear")
            else:
                await ack()
            if handle:
                self.spawn(
                    self._submitted(kept, meta, text, chosen),
                    "modal",
                    sensitive=bool(meta.get("s")),
                    raw_id=raw_id,
                )
            return None

        @app.event("message")
        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> BoltResponse | None:
            # Acked when this returns (Bolt acks events itself).
            if self.durable.raw is None:
                self.spawn(self._message(body, event), "thread reply")
                return None
            try:
                recorded = await self._record_reply(body, event)
            except NotRecordedError:
                return _not_recorded()
            if recorded is not None:
                kept, key, raw_id = recorded
                work = self._message(kept, kept["event"], key=key, deduped=True)
                self.spawn(work, "thread reply", raw_id=raw_id)
            return None

        @app.command(COMMAND)
        async def on_command(ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
            await ack()
            self.spawn(self._command(body), "command")

    async def _record_reply(
        self, body: Mapping[str, Any], event: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str, int | None] | None:
        """Record a thread reply in one of our threads before its ack: (the body kept, the
        elicitation, its raw id); None when there is nothing to handle (not a reply, not our
        thread, recorded before). Only our threads' replies are kept, and under a secret question
        without their text. Raises NotRecordedError when it could not be read or recorded."""
        reply = self._read_reply(body, event)
        if reply is None:
            return None
        try:
            key = await self._key_for(reply.channel, reply.root_ts)
            view = await self.elicitations.view(key) if key is not None else None
        except Exception as exc:
            log.error("slack.not_recorded", what="thread reply", error=type(exc).__name__)  # noqa: TRY400
            raise NotRecordedError(reply.ts) from None
        if key is None or view is None:
            return None  # a thread that is not ours
        secret = view.elicitation.answer_mode is AnswerMode.SECRET
        kept = translate.durable_reply(body, secret=secret)
        handle, raw_id = await self.durable.record(kept)
        return (kept, key, raw_id) if handle else None

    # ------------------------------------------------------------------ acting

    identify: Callable[[Identity], Awaitable[Identity]] | None = None
    """Gives the person acting their display name (the wiring sets
    :meth:`adapters.slack.people.SlackNames.identify`); None: the payload's name, if any."""

    async def _act(
        self,
        action: Choose | Submit | Reply,
        where: Where,
        seen: PromptView | None = None,
        *,
        quiet: bool = False,
        in_modal: bool = False,
    ) -> Outcome | None:
        """Hand an answer to the core and show its outcome: a refusal or how to answer privately,
        a win in the thread; returns the outcome (None: not delivered upstream, the person told).

        ``seen``: the view read just before, which the thread note reuses (with the answer) rather
        than reading it again. ``quiet``: say nothing when the elicitation is not found (a thread
        reply in a thread elicitbot no longer knows). ``in_modal``: the review modal says the
        outcome, so nothing is said privately (the win still goes in the thread)."""
        if self.identify is not None:  # every copy says who by name ("Answered by Alice")
            action = replace(action, who=await self.identify(action.who))
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
        elif kind is OutcomeKind.HELP:
            await self._tell(who, where, outcome.message)
        elif kind is OutcomeKind.NOT_FOUND and not quiet:
            await self._tell(who, where, outcome.message or NOT_FOUND_TEXT)
        return outcome

    async def _act_in_review(
        self, action: Choose, where: Where, seen: PromptView | None
    ) -> Outcome | None:
        """A decision taken in the review modal (which then says the outcome)."""
        return await self._act(action, where, seen, in_modal=True)

    async def _claim(self, action: ClaimIt, where: Where) -> None:
        """ "I'm on it": escalation and follow-ups wait; every copy shows who (via the outbox)."""
        outcome = await self.elicitations.act(action)
        await self.durable.settle()
        if outcome.kind is OutcomeKind.NOT_FOUND:
            await self._tell(action.who, where, outcome.message or NOT_FOUND_TEXT)
        else:
            await self._tell(action.who, where, translate.claim_text(outcome))

    async def _announce(
        self, key: str, where: Where, seen: PromptView | None, answer: Answer | None
    ) -> None:
        """The win, said in the message's thread (who and what; never "Answered", which only
        the message says, once the upstream accepted it)."""
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

    async def _key_for(self, channel: str, ts: str | None) -> str | None:
        """The elicitation of the message at ``channel``/``ts``, by its ref key."""
        if ts is None:
            return None
        return await self.elicitations.key_for_message(SlackRef(channel, ts).key)

    # ------------------------------------------------------------------ clicks

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
        view = await self.elicitations.view(key) if key is not None else None
        if key is None or view is None:
            await self._tell(click.who, where, NOT_FOUND_TEXT)
            return
        e = view.elicitation
        # What this message shows, from our own rendering of the request as it stands (never
        # from the payload): approving needs the whole of it (rule 2).
        shown = message_shown(view)
        if click.action_id == REVIEW_ACTION:
            if view.status is not Status.PENDING:  # the rules say how it closed
                await self._act(Choose(key, click.who, where.via, ()), where)
            else:
                await self.review.open(click, view)
            return
        if click.action_id == REPLY_ACTION:
            await self._open_modal(click, view, shown)
            return
        if click.action_id == CLAIM_ACTION:
            await self._claim(translate.claim_it(click, key), where)
            return
        option_id = translate.picked_option(click, e)
        option = e.option(option_id) if option_id is not None else None
        if (
            option is not None
            and option.requires_text
            and view.status is Status.PENDING
            and translate.offered(e, view.now, option.id, shown)
        ):
            await self._open_modal(click, view, shown, option_id=option_id)
            return
        choice = translate.choice(click, key, e, shown=shown)
        if choice is not None:
            await self._act(choice, where, view)

    async def _open_modal(
        self, click: Click, view: PromptView, shown: Disclosure, *, option_id: str | None = None
    ) -> None:
        key, where, who = view.elicitation.key, click.where, click.who
        if view.status is not Status.PENDING:
            # Closed: the rules say how (already answered by …, expired, cancelled).
            await self._act(Choose(key, who, where.via, ()), where)
            return
        if click.trigger_id is None:
            return
        modal = reply_modal(
            view,
            channel=where.channel,
            message_ts=click.message_ts,
            thread_ts=where.thread_ts,
            option_id=option_id,
            shown=shown,
        )
        try:
            await self.chat.open_view(click.trigger_id, modal)
        except DeliveryError as exc:
            log.warning("slack.modal_not_opened", key=key, error=str(exc))
            await self._tell(who, where, translate.MODAL_NOT_OPENED)

    # ------------------------------------------------------------------ the modal

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

    # ------------------------------------------------------------------ thread replies

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
        key: str | None = None,
        deduped: bool = False,
    ) -> None:
        """A thread reply. ``key``: its elicitation, when already found. ``deduped``: recorded
        once already (``record_raw`` by channel/ts); else deduplicated here by ``event_id`` and
        by channel/ts."""
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

    # ------------------------------------------------------------------ /elicitbot

    async def _command(self, body: Mapping[str, Any]) -> None:
        read = translate.read_command(body)
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
        await self._reply_command(body, translate.command_text(result, channel))

    async def _reply_command(self, body: Mapping[str, Any], text: str) -> None:
        """To the one who ran the command only: the command's response_url, else ephemeral."""
        url, user, channel = translate.command_reply_to(body)
        if url is not None:
            with contextlib.suppress(Exception):
                sent = await AsyncWebhookClient(url).send_dict(
                    {"response_type": "ephemeral", "text": text}
                )
                if sent.status_code == 200:  # noqa: PLR2004 - HTTP OK
                    return
        if user is not None and channel is not None:
            await self.chat.ephemeral(channel, user, text)


def _not_recorded() -> BoltResponse:
    """Not acked: Slack shows the person an error (a click, a modal: they try again) or sends the
    event again. Never a 2xx for what was not recorded."""
    return BoltResponse(status=503, body="")


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


def build_app(
    chat: SlackChat,
    elicitations: Elicitations,
    *,
    signing_secret: str | None,
    raw: RawEvents | None = None,
    clock: Clock | None = None,
) -> SlackInteractivity:
    """The interactive Slack app. It may be built before ``chat.verify()``; it answers Slack only
    once that ``auth.test`` has run (its authorization is taken from it, never fetched per
    request). ``raw``: where interactions are recorded before their ack (the service passes its
    store; without one they are acked unrecorded)."""
    return SlackInteractivity(
        chat, elicitations, signing_secret=signing_secret, raw=raw, clock=clock
    )

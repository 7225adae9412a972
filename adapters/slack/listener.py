"""Slack interactivity: the Bolt ``AsyncApp`` shell; the work is
:class:`~adapters.slack.intake.handling.SlackHandling`, in tracked tasks after the ack.

Clicks, submissions and thread replies are recorded before the ack (rule 4); not recordable → 503.
Never recorded: secrets and slash commands. Redelivery is deduplicated in the database, never by the
retry header. Authorization is precomputed from the start's ``auth.test``: a lazy call per request
would turn a Slack outage into 500s and retry storms. Bolt's loggers stay at WARNING: at INFO Bolt
logs the whole body of a refused request.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.response import BoltResponse

from adapters.slack import translate
from adapters.slack.chat import SlackChat
from adapters.slack.intake import trims
from adapters.slack.intake.durable import Durable, NotRecordedError
from adapters.slack.intake.handling import SlackHandling
from adapters.slack.modals.reply import REPLY_CALLBACK, closes_all
from adapters.slack.render import MULTI_ACTION, WEB_LINK_ACTION
from adapters.slack.review import modal as review_modal
from bot.clock import SystemClock
from bot.domain.model import AnswerMode, ElicitationKey
from bot.domain.ports import Clock, Elicitations
from bot.domain.records import RawEvent
from bot.domain.store import RawEvents

log = structlog.get_logger("elicitbot.slack.app")

COMMAND = "/elicitbot"

_ACTIONS = re.compile(r"^elicitbot\.")


class SlackInteractivity(SlackHandling):
    """The Bolt app and its listeners, served in HTTP or Socket Mode."""

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
        self.clock: Clock = clock or SystemClock()
        durable = Durable(raw, self.clock, self._replayed)
        super().__init__(chat, elicitations, durable, announce_in_thread=announce_in_thread)
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
        self._register()

    def _authorization(self) -> AuthorizeResult | None:
        """None before the start's ``auth.test``: Bolt refuses rather than calling it."""
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

    def spawn(
        self,
        work: Coroutine[Any, Any, None],
        what: str,
        *,
        sensitive: bool = False,
        raw_id: int | None = None,
    ) -> None:
        """``sensitive``: it may hold a secret, so a failure is logged by kind only. ``raw_id``: the
        record marked handled when done."""
        work_done = self.durable.guard(work, what, sensitive, raw_id)
        task = asyncio.get_running_loop().create_task(work_done)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run_replays(self, stop: asyncio.Event, *, ours: bool) -> None:
        await self.durable.run_replays(stop, ours=ours)

    async def _replayed(self, event: RawEvent) -> None:
        body = event.body
        kind = body.get("type")
        if kind == "block_actions":
            action = translate.first_action(body)
            if action.get("action_id") != MULTI_ACTION:
                await self._click(body, action)
        elif kind == "view_submission":
            meta, text, chosen, withheld = trims.kept_submission(body)
            await self._submitted(body, meta, text, chosen, withheld=withheld)
        elif kind == "event_callback":
            await self._message(body, trims.kept_event(body), deduped=True)
        else:
            log.warning("slack.replay_unknown", raw_id=event.id, kind=str(kind))

    async def idle(self, settle: float = 0.05) -> None:
        """Wait until no interaction is running; ``settle`` s first each round, since Bolt starts
        a listener just after its ack."""
        while True:
            await asyncio.sleep(settle)
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, grace: float = 0.0) -> None:
        if grace > 0 and self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _register(self) -> None:
        app = self.app

        @app.action(_ACTIONS)
        async def on_action(
            ack: Callable[..., Awaitable[Any]], body: dict[str, Any]
        ) -> BoltResponse | None:
            action = translate.first_action(body)
            if action.get("action_id") in (MULTI_ACTION, review_modal.MANY_ACTION, WEB_LINK_ACTION):
                await ack()  # a selection changing, or the web inbox's page opened: nothing here
                return None
            kept = trims.durable_click(body)
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
            kept = trims.durable_submission(body)  # without the secret
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
    ) -> tuple[dict[str, Any], ElicitationKey, int | None] | None:
        """Record a reply in one of our threads (no text under a secret question): (body kept, key,
        raw id), or None: nothing to handle."""
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
        kept = trims.durable_reply(body, secret=secret)
        handle, raw_id = await self.durable.record(kept)
        return (kept, key, raw_id) if handle else None


def _not_recorded() -> BoltResponse:
    """Never a 2xx for what was not recorded: Slack shows an error or sends the event again."""
    return BoltResponse(status=503, body="")


def build_app(
    chat: SlackChat,
    elicitations: Elicitations,
    *,
    signing_secret: str | None,
    raw: RawEvents | None = None,
    clock: Clock | None = None,
) -> SlackInteractivity:
    """It answers only once ``chat.verify()`` ran. Without ``raw``, interactions are acked
    unrecorded."""
    return SlackInteractivity(
        chat, elicitations, signing_secret=signing_secret, raw=raw, clock=clock
    )

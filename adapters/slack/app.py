"""Slack interactivity: the Bolt ``AsyncApp`` that turns clicks, thread replies, the reply modal
and ``/elicitbot`` commands into answers and admin actions.

Every listener acks first (Bolt answers Slack as soon as ``ack()`` runs) and does its work in a
task of its own, tracked so shutdown and tests can wait for it. The one check made before an
ack is pure: a modal submission over its text limit is answered ``response_action: errors`` (the
modal stays open, the limit stated).

- **Who.** A person is ``team_id`` + ``user.id`` (:class:`~bot.domain.model.Identity`), never a
  display name. elicitbot's own messages are ignored outright; other bots' replies are judged
  (and refused: rule 1) but nobody is told, since bots do not read ephemerals. The answer rules
  refuse the asker's mapped principal, configured agents and bots.
- **Which elicitation.** A button carries its elicitation key in its value (``{"e", "o", "r"}``),
  so a click on any copy, however old, resolves; otherwise the block id, the message metadata or
  the message's ref key (``<channel>/<ts>``, :meth:`Elicitations.key_for_message`). A thread
  reply is found by its thread's ref key.
- **Redelivery.** Events are deduplicated in the database by ``event_id`` (and by the message's
  channel/ts, since Slack can send one message under several event ids), never by the retry
  header. Clicks are not deduplicated: a second click is judged and told "already answered".
- **Refusals** are an ephemeral message to the one refused, in the thread when the attempt was
  in a thread; nothing changes for anyone else. A win is said in the message's thread; the
  outbox rewrites every copy.
- **Secrets** (Pinework ``secret_input``) come only from the modal and go straight upstream
  through :meth:`Elicitations.answer` with ``secret=True``: never logged, stored or echoed.
- **Admins** (``people.admins``) run ``/elicitbot subscribe <workspace> [board <id>]``,
  ``unsubscribe …`` and ``routes`` in a channel.

Bolt's authorization is precomputed from the ``auth.test`` that ran at start (no lazy
``auth.test`` per request, which would turn a Slack outage into HTTP 500s and retry storms), and
its loggers are kept at WARNING: at INFO Bolt logs the whole body of a refused request.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.webhook.async_client import AsyncWebhookClient

from adapters.slack.chat import SlackChat, ref_key
from adapters.slack.render import (
    ACK_ACTION,
    CHOICE_BLOCK,
    CHOICES_BLOCK,
    CLAIM_ACTION,
    INPUT_ACTION,
    MULTI_ACTION,
    OPTION_ACTION,
    REPLY_ACTION,
    REPLY_CALLBACK,
    SECRET_BLOCK,
    SELECT_ACTION,
    SUBMIT_ACTION,
    TEXT_BLOCK,
    reply_modal,
    result_text,
)
from bot.domain.errors import DeliveryError, TransientDeliveryError
from bot.domain.model import Attempt, Elicitation, Identity, Refusal, Status
from bot.domain.ports import Elicitations, PromptView
from bot.domain.replies import ChoiceReply, HelpReply, MultiChoiceReply, TextReply, parse_reply
from bot.domain.rules import format_time

log = structlog.get_logger("elicitbot.slack.app")

COMMAND = "/elicitbot"
EVENT_CHANNEL = "slack"
"""``first_time`` namespace of Slack ``event_id``s."""
MESSAGE_CHANNEL = "slack:message"
"""``first_time`` namespace of Slack messages (``<channel>/<ts>``)."""
REPLY_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "me_message", "bot_message"})
MAX_COMMAND_ARG = 200
ANNOUNCE_ATTEMPTS = 20
"""Transient failures (rate limits, Slack hiccups) a refusal or a thread note waits out."""
NOT_FOUND = "This message is no longer connected to a request elicitbot knows."

_ACTIONS = re.compile(r"^elicitbot\.")
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_MARKUP = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")
_ARG = re.compile(r"^[A-Za-z0-9_.:\-/]+$")

USAGE = (
    "Usage, in the channel to route to:\n"
    "• `/elicitbot subscribe <workspace> [board <id>]`: post that workspace's (or board's) "
    "requests here\n"
    "• `/elicitbot unsubscribe <workspace> [board <id>]`: stop\n"
    "• `/elicitbot routes`: every route, from the config and from chat"
)


# --------------------------------------------------------------------------- pure helpers


def slack_text(text: str) -> str:
    """What a person typed, from Slack's message markup: mentions (``<@U…>``) dropped, links and
    channel names shown as written, ``&amp;``/``&lt;``/``&gt;`` unescaped."""

    def plain(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            return label or f"@{target[1:].split('^')[0]}"
        return label or target

    return html.unescape(_MARKUP.sub(plain, _MENTION.sub("", text))).strip()


def decode_value(value: Any) -> dict[str, Any]:
    """A button or option value (our JSON); {} for anything else."""
    if not isinstance(value, str):
        return {}
    try:
        decoded = json.loads(value)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def chosen_id(e: Elicitation, value: Mapping[str, Any]) -> str:
    """The option a value names: its id, or its index (``"i"``) when the ids were too long.

    An index out of range gives an id no option has, which the rules refuse as not offered."""
    option = value.get("o")
    if isinstance(option, str):
        return option
    index = value.get("i")
    if isinstance(index, int) and 0 <= index < len(e.options):
        return e.options[index].id
    return f"#{index}"


def revision_of(value: Mapping[str, Any]) -> int | None:
    revision = value.get("r")
    return revision if isinstance(revision, int) and not isinstance(revision, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Where:
    """Where an attempt happened: the channel, the message's thread root, and the thread the
    person wrote in (None for a click on a top-level message)."""

    channel: str
    root_ts: str | None
    thread_ts: str | None = None

    @property
    def via(self) -> str:
        return f"slack:{self.channel}"


def _identity(user: Any, team: Any, *, name: Any = None, is_bot: bool = False) -> Identity | None:
    user_id = _str(user)
    if user_id is None:
        return None
    return Identity(
        platform="slack", user=user_id, team=_str(team), is_bot=is_bot, display_name=_str(name)
    )


def _state_value(values: Mapping[str, Any], block_id: str) -> Mapping[str, Any]:
    return _map(_map(values.get(block_id)).get(INPUT_ACTION))


def parse_submission(
    view: Mapping[str, Any],
) -> tuple[dict[str, Any], str | None, list[dict[str, Any]]]:
    """(private metadata, text, chosen option values) of a reply-modal submission."""
    meta = decode_value(view.get("private_metadata"))
    values = _map(_map(view.get("state")).get("values"))
    text: str | None = None
    for block in (SECRET_BLOCK, TEXT_BLOCK):
        typed = _state_value(values, block).get("value")
        if isinstance(typed, str) and typed:
            text = typed
    selected = _state_value(values, CHOICE_BLOCK).get("selected_option")
    chosen = [selected] if selected else []
    chosen += list(_state_value(values, CHOICES_BLOCK).get("selected_options") or [])
    return meta, text, [decode_value(_map(o).get("value")) for o in chosen]


def submission_errors(meta: Mapping[str, Any], text: str | None) -> dict[str, str]:
    """The checks a submission gets before its ack (pure): over the limit it was shown."""
    limit = meta.get("l")
    block = SECRET_BLOCK if meta.get("s") else TEXT_BLOCK
    if text is not None and isinstance(limit, int) and len(text) > limit:
        return {block: f"Your answer is {len(text):,} characters; the limit is {limit:,}."}
    return {}


# --------------------------------------------------------------------------- the app


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
    ) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.announce_in_thread = announce_in_thread
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

    def spawn(self, work: Coroutine[Any, Any, None], what: str, *, sensitive: bool = False) -> None:
        """Run one interaction's work in a tracked task. ``sensitive``: it may hold a secret, so a
        failure is logged by kind only (no message, no traceback)."""
        task = asyncio.get_running_loop().create_task(self._guard(work, what, sensitive))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, work: Awaitable[None], what: str, sensitive: bool) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the one boundary per interaction
            if sensitive:
                log.error("slack.interaction_failed", what=what, error=type(exc).__name__)  # noqa: TRY400
            else:
                log.exception("slack.interaction_failed", what=what)

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
        async def on_action(ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
            await ack()
            action = _map((body.get("actions") or [{}])[0])
            if action.get("action_id") != MULTI_ACTION:  # a selection changing: nothing yet
                self.spawn(self._click(body, action), "click")

        @app.view(REPLY_CALLBACK)
        async def on_submit(
            ack: Callable[..., Awaitable[Any]], body: dict[str, Any], view: dict[str, Any]
        ) -> None:
            meta, text, chosen = parse_submission(view)
            errors = submission_errors(meta, text)
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            await ack()
            self.spawn(
                self._submitted(body, meta, text, chosen), "modal", sensitive=bool(meta.get("s"))
            )

        @app.event("message")
        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            self.spawn(self._message(body, event), "thread reply")

        @app.command(COMMAND)
        async def on_command(ack: Callable[..., Awaitable[Any]], body: dict[str, Any]) -> None:
            await ack()
            self.spawn(self._command(body), "command")

    # ------------------------------------------------------------------ answering

    async def _attempt(
        self, key: str, attempt: Attempt, where: Where, seen: PromptView | None = None
    ) -> bool:
        """Judge and record; a refusal is told privately; a win is said in the thread.

        ``seen``: the view read just before, which the thread note reuses (with the answer) rather
        than reading it again."""
        who = attempt.respondent
        try:
            outcome = await self.elicitations.answer(key, attempt)
        except KeyError:
            await self._tell(who, where, NOT_FOUND)
            return False
        except DeliveryError as exc:
            # Only a secret goes upstream during answer(); the error names no secret, but the
            # person is told without it and it is logged by kind only.
            log.warning("slack.secret_not_delivered", key=key, error=type(exc).__name__)
            await self._tell(
                who,
                where,
                "Your answer could not be passed on upstream; nothing was recorded. "
                "Please try again.",
            )
            return False
        log.info(
            "slack.attempt",
            key=key,
            by=who.key,
            won=outcome.won,
            refused=outcome.result.code.value if isinstance(outcome.result, Refusal) else None,
        )
        if isinstance(outcome.result, Refusal):
            await self._tell(who, where, outcome.result.message)
            return False
        if outcome.won and self.announce_in_thread and where.root_ts:
            view = (
                replace(seen, status=Status.ANSWERED, answer=outcome.result)
                if seen is not None
                else await self.elicitations.view(key)
            )
            if view is not None:
                note, root = result_text(view), where.root_ts
                await _paced(lambda: self.chat.say(where.channel, note, thread_ts=root))
        return outcome.won

    async def _tell(self, who: Identity, where: Where, text: str) -> None:
        if who.is_bot:  # bots read no ephemerals; the refusal is in the audit log
            return
        await _paced(
            lambda: self.chat.ephemeral(where.channel, who.user, text, thread_ts=where.thread_ts)
        )

    # ------------------------------------------------------------------ clicks

    async def _click(self, body: Mapping[str, Any], action: Mapping[str, Any]) -> None:
        container = _map(body.get("container"))
        message = _map(body.get("message"))
        channel = _str(_map(body.get("channel")).get("id")) or _str(container.get("channel_id"))
        who = _identity(
            _map(body.get("user")).get("id"),
            _map(body.get("user")).get("team_id") or _map(body.get("team")).get("id"),
            name=_map(body.get("user")).get("name"),
        )
        if channel is None or who is None:
            return
        message_ts = _str(container.get("message_ts")) or _str(message.get("ts"))
        thread = _str(message.get("thread_ts"))
        in_thread = thread if thread is not None and thread != message_ts else None
        where = Where(channel, in_thread or message_ts, in_thread)
        action_id = str(action.get("action_id", ""))
        raw = action.get("value")
        if raw is None:
            raw = _map(action.get("selected_option")).get("value")
        value = decode_value(raw)
        key = await self._key_of(value, action.get("block_id"), message, channel, message_ts)
        view = await self.elicitations.view(key) if key is not None else None
        if key is None or view is None:
            await self._tell(who, where, NOT_FOUND)
            return
        e = view.elicitation
        attempt = Attempt(respondent=who, via=where.via, revision=revision_of(value))
        if action_id == REPLY_ACTION:
            await self._open_modal(body, view, where, who, message_ts)
            return
        if action_id == CLAIM_ACTION:
            await self._claim(key, who, where)
            return
        if action_id == SUBMIT_ACTION:
            ids = [chosen_id(e, v) for v in _multi_selection(body)]
            attempt = attempt.model_copy(update={"option_ids": tuple(ids)})
        elif action_id.startswith(OPTION_ACTION) or action_id == SELECT_ACTION:
            option_id = chosen_id(e, value)
            option = e.option(option_id)
            if option is not None and option.requires_text and view.status is Status.PENDING:
                await self._open_modal(body, view, where, who, message_ts, option_id=option_id)
                return
            attempt = attempt.model_copy(update={"option_ids": (option_id,)})
        elif action_id != ACK_ACTION:
            return
        await self._attempt(key, attempt, where, view)

    async def _claim(self, key: str, who: Identity, where: Where) -> None:
        """ "I'm on it": escalation and follow-ups wait; every copy shows who (via the outbox)."""
        outcome = await self.elicitations.claim(key, who)
        if outcome.claim is not None:
            until = format_time(outcome.claim.until)
            text = f"You're on it until {until}: escalation and follow-ups wait for you."
        else:
            text = outcome.refusal.message if outcome.refusal else "Nothing to claim."
        await self._tell(who, where, text)

    async def _key_of(
        self,
        value: Mapping[str, Any],
        block_id: Any,
        message: Mapping[str, Any],
        channel: str,
        message_ts: str | None,
    ) -> str | None:
        """The elicitation a click is about: the value's key, the block id's, the message
        metadata's, or the message's ref key."""
        key = _str(value.get("e"))
        if key is not None:
            return key
        prefix, sep, suffix = str(block_id or "").partition(":")
        if sep and prefix.startswith("elicitbot.") and suffix:
            return suffix
        meta = _map(message.get("metadata"))
        from_meta = _str(_map(meta.get("event_payload")).get("elicitation"))
        if from_meta is not None:
            return from_meta
        if message_ts is None:
            return None
        return await self.elicitations.key_for_message(ref_key(channel, message_ts))

    async def _open_modal(
        self,
        body: Mapping[str, Any],
        view: PromptView,
        where: Where,
        who: Identity,
        message_ts: str | None,
        *,
        option_id: str | None = None,
    ) -> None:
        key = view.elicitation.key
        if view.status is not Status.PENDING:
            # Closed: the rules say how (already answered by …, expired, cancelled).
            await self._attempt(key, Attempt(respondent=who, via=where.via), where)
            return
        trigger = _str(body.get("trigger_id"))
        if trigger is None:
            return
        modal = reply_modal(
            view,
            channel=where.channel,
            message_ts=message_ts,
            thread_ts=where.thread_ts,
            option_id=option_id,
        )
        try:
            await self.chat.open_view(trigger, modal)
        except DeliveryError as exc:
            log.warning("slack.modal_not_opened", key=key, error=str(exc))
            await self._tell(
                who, where, "The form could not be opened; click again, or reply in the thread."
            )

    # ------------------------------------------------------------------ the modal

    async def _submitted(
        self,
        body: Mapping[str, Any],
        meta: Mapping[str, Any],
        text: str | None,
        chosen: list[dict[str, Any]],
    ) -> None:
        user = _map(body.get("user"))
        who = _identity(
            user.get("id"),
            user.get("team_id") or _map(body.get("team")).get("id"),
            name=user.get("name"),
        )
        channel = _str(meta.get("c"))
        if who is None or channel is None:
            return
        message_ts = _str(meta.get("m"))
        thread = _str(meta.get("t"))
        where = Where(channel, thread or message_ts, thread)
        key = _str(meta.get("e"))
        if key is None and message_ts is not None:
            key = await self.elicitations.key_for_message(ref_key(channel, message_ts))
        view = await self.elicitations.view(key) if key is not None else None
        if key is None or view is None:
            await self._tell(who, where, NOT_FOUND)
            return
        fixed = _str(meta.get("o"))
        ids = [fixed] if fixed else [chosen_id(view.elicitation, v) for v in chosen]
        secret = bool(meta.get("s"))
        attempt = Attempt(
            respondent=who,
            option_ids=tuple(ids),
            text=text,
            secret=secret,
            via=where.via,
            revision=revision_of(meta),
        )
        await self._attempt(key, attempt, where, view)

    # ------------------------------------------------------------------ thread replies

    async def _message(self, body: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        subtype = event.get("subtype")
        channel = _str(event.get("channel"))
        ts = _str(event.get("ts"))
        root = _str(event.get("thread_ts"))
        if subtype not in REPLY_SUBTYPES or channel is None or ts is None:
            return
        if root is None or root == ts:
            return  # not a reply in a thread
        bot_id = _str(event.get("bot_id"))
        user = _str(event.get("user"))
        if (bot_id is not None and bot_id == self.chat.bot_id) or user == self.chat.bot_user_id:
            return  # our own
        key = await self.elicitations.key_for_message(ref_key(channel, root))
        if key is None:
            return  # a thread that is not ours
        event_id = _str(body.get("event_id"))
        if event_id is not None and not await self.elicitations.first_time(EVENT_CHANNEL, event_id):
            log.info("slack.event_redelivered", event_id=event_id)
            return
        if not await self.elicitations.first_time(MESSAGE_CHANNEL, ref_key(channel, ts)):
            log.info("slack.message_redelivered", channel=channel, ts=ts)
            return
        view = await self.elicitations.view(key)
        if view is None:
            return
        is_bot = bot_id is not None or subtype == "bot_message"
        if is_bot and bot_id is not None:
            agents = self.elicitations.people.agents
            if f"slack:{bot_id}" in agents or user is None:
                user = bot_id
        team = event.get("user_team") or event.get("team") or body.get("team_id")
        who = _identity(user, team, is_bot=is_bot)
        if who is None:
            return
        where = Where(channel, root, root)
        reply = parse_reply(view.elicitation, slack_text(str(event.get("text") or "")))
        if isinstance(reply, HelpReply):
            if view.status is Status.PENDING:
                await self._tell(who, where, reply.message)
            return
        if isinstance(reply, TextReply) and view.status is not Status.PENDING:
            return  # talk in the thread after the answer, not an attempt
        attempt = Attempt(respondent=who, via=where.via)
        if isinstance(reply, ChoiceReply):
            attempt = attempt.model_copy(update={"option_ids": (reply.option_id,)})
        elif isinstance(reply, MultiChoiceReply):
            attempt = attempt.model_copy(update={"option_ids": reply.option_ids})
        else:
            attempt = attempt.model_copy(update={"text": reply.text})
        await self._attempt(key, attempt, where, view)

    # ------------------------------------------------------------------ /elicitbot

    async def _command(self, body: Mapping[str, Any]) -> None:
        user = _str(body.get("user_id"))
        channel = _str(body.get("channel_id"))
        if user is None or channel is None:
            return
        if f"slack:{user}" not in self.elicitations.people.admins:
            log.info("slack.command_refused", by=f"slack:{user}")
            await self._reply_command(
                body, "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."
            )
            return
        words = str(body.get("text") or "").split()
        verb = words[0].lower() if words else "help"
        if verb == "routes" and len(words) == 1:
            lines = await self.elicitations.routes_text()
            shown = "\n".join(lines) if lines else "(no routes)"
            await self._reply_command(body, f"Routes, first match wins:\n```{shown}```")
            return
        parsed = _subscription(words[1:]) if verb in ("subscribe", "unsubscribe") else None
        if parsed is None:
            await self._reply_command(body, USAGE)
            return
        workspace, board = parsed
        destination = f"slack:{channel}"
        what = f"workspace `{workspace}`" + (f", board `{board}`" if board else "")
        if verb == "subscribe":
            added = await self.elicitations.subscribe(
                workspace, board, destination, f"slack:{user}"
            )
            text = (
                f"Subscribed: requests of {what} now come to <#{channel}>."
                if added
                else f"Already subscribed: {what} comes to <#{channel}>."
            )
        else:
            removed = await self.elicitations.unsubscribe(workspace, board, destination)
            text = (
                f"Unsubscribed: {what} no longer comes to <#{channel}>."
                if removed
                else f"Nothing to remove: {what} was not subscribed here from chat."
            )
        log.info("slack.command", verb=verb, by=f"slack:{user}", channel=channel)
        await self._reply_command(body, text)

    async def _reply_command(self, body: Mapping[str, Any], text: str) -> None:
        """To the one who ran the command only: the command's response_url, else ephemeral."""
        url = _str(body.get("response_url"))
        if url is not None:
            with contextlib.suppress(Exception):
                sent = await AsyncWebhookClient(url).send_dict(
                    {"response_type": "ephemeral", "text": text}
                )
                if sent.status_code == 200:  # noqa: PLR2004 - HTTP OK
                    return
        user, channel = _str(body.get("user_id")), _str(body.get("channel_id"))
        if user is not None and channel is not None:
            await self.chat.ephemeral(channel, user, text)


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


def _multi_selection(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The option values chosen in a message's multi-select, from the click's state."""
    values = _map(_map(body.get("state")).get("values"))
    for block in values.values():
        element = _map(_map(block).get(MULTI_ACTION))
        if element:
            return [
                decode_value(_map(o).get("value")) for o in element.get("selected_options") or []
            ]
    return []


def _subscription(args: list[str]) -> tuple[str, str | None] | None:
    """``<workspace> [board <id>]`` -> (workspace, board); None when it does not parse."""
    if len(args) not in (1, 3):
        return None
    if len(args) == 3 and args[1].lower() != "board":  # noqa: PLR2004 - workspace board <id>
        return None
    names = [args[0], *args[2:]]
    if not all(_ARG.match(n) and len(n) <= MAX_COMMAND_ARG for n in names):
        return None
    return args[0], args[2] if len(args) == 3 else None  # noqa: PLR2004


def build_app(
    chat: SlackChat, elicitations: Elicitations, *, signing_secret: str | None
) -> SlackInteractivity:
    """The interactive Slack app. It may be built before ``chat.verify()``; it answers Slack only
    once that ``auth.test`` has run (its authorization is taken from it, never fetched per
    request)."""
    return SlackInteractivity(chat, elicitations, signing_secret=signing_secret)

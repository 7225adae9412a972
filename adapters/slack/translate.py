"""Slack payloads as the core's actions, and outcomes in Slack's words. Pure. A person is
``team_id`` + ``user.id``, never a display name; a button's value carries its key, so a click on
any copy resolves.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from adapters.slack.modals import form as form_modal
from adapters.slack.modals.reply import (
    CHOICE_BLOCK,
    CHOICES_BLOCK,
    INPUT_ACTION,
    SECRET_BLOCK,
    TEXT_BLOCK,
)
from adapters.slack.render import (
    ACK_ACTION,
    MULTI_ACTION,
    OPTION_ACTION,
    SELECT_ACTION,
    SUBMIT_ACTION,
)
from bot.domain.actions import Choose, ClaimIt, Outcome, Reply, Submit
from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.model import Disclosure, Elicitation, ElicitationKey, Identity
from bot.domain.rules import format_time

EVENT_CHANNEL = "slack"
"""``first_time`` namespace of Slack ``event_id``s."""
MESSAGE_CHANNEL = "slack:message"
"""``first_time`` namespace of Slack messages (``<channel>/<ts>``)."""
REPLY_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "me_message", "bot_message"})

_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_MARKUP = re.compile(r"<([^<>|]*)(?:\|([^<>]*))?>")


def slack_text(text: str) -> str:
    """What a person typed: mentions dropped, links and channels as written, entities unescaped."""

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
    """The option a value names by id or index (``"i"``); an index out of range gives an id no
    option has, which the rules refuse as not offered."""
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


def digest_of(value: Mapping[str, Any]) -> str | None:
    return text_of(value.get("d"))


def text_of(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def mapping_of(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Where:
    """``thread_ts`` None for a click on a top-level message."""

    channel: str
    root_ts: str | None
    thread_ts: str | None = None

    @property
    def via(self) -> str:
        return f"slack:{self.channel}"


def identity(user: Any, team: Any, *, name: Any = None, is_bot: bool = False) -> Identity | None:
    user_id = text_of(user)
    if user_id is None:
        return None
    return Identity(
        platform="slack",
        user=user_id,
        team=text_of(team),
        is_bot=is_bot,
        display_name=text_of(name),
    )


def action_value(action: Mapping[str, Any]) -> dict[str, Any]:
    """A button's value, else the chosen option's (our JSON; {} for anything else)."""
    raw = action.get("value")
    return decode_value(
        mapping_of(action.get("selected_option")).get("value") if raw is None else raw
    )


def first_action(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """Slack sends one action per ``block_actions`` payload."""
    actions = body.get("actions")
    return mapping_of(actions[0]) if isinstance(actions, list) and actions else {}


def person(body: Mapping[str, Any]) -> Identity | None:
    user = mapping_of(body.get("user"))
    return identity(
        user.get("id"),
        user.get("team_id") or mapping_of(body.get("team")).get("id"),
        name=user.get("name"),
    )


def key_in(meta: Mapping[str, Any]) -> ElicitationKey | None:
    """The elicitation key our metadata records under ``e``."""
    key = text_of(meta.get("e"))
    return None if key is None else ElicitationKey(key)


def payload_key(
    value: Mapping[str, Any], block_id: Any, message: Mapping[str, Any]
) -> ElicitationKey | None:
    """The key in the value, the block id or the message metadata (None: ask the ref key)."""
    key = key_in(value)
    if key is not None:
        return key
    prefix, sep, suffix = str(block_id or "").partition(":")
    if sep and prefix.startswith("elicitbot.") and suffix:
        return ElicitationKey(suffix)
    meta = mapping_of(message.get("metadata"))
    named = text_of(mapping_of(meta.get("event_payload")).get("elicitation"))
    return None if named is None else ElicitationKey(named)


@dataclass(frozen=True)
class Click:
    who: Identity
    where: Where
    action_id: str
    value: Mapping[str, Any]
    key: ElicitationKey | None  # payload_key
    message_ts: str | None
    trigger_id: str | None
    selection: tuple[Mapping[str, Any], ...] = ()  # the multi-select's values


def read_click(body: Mapping[str, Any], action: Mapping[str, Any]) -> Click | None:
    container = mapping_of(body.get("container"))
    message = mapping_of(body.get("message"))
    channel = text_of(mapping_of(body.get("channel")).get("id")) or text_of(
        container.get("channel_id")
    )
    who = person(body)
    if channel is None or who is None:
        return None
    message_ts = text_of(container.get("message_ts")) or text_of(message.get("ts"))
    thread = text_of(message.get("thread_ts"))
    in_thread = thread if thread is not None and thread != message_ts else None
    value = action_value(action)
    return Click(
        who=who,
        where=Where(channel, in_thread or message_ts, in_thread),
        action_id=str(action.get("action_id", "")),
        value=value,
        key=payload_key(value, action.get("block_id"), message),
        message_ts=message_ts,
        trigger_id=text_of(body.get("trigger_id")),
        selection=tuple(_multi_selection(body)),
    )


def picked_option(click: Click, e: Elicitation) -> str | None:
    if click.action_id.startswith(OPTION_ACTION) or click.action_id == SELECT_ACTION:
        return chosen_id(e, click.value)
    return None


def choice(
    click: Click, key: ElicitationKey, e: Elicitation, *, shown: Disclosure
) -> Choose | None:
    """The choice a click makes (None: it answers nothing). ``shown`` comes from our own
    rendering, never the payload, which a crafted click could fill in."""
    revision = revision_of(click.value)
    picked = picked_option(click, e)
    if click.action_id == SUBMIT_ACTION:
        ids = tuple(chosen_id(e, v) for v in click.selection)
    elif picked is not None:
        ids = (picked,)
    elif click.action_id == ACK_ACTION:
        ids = ()
    else:
        return None
    form = picked is not None
    digest = digest_of(click.value)
    return Choose(key, click.who, click.where.via, ids, revision, digest, shown=shown, form=form)


def claim_it(click: Click, key: ElicitationKey) -> ClaimIt:
    return ClaimIt(key, click.who, click.where.via)


def _multi_selection(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    values = mapping_of(mapping_of(body.get("state")).get("values"))
    for block in values.values():
        element = mapping_of(mapping_of(block).get(MULTI_ACTION))
        if element:
            return [
                decode_value(mapping_of(o).get("value"))
                for o in element.get("selected_options") or []
            ]
    return []


def _state_value(values: Mapping[str, Any], block_id: str) -> Mapping[str, Any]:
    return mapping_of(mapping_of(values.get(block_id)).get(INPUT_ACTION))


def parse_submission(
    view: Mapping[str, Any],
) -> tuple[dict[str, Any], str | None, list[dict[str, Any]]]:
    """(private metadata, text, chosen option values) of a reply-modal submission."""
    meta = decode_value(view.get("private_metadata"))
    values = mapping_of(mapping_of(view.get("state")).get("values"))
    text: str | None = None
    for block in (SECRET_BLOCK, TEXT_BLOCK):
        typed = _state_value(values, block).get("value")
        if isinstance(typed, str) and typed:
            text = typed
    selected = _state_value(values, CHOICE_BLOCK).get("selected_option")
    chosen = [selected] if selected else []
    chosen += list(_state_value(values, CHOICES_BLOCK).get("selected_options") or [])
    return meta, text, [decode_value(mapping_of(o).get("value")) for o in chosen]


def submission_errors(
    meta: Mapping[str, Any], text: str | None, view: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Checks before the ack: the text limit shown; a form's every question answered."""
    limit = meta.get("l")
    if form_modal.questions_of(meta) is not None:
        return form_modal.form_errors(view or {}, limit)
    block = SECRET_BLOCK if meta.get("s") else TEXT_BLOCK
    if text is not None and isinstance(limit, int) and len(text) > limit:
        return {block: f"Your answer is {len(text):,} characters; the limit is {limit:,}."}
    return {}


@dataclass(frozen=True)
class Submission:
    who: Identity
    where: Where
    key: ElicitationKey | None  # None when it did not fit: the message's ref key tells
    message_ts: str | None
    text: str | None
    chosen: tuple[Mapping[str, Any], ...]
    fixed: str | None  # the option the modal was opened for (one that needs a comment)
    secret: bool
    revision: int | None
    form: Mapping[int, form_modal.FormPick] | None = None  # by question number
    digest: str | None = None


def read_submission(
    body: Mapping[str, Any],
    meta: Mapping[str, Any],
    text: str | None,
    chosen: list[dict[str, Any]],
) -> Submission | None:
    who = person(body)
    channel = text_of(meta.get("c"))
    if who is None or channel is None:
        return None
    message_ts = text_of(meta.get("m"))
    thread = text_of(meta.get("t"))
    count = form_modal.questions_of(meta)
    values = mapping_of(mapping_of(mapping_of(body.get("view")).get("state")).get("values"))
    return Submission(
        who=who,
        where=Where(channel, thread or message_ts, thread),
        key=key_in(meta),
        message_ts=message_ts,
        text=text,
        chosen=tuple(chosen),
        fixed=text_of(meta.get("o")),
        secret=bool(meta.get("s")),
        revision=revision_of(meta),
        form=form_modal.read_form(values, count) if count is not None else None,
        digest=digest_of(meta),
    )


def submit(
    submission: Submission, key: ElicitationKey, e: Elicitation, *, shown: Disclosure
) -> Submit:
    """``shown``: of the message or review the modal opened from, as for :func:`choice`."""
    s = submission
    base = Submit(key, s.who, s.where.via, revision=s.revision, digest=s.digest, shown=shown)
    if s.form is not None:  # a form: its answers by question id, for the core to check
        return replace(base, fields={"answers": form_modal.form_answers(e, s.form)})
    ids = (s.fixed,) if s.fixed else tuple(chosen_id(e, v) for v in s.chosen)
    return replace(base, option_ids=ids, text=s.text, secret=s.secret)


@dataclass(frozen=True)
class ThreadReply:
    """A message in a thread (not the root) by someone other than elicitbot."""

    who: Identity
    channel: str
    ts: str
    root_ts: str
    event_id: str | None
    text: str  # slack_text

    @property
    def where(self) -> Where:
        return Where(self.channel, self.root_ts, self.root_ts)

    def reply(self, key: ElicitationKey, *, shown: Disclosure | None = None) -> Reply:
        """``shown`` None: nothing known, so the core accepts no approving option."""
        return Reply(key, self.who, self.where.via, self.text, shown=shown)


def read_reply(
    body: Mapping[str, Any],
    event: Mapping[str, Any],
    *,
    bot_id: str | None,
    bot_user_id: str | None,
    agents: frozenset[str],
) -> ThreadReply | None:
    """A thread reply to judge, else None; a configured agent's bot is known by its ``bot_id``."""
    subtype = event.get("subtype")
    channel = text_of(event.get("channel"))
    ts = text_of(event.get("ts"))
    root = text_of(event.get("thread_ts"))
    if subtype not in REPLY_SUBTYPES or channel is None or ts is None:
        return None
    if root is None or root == ts:
        return None  # not a reply in a thread
    sender_bot = text_of(event.get("bot_id"))
    user = text_of(event.get("user"))
    if (sender_bot is not None and sender_bot == bot_id) or user == bot_user_id:
        return None  # our own
    is_bot = sender_bot is not None or subtype == "bot_message"
    if is_bot and sender_bot is not None and (f"slack:{sender_bot}" in agents or user is None):
        user = sender_bot
    team = event.get("user_team") or event.get("team") or body.get("team_id")
    who = identity(user, team, is_bot=is_bot)
    if who is None:
        return None
    return ThreadReply(
        who=who,
        channel=channel,
        ts=ts,
        root_ts=root,
        event_id=text_of(body.get("event_id")),
        text=slack_text(str(event.get("text") or "")),
    )


NOT_DELIVERED = (
    "Your answer could not be passed on upstream; nothing was recorded. Please try again."
)


def not_delivered(exc: DeliveryError) -> str:
    """A secret not passed on: the upstream's refusal (never holding the value), else retry."""
    if isinstance(exc, PermanentDeliveryError):
        return f"Your secret was not passed on: {exc} Nothing was stored."
    return NOT_DELIVERED


RESEND_PRIVATE = (
    "Your private answer may not have been passed on: elicitbot restarted, and it never keeps "
    "such an answer. The question is still open: please send it again with the Reply… button."
)
MODAL_NOT_OPENED = "The form could not be opened; click again, or reply in the thread."


def claim_text(outcome: Outcome) -> str:
    """ "I'm on it", answered: until when, or why not."""
    if outcome.claim is not None:
        until = format_time(outcome.claim.until)
        return f"You're on it until {until}: escalation and follow-ups wait for you."
    return refusal_text(outcome) or "Nothing to claim."


def refusal_text(outcome: Outcome) -> str:
    return outcome.refusal.message if outcome.refusal is not None else outcome.message

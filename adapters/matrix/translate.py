"""Matrix events as what people do: pure translation, no I/O.

:func:`classify` says what one event's raw JSON is to elicitbot (a reaction, a thread or rich
reply, an edit, a ``!elicitbot`` command, a redaction, something encrypted) or None: our own
events, redacted ones, ``m.notice`` (what bots send, never answers) and anything malformed.
:func:`on_reaction`, :func:`on_reply` and :func:`on_command` only turn an event into the core's
action; what the copy shows (``shown``, answer rule 2) the listener renders from the current view
and the copy's stored ref, never from anything in the event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from adapters.matrix.intake.reactions import ACK_KEY, key_index
from adapters.matrix.markup.html import txn_digest
from bot.domain.actions import Choose, ClaimIt, Command
from bot.domain.actions import Reply as ReplyAction
from bot.domain.model import AnswerMode, Disclosure, Elicitation, ElicitationKey, Identity
from bot.domain.policy import NO_STANDING, Standing
from bot.domain.records import Writeback, WritebackState

COMMAND_PREFIX = "!elicitbot"
CLAIM_REACTION = "🙋"
"""A reaction starting with this (any skin tone or gender) claims the question."""
CLAIM_COMMANDS = frozenset({"!elicitbot claim", "!elicitbot i'm on it", "i'm on it"})
"""A thread reply saying one of these (any case and spacing) claims the question."""


@dataclass(frozen=True)
class _Event:
    event_id: str
    sender: str


@dataclass(frozen=True)
class Reaction(_Event):
    target: str
    key: str


@dataclass(frozen=True)
class Reply(_Event):
    root: str
    """The thread root (``m.thread``), or the replied-to event of a rich reply."""
    body: str
    threaded: bool


@dataclass(frozen=True)
class Edit(_Event):
    original: str
    body: str
    """The new body (``m.new_content.body``)."""


@dataclass(frozen=True)
class CommandMessage(_Event):
    body: str


@dataclass(frozen=True)
class Encrypted(_Event):
    """An ``m.room.encrypted`` event, or the ``m.room.encryption`` state turning it on."""


@dataclass(frozen=True)
class Redaction(_Event):
    redacts: str


InboundEvent: TypeAlias = Reaction | Reply | Edit | CommandMessage | Encrypted | Redaction


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def classify(event: Mapping[str, Any], *, own_user_id: str) -> InboundEvent | None:
    """What ``event`` (raw JSON) is to elicitbot; None when it is nothing to act on."""
    event_id = _str(event.get("event_id"))
    sender = _str(event.get("sender"))
    kind = _str(event.get("type"))
    if event_id is None or sender is None or kind is None or sender == own_user_id:
        return None
    if "redacted_because" in _mapping(event.get("unsigned")):
        return None
    content = _mapping(event.get("content"))
    if kind == "m.room.encrypted" or (
        kind == "m.room.encryption" and event.get("state_key") == "" and content
    ):
        return Encrypted(event_id, sender)
    if kind == "m.room.redaction":
        # ``redacts`` is top-level up to room version 10 and in the content from version 11.
        redacts = _str(event.get("redacts")) or _str(content.get("redacts"))
        return None if redacts is None else Redaction(event_id, sender, redacts)
    relates = _mapping(content.get("m.relates_to"))
    if kind == "m.reaction":
        target = _str(relates.get("event_id"))
        key = _str(relates.get("key"))
        if relates.get("rel_type") != "m.annotation" or target is None or key is None:
            return None
        return Reaction(event_id, sender, target, key)
    if kind != "m.room.message" or content.get("msgtype") != "m.text":
        return None
    body = content.get("body")
    if not isinstance(body, str):
        return None
    rel_type = relates.get("rel_type")
    if rel_type == "m.replace":
        original = _str(relates.get("event_id"))
        new = _mapping(content.get("m.new_content"))
        new_body = new.get("body")
        if original is None or not isinstance(new_body, str):
            return None  # an edit without new content is invalid (spec: event replacements)
        return Edit(event_id, sender, original, new_body)
    if rel_type == "m.thread":
        root = _str(relates.get("event_id"))
        return None if root is None else Reply(event_id, sender, root, body, threaded=True)
    replied = _str(_mapping(relates.get("m.in_reply_to")).get("event_id"))
    if replied is not None:
        return Reply(event_id, sender, replied, body, threaded=False)
    if body.strip().lower().startswith(COMMAND_PREFIX):
        return CommandMessage(event_id, sender, body.strip())
    return None


def reply_root(event: Mapping[str, Any]) -> str | None:
    """The event a message replies to: its thread root, else its rich-reply target."""
    relates = _mapping(_mapping(event.get("content")).get("m.relates_to"))
    if relates.get("rel_type") == "m.thread":
        return _str(relates.get("event_id"))
    return _str(_mapping(relates.get("m.in_reply_to")).get("event_id"))


def identity(
    sender: str, *, bots: frozenset[str] = frozenset(), name: str | None = None
) -> Identity:
    """The person behind a Matrix ID, named by ``name`` (their display name in the room, which
    the Matrix spec's rule disambiguates with the ID when another member shares it), else by
    the ID. ``bots``: identity keys (``matrix:@…``) known to be bots."""
    shown_name = " ".join((name or "").split())
    return Identity(
        platform="matrix",
        user=sender,
        is_bot=f"matrix:{sender}" in bots,
        display_name=shown_name or sender,
    )


def reaction_choice(e: Elicitation, key: str) -> tuple[str, ...] | None:
    """The option ids a reaction chooses: keycap *n* is option *n*; ✅ acknowledges a question
    without options. None: the reaction is not an answer (any other emoji, a number past the
    options, a free-text question)."""
    if e.answer_mode in (AnswerMode.FREE_TEXT, AnswerMode.SECRET):
        return None
    index = key_index(key)
    if index is not None:
        return (e.options[index].id,) if index < len(e.options) else None
    if key.strip() == ACK_KEY and not e.options and e.answer_mode is AnswerMode.ACKNOWLEDGE:
        return ()
    return None


def claim_id(item: InboundEvent, *, reopened: int = 0) -> str:
    """What dedupes an event in the store: its event id, except a reaction, which counts once per
    sender, message and key (taken back and made again is no new attempt), and once more each
    time a refused answer opened the question again (``reopened``)."""
    if isinstance(item, Reaction):
        parts = (item.target, item.sender, item.key, *((str(reopened),) if reopened else ()))
        return f"reaction:{txn_digest(*parts)}"
    return item.event_id


def reopenings(wb: Writeback | None) -> int:
    """How many times a refused answer opened the question again (rounds after a refusal)."""
    if wb is None:
        return 0
    return wb.round if wb.state is WritebackState.REFUSED and wb.reopened else wb.round - 1


def via(room_id: str) -> str:
    return f"matrix:{room_id}"


def submit(
    key: ElicitationKey,
    r: Reaction,
    room_id: str,
    option_ids: tuple[str, ...],
    *,
    shown: Disclosure,
    bots: frozenset[str] = frozenset(),
    name: str | None = None,
    standing: Standing = NO_STANDING,
    subject: tuple[int | None, str | None] = (None, None),
) -> Choose:
    """A ✅ on a multiple-choice prompt: the options the person's keycaps chose; ``subject``: the
    revision and digest the prompt was sent with, when known (rule 2)."""
    who = identity(r.sender, bots=bots, name=name)
    revision, digest = subject
    return Choose(
        key, who, via(room_id), option_ids, revision, digest, shown=shown, standing=standing
    )


def on_reaction(
    key: ElicitationKey,
    e: Elicitation,
    r: Reaction,
    room_id: str,
    *,
    shown: Disclosure,
    bots: frozenset[str] = frozenset(),
    name: str | None = None,
    standing: Standing = NO_STANDING,
    subject: tuple[int | None, str | None] = (None, None),
) -> Choose | ClaimIt | None:
    """A reaction on a prompt of ``e``: 🙋 claims it, a keycap (or ✅) chooses; None: any other."""
    who = identity(r.sender, bots=bots, name=name)
    if r.key.startswith(CLAIM_REACTION):
        return ClaimIt(key, who, via(room_id), standing=standing)
    chosen = reaction_choice(e, r.key)
    if chosen is None:
        return None
    revision, digest = subject
    return Choose(key, who, via(room_id), chosen, revision, digest, shown=shown, standing=standing)


def on_reply(
    key: ElicitationKey,
    sender: str,
    body: str,
    room_id: str,
    *,
    shown: Disclosure,
    bots: frozenset[str] = frozenset(),
    name: str | None = None,
    standing: Standing = NO_STANDING,
    subject: tuple[int | None, str | None] = (None, None),
) -> ReplyAction | ClaimIt:
    """A thread reply (or an edit of one) under a prompt: a claim, or a reply for the core."""
    who = identity(sender, bots=bots, name=name)
    if " ".join(body.split()).casefold() in CLAIM_COMMANDS:
        return ClaimIt(key, who, via(room_id), standing=standing)
    revision, digest = subject
    return ReplyAction(key, who, via(room_id), body, shown, revision, digest, standing=standing)


def command_words(body: str) -> str | None:
    """The words of a ``!elicitbot …`` message after the prefix; None when it is not addressed
    to elicitbot (``!elicitbotx``, plain text)."""
    words = body.split()
    if not words or words[0].lower() != COMMAND_PREFIX:
        return None
    return " ".join(words[1:])


def on_command(
    message: CommandMessage,
    room_id: str,
    *,
    elevated: bool,
    bots: frozenset[str] = frozenset(),
    name: str | None = None,
) -> Command | None:
    """A room command; ``elevated``: the sender moderates the room (the platform's grant)."""
    words = command_words(message.body)
    if words is None:
        return None
    who = identity(message.sender, bots=bots, name=name)
    return Command(who, via(room_id), words, elevated=elevated)


@dataclass(frozen=True)
class Invite:
    """What an invite's stripped state says: who invited the bot, whether the room is end-to-end
    encrypted, and whether the inviter made it a direct room (``is_direct``, as Element does)."""

    inviter: str
    encrypted: bool
    direct: bool


def read_invite(invite_state: list[dict[str, Any]], *, own_user_id: str) -> Invite | None:
    """The bot's invite in ``invite_state``; None when no event says who invited it."""
    inviter = None
    encrypted = direct = False
    for event in invite_state:
        content = _mapping(event.get("content"))
        if (
            event.get("type") == "m.room.member"
            and event.get("state_key") == own_user_id
            and content.get("membership") == "invite"
        ):
            inviter = event.get("sender")
            direct = content.get("is_direct") is True
        if event.get("type") == "m.room.encryption" and content:
            encrypted = True
    return Invite(inviter, encrypted, direct) if isinstance(inviter, str) else None

"""Several options by reaction: on a pending multiple-choice prompt keycap *n* toggles option *n*
and ✅ submits the selection as one ``Choose``, in the options' order.

The selection is nowhere of ours: it is the person's live keycap reactions as the homeserver holds
them at ✅ (``/relations``), so it survives restarts and replicas, a removal the bot never saw
counts, and a crafted event cannot claim what the room does not show. In an encrypted room a
keycap that cannot be decrypted is unknown, never absent: ✅ submits nothing while any is.

A notice in the prompt's thread shows the selection so far, read afresh one refresh at a time so
the last edit is the latest state. Its first send's transaction id is per (prompt, person), so a
restart gets the same notice back; each edit's is its triggering event's.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.matrix.intake.notices import notice_content, notice_edit_content
from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS, key_index
from adapters.matrix.markup.html import clip, remember, txn_digest
from bot.domain.forms import is_form
from bot.domain.model import AnswerMode, Elicitation, ElicitationKey, Status
from bot.domain.ports import PromptView
from bot.domain.wording import one_line

if TYPE_CHECKING:
    from adapters.matrix.chat import MatrixChat

SUBMIT_KEY = ACK_KEY
"""The reaction that submits a selection."""

NOTHING_CHOSEN = (
    "Nothing is chosen yet: react with the number of each option you choose, then with "
    f"{SUBMIT_KEY} to submit (or reply in this thread with their numbers, for example: 1, 3)."
)


def toggles(view: PromptView) -> bool:
    """Keycaps toggle choices on this prompt, and ✅ submits them (a pending multiple choice)."""
    e = view.elicitation
    return (
        view.status is Status.PENDING
        and e.answer_mode is AnswerMode.MULTI_CHOICE
        and bool(e.options)
        and not is_form(e)
    )


def _relation(event: Mapping[str, Any], prompt: str, sender: str) -> Mapping[str, Any] | None:
    """The relation of ``sender``'s live (not redacted) annotation on ``prompt``, else None."""
    if event.get("sender") != sender:
        return None
    unsigned = event.get("unsigned")
    if isinstance(unsigned, Mapping) and "redacted_because" in unsigned:
        return None
    content = event.get("content")
    relates = content.get("m.relates_to") if isinstance(content, Mapping) else None
    if not isinstance(relates, Mapping) or relates.get("rel_type") != "m.annotation":
        return None
    return relates if relates.get("event_id") == prompt else None


def _key(event: Mapping[str, Any], prompt: str, sender: str) -> str | None:
    """The key of ``sender``'s live reaction on ``prompt``, or None for any other event."""
    relates = _relation(event, prompt, sender) if event.get("type") == "m.reaction" else None
    key = None if relates is None else relates.get("key")
    return key if isinstance(key, str) else None


def _options(e: Elicitation, key: str) -> int | None:
    """The 0-based option a keycap names on ``e`` (one past the options or keycaps: None)."""
    index = key_index(key)
    return index if index is not None and index < min(len(e.options), len(KEYCAPS)) else None


def selection(
    e: Elicitation, annotations: Iterable[Mapping[str, Any]], prompt: str, sender: str
) -> tuple[str, ...]:
    """The option ids ``sender``'s keycap reactions on ``prompt`` choose, in the options' order."""
    chosen: set[int] = set()
    for event in annotations:
        key = _key(event, prompt, sender)
        index = None if key is None else _options(e, key)
        if index is not None:
            chosen.add(index)
    return tuple(e.options[i].id for i in sorted(chosen))


def unreadable(
    e: Elicitation, annotations: Iterable[Mapping[str, Any]], prompt: str, sender: str
) -> int:
    """How many of ``sender``'s live annotations on ``prompt`` are still encrypted and may be
    keycaps (by the key Element copies into the clear): unknown choices, never taken as ones."""
    count = 0
    for event in annotations:
        relates = _relation(event, prompt, sender)
        if event.get("type") != "m.room.encrypted" or relates is None:
            continue
        key = relates.get("key")
        if not isinstance(key, str) or _options(e, key) is not None:
            count += 1
    return count


@dataclass(frozen=True)
class Read:
    """A person's selection on a prompt as the homeserver holds it now."""

    chosen: tuple[str, ...]
    unreadable: int = 0
    """Their keycaps that could not be decrypted (yet): while any, nothing is submitted."""


def selection_read(
    e: Elicitation, annotations: Iterable[Mapping[str, Any]], prompt: str, sender: str
) -> Read:
    events = list(annotations)
    return Read(selection(e, events, prompt, sender), unreadable(e, events, prompt, sender))


def _reactions(n: int) -> str:
    return f"{n} of your number reactions" if n > 1 else "one of your number reactions"


def cannot_read(n: int) -> str:
    """A ✅ while ``n`` of the person's keycaps cannot be decrypted."""
    return (
        f"Nothing is submitted: I cannot decrypt {_reactions(n)} on this question yet (my device "
        f"has not received its key; I asked yours for it). React {SUBMIT_KEY} again in a "
        "moment, or reply in this thread with the numbers you choose (for example: 1, 3)."
    )


def _listed(e: Elicitation, option_ids: Iterable[str]) -> str:
    numbers = {o.id: n for n, o in enumerate(e.options, start=1)}
    return ", ".join(
        f"{numbers[o.id]}. {clip(one_line(o.label), 80)}" for o in e.options if o.id in option_ids
    )


def so_far(e: Elicitation, option_ids: tuple[str, ...], unknown: int = 0) -> str:
    """What the person has chosen so far, and how to submit it (``unknown``: their keycaps
    that cannot be decrypted yet)."""
    if unknown:
        unread = f"I cannot decrypt {_reactions(unknown)} yet (I asked your device for its key)"
        chosen = f"Your choice so far: {_listed(e, option_ids)}; " if option_ids else ""
        return f"{chosen}{unread} — react {SUBMIT_KEY} to submit once it can be read."
    if not option_ids:
        return NOTHING_CHOSEN
    return (
        f"Your choice so far: {_listed(e, option_ids)} — react {SUBMIT_KEY} to submit "
        "(take a number's reaction back to remove it)."
    )


def submitted(e: Elicitation, option_ids: tuple[str, ...]) -> str:
    return f"Submitted: {_listed(e, option_ids)}."


@dataclass(frozen=True)
class Toggle:
    """A keycap reaction seen on a multiple-choice prompt (to refresh on its redaction)."""

    room_id: str
    prompt: str
    key: ElicitationKey
    """The elicitation's key."""
    sender: str


def first_txn(prompt: str, sender: str) -> str:
    return f"elicitbot-choice-{txn_digest(prompt, sender)}"


def edit_txn(trigger: str) -> str:
    return f"elicitbot-choice-edit-{txn_digest(trigger)}"


class Selections:
    """The selection notices of one bot account (the selections themselves are the room's)."""

    def __init__(self, chat: MatrixChat) -> None:
        self.chat = chat
        self._lock = asyncio.Lock()
        self._notices: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._toggles: OrderedDict[str, Toggle] = OrderedDict()

    def saw(self, reaction: str, toggle: Toggle) -> None:
        """Keycap reaction ``reaction`` toggled: its redaction refreshes the notice too."""
        remember(self._toggles, reaction, toggle)

    def toggled_by(self, reaction: str) -> Toggle | None:
        """The toggle a redacted event made, when this process saw it."""
        return self._toggles.get(reaction)

    async def read(self, room_id: str, prompt: str, e: Elicitation, sender: str) -> Read:
        """``sender``'s selection on ``prompt`` as the homeserver holds it now."""
        return selection_read(e, await self.chat.annotations(room_id, prompt), prompt, sender)

    async def show(
        self, room_id: str, prompt: str, e: Elicitation, sender: str, *, trigger: str
    ) -> None:
        """Refresh ``sender``'s notice with their selection now (``trigger``: the event that
        changed it)."""
        async with self._lock:
            now = await self.read(room_id, prompt, e, sender)
            text = so_far(e, now.chosen, now.unreadable)
            await self._write(room_id, prompt, sender, text, trigger, create=True)

    async def submitted(
        self,
        room_id: str,
        prompt: str,
        e: Elicitation,
        sender: str,
        chosen: tuple[str, ...],
        *,
        trigger: str,
    ) -> None:
        """The notice says what was submitted (when this process made it)."""
        async with self._lock:
            await self._write(room_id, prompt, sender, submitted(e, chosen), trigger, create=False)

    async def _write(
        self, room_id: str, prompt: str, sender: str, text: str, trigger: str, *, create: bool
    ) -> None:
        content = notice_content(text, users=[sender], mention=False, thread_root=prompt)
        notice = self._notices.get((prompt, sender))
        if notice is None:
            if not create:
                return
            # The same notice after a restart (the homeserver's transaction dedupe): it may
            # show an older selection, so it is edited below as well.
            notice = await self.chat.send(
                room_id, "m.room.message", content, first_txn(prompt, sender), "selection"
            )
            remember(self._notices, (prompt, sender), notice)
        await self.chat.send(
            room_id,
            "m.room.message",
            notice_edit_content(notice, content),
            edit_txn(trigger),
            "selection edit",
        )

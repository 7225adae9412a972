"""Keycap reactions: the ones seeded on a prompt so a tap answers, and what one names. Pure."""

from __future__ import annotations

from typing import Any

from bot.domain.model import AnswerMode, Disclosure, Status
from bot.domain.ports import PromptView
from bot.domain.rules import offered_options

KEYCAPS: tuple[str, ...] = (
    "1\ufe0f\u20e3",
    "2\ufe0f\u20e3",
    "3\ufe0f\u20e3",
    "4\ufe0f\u20e3",
    "5\ufe0f\u20e3",
    "6\ufe0f\u20e3",
    "7\ufe0f\u20e3",
    "8\ufe0f\u20e3",
    "9\ufe0f\u20e3",
    "\U0001f51f",
)
"""The reaction for option 1 … 10."""
ACK_KEY = "\u2705"
"""The reaction that acknowledges a question without options (answer mode ``acknowledge``)."""


def reaction_content(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def reaction_keys(view: PromptView, *, shown: Disclosure) -> tuple[str, ...]:
    """The reactions to seed on a pending prompt: a keycap per option offered on a copy that
    shows ``shown`` (the first ten), then ✅ on a multiple choice; ✅ alone to acknowledge a
    question without options; none on a form or once it is closed."""
    e = view.elicitation
    if view.status is not Status.PENDING or e.answer_mode is AnswerMode.SECRET:
        return ()
    if e.answer_mode is AnswerMode.FREE_TEXT or len(e.form) > 1:
        return ()
    if not e.options:
        return (ACK_KEY,) if e.answer_mode is AnswerMode.ACKNOWLEDGE else ()
    keys = tuple(
        KEYCAPS[n]
        for n, offered in enumerate(
            offered_options(e, view.now, shown=shown, surface="matrix", approve_on=view.approve_on)[
                : len(KEYCAPS)
            ]
        )
        if offered.offered
    )
    return (*keys, ACK_KEY) if keys and e.answer_mode is AnswerMode.MULTI_CHOICE else keys


def key_index(key: str) -> int | None:
    """The 0-based option index a keycap reaction names (tolerating a missing VS16), or None."""
    normal = key.strip()
    for index, cap in enumerate(KEYCAPS):
        if normal in (cap, cap.replace("\ufe0f", "")):
            return index
    return None

"""The sentences of a Matrix prompt that are not agent content: how to answer, the result line
(:mod:`bot.domain.wording`'s words, cut to Matrix's budgets), the escalation banner and the
schedule. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS
from adapters.matrix.markup.form import how_to_answer
from adapters.matrix.markup.html import anchor, clip, esc, matrix_users, pill
from adapters.matrix.markup.previews import Block
from bot.domain.deadlines import active_claim, claim_line, schedule_line
from bot.domain.forms import is_form
from bot.domain.model import AnswerMode, Elicitation
from bot.domain.ports import PromptView
from bot.domain.refs import MatrixRef
from bot.domain.wording import result_sentence


def how_to(e: Elicitation) -> str:
    mode = e.answer_mode
    if mode is AnswerMode.SECRET:
        return "This answer is a secret: answer it in the web inbox, never in a chat message."
    if is_form(e):
        return how_to_answer(e.form)
    if mode is AnswerMode.FREE_TEXT or (mode is AnswerMode.CHOICE_OR_TEXT and not e.options):
        limit = f" (at most {e.max_length:,} characters)" if e.max_length else ""
        return f"To answer, reply in this message's thread with your answer{limit}."
    if not e.options:
        if mode is AnswerMode.ACKNOWLEDGE:
            return f"To acknowledge, react with {ACK_KEY} or reply in this message's thread."
        return "This question offers no options here; answer it in the web inbox."
    if mode is AnswerMode.MULTI_CHOICE:
        text = (
            "To answer, react with the number of each option you choose (take a reaction back "
            f"to remove it), then react with {ACK_KEY} to submit; or reply in this message's "
            "thread with their numbers, ids or labels separated by commas (for example: 1, 3)."
        )
    else:
        text = (
            "To answer, react with the option's number, or reply in this message's thread with "
            "its number, id or label."
        )
    if len(e.options) > len(KEYCAPS):
        text += f" Options after {len(KEYCAPS)} are chosen by a thread reply."
    if mode is AnswerMode.CHOICE_OR_TEXT:
        text += " Or reply with your own answer as text."
    return text


def result_line(view: PromptView, limit: int) -> str:
    """A closed copy's first line (:data:`bot.domain.wording.RESULT_LINES`): who answered what,
    when and where; on its way, refused or never confirmed upstream; expired; cancelled (with the
    upstream's reason, e.g. Pinework's ``[system:<reason>]``). Plain text: the caller escapes it."""
    result = view.result
    if result is None:
        return "Closed."
    cuts = {"what": limit, "reason": limit, "who": 300}

    def fill(name: str, value: str) -> str:
        return clip(value, cuts.get(name, 300))

    return result_sentence(result, fill)


def escalated_to(view: PromptView) -> list[str]:
    """The Matrix IDs an escalation copy mentions (none on an ordinary prompt)."""
    escalation = getattr(view, "escalation", None)
    return matrix_users(getattr(escalation, "mentions", None) or ())


def _matrix_ref(ref: Any) -> MatrixRef | None:
    """A Matrix copy's ref, typed or as its stored JSON; None for another platform's."""
    if isinstance(ref, MatrixRef):
        return ref
    if isinstance(ref, Mapping):
        room_id, event_id = ref.get("room_id"), ref.get("event_id")
        if isinstance(room_id, str) and isinstance(event_id, str):
            return MatrixRef(room_id, event_id)
    return None


def _originals(view: PromptView) -> list[str]:
    """Links to the original Matrix copies of an escalated question."""
    escalation = getattr(view, "escalation", None)
    links = []
    for original in getattr(escalation, "originals", None) or ():
        ref = _matrix_ref(getattr(original, "ref", None))
        if ref is not None:
            room, event = quote(ref.room_id, safe="!:"), quote(ref.event_id, safe="$:")
            links.append(f"https://matrix.to/#/{room}/{event}")
    return links


def escalation_block(view: PromptView) -> Block | None:
    """An escalation copy says so first, naming (and mentioning) whom it is escalated to."""
    if getattr(view, "escalation", None) is None:
        return None
    users = escalated_to(view)
    plain = "🚨 Escalated: nobody has answered yet."
    markup = esc(plain)
    if users:
        plain += " " + ", ".join(users)
        markup += " " + ", ".join(pill(u) for u in users)
    originals = _originals(view)
    if originals:
        plain += "\nOriginal: " + " ".join(originals)
        markup += "<br>Original: " + " ".join(anchor(u) for u in originals)
    return Block(plain, f"<p><b>{markup}</b></p>")


def timeline(view: PromptView) -> str:
    """What happens next and when, and who is on it (times in UTC; Matrix has no per-reader
    date formatting)."""
    parts = []
    if view.schedule:
        parts.append(f"⏱ {clip(schedule_line(view.schedule, now=view.now), 500)}")
    claim = active_claim(view.claim, view.now)
    if claim is not None:
        parts.append(f"🙋 {clip(claim_line(claim, view.now), 200)}")
    if view.waiting is not None:  # a route's quorum being counted
        parts.append(f"🗳️ {clip(view.waiting, 300)}")
    return " · ".join(parts)

"""The sentences of a Matrix prompt that are not agent content: how to answer, the result, who
answered (or whose answer is on its way to the system that asked, or was refused there), the
escalation banner and the schedule. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.matrix.form import describe, how_to_answer, is_form
from adapters.matrix.markup import anchor, clip, esc, matrix_users, one_line, pill
from adapters.matrix.previews import Block
from adapters.matrix.reactions import ACK_KEY, KEYCAPS
from bot.domain.deadlines import active_claim, claim_line, schedule_line
from bot.domain.model import AnswerMode, Elicitation, Status
from bot.domain.ports import PromptView
from bot.domain.records import WritebackState
from bot.domain.refs import MatrixRef
from bot.domain.rules import format_time
from bot.domain.views import cancelled_line, sending, source_name

_PLATFORMS = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


def shorten_digest(digest: str) -> str:
    """``sha256:4f2a0c1e9b8d…`` -> ``sha256:4f2a0c1e…``."""
    algorithm, sep, value = digest.partition(":")
    if sep and len(value) > 8:  # noqa: PLR2004 - eight hex digits identify it to a person
        return f"{algorithm}:{value[:8]}…"
    return clip(digest, 20)


def who(respondent: str, display_name: str | None) -> str:
    """How a respondent is named: by name where there is one (a Matrix person's display name
    as the room showed it, which the spec's rule disambiguates with the Matrix ID when another
    member shares it; a Slack person's name), else by their ID; the timeout rule as such."""
    platform, _, user = respondent.partition(":")
    if respondent == "system":
        return "the timeout rule"
    name = one_line(display_name or "")
    return name or (user if platform == "matrix" and user else respondent)


def platform_name(via: str) -> str:
    platform = via.partition(":")[0]
    return _PLATFORMS.get(platform, platform)


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
    """A closed copy's first line: who answered what, when and where; expired; cancelled (with
    the upstream's reason, e.g. Pinework's ``[system:<reason>]``)."""
    e = view.elicitation
    answer = view.answer
    if view.status is Status.ANSWERED and answer is not None:
        what = clip(describe(e, answer), limit)
        when = format_time(answer.at)
        system = answer.respondent == "system"
        name = clip(who(answer.respondent, answer.display_name), 300)
        whose = "the timeout decision" if system else f"{name}’s answer"  # noqa: RUF001
        where = "" if system else f" via {platform_name(answer.via)}"
        if sending(view):
            return f"⏳ Sending {whose} — {what} — to {source_name(e)}…"
        wb = view.writeback
        if wb is not None and wb.state is WritebackState.REFUSED:
            lead = "⚠️ Not confirmed by" if wb.gave_up else "❌ Not accepted by"
            return f"{lead} {source_name(e)}: {whose} — {what} — {when}{where}"
        if system:
            return f"⏱️ Decided at timeout — {what} — {when}"
        return f"✅ Answered by {name} — {what} — {when}{where}"
    if view.status is Status.EXPIRED:
        text = "⌛ Expired — nobody answered"
        if e.deadlines.expires_at is not None:
            text += f" by {format_time(e.deadlines.expires_at)}"
        if answer is not None:
            text += f" — outcome: {clip(describe(e, answer), limit)}"
        if sending(view):
            text += f" — sending it to {source_name(e)}…"
        return text
    if view.status is Status.CANCELLED:
        return clip(cancelled_line(view), limit)
    return "Closed."


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
    return " · ".join(parts)

"""What elicitbot says back in a room: threaded notices, rich replies and an
:class:`~bot.domain.actions.Outcome`'s words. Pure. Every notice carries ``m.mentions`` (empty, or
the person it is for), so the legacy body-matching push rules stay off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.matrix.markup.html import clip, esc_lines, neutralise, pill
from bot.domain.actions import Outcome, OutcomeKind
from bot.domain.described import describe_answer
from bot.domain.model import Elicitation
from bot.domain.records import NoticeKind
from bot.domain.rules import format_time

NOTICE_TEXT = 4000
"""Code points of a notice's text."""

ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted. elicitbot does not support encryption, so it cannot "
    "read answers or post questions here. Route elicitbot to an unencrypted room instead."
)
UNREADABLE = (
    "I could not read your answer: it was encrypted with a key my device never received. "
    "Please send it again."
)
REDACTION_REASON = "A secret answer is never taken from a chat message."


@dataclass(frozen=True)
class Said:
    """A notice's words: its text, whether it mentions the person, and its kind."""

    text: str
    mention: bool
    kind: NoticeKind


def said(outcome: Outcome, e: Elicitation, sender: str) -> Said | None:
    """What the thread hears of ``outcome`` (``e``: the elicitation answered); None: nothing
    (chatter after the answer, a message no longer connected, a command, a refusal the person
    was told before on this question)."""
    kind = outcome.kind
    if kind is OutcomeKind.ANSWERED:
        what = f": {describe_answer(e, outcome.answer)}" if outcome.answer is not None else ""
        return Said(f"✅ Recorded{what}. Thank you.", mention=False, kind=NoticeKind.NOTE)
    if kind is OutcomeKind.CLAIMED and outcome.claim is not None:
        text = (
            f"🙋 {sender} is on it until {format_time(outcome.claim.until)}: "
            "escalation and follow-ups wait."
        )
        return Said(text, mention=False, kind=NoticeKind.NOTE)
    if kind is OutcomeKind.REFUSED and outcome.repeated:
        return None  # told once per question: a notice is a room event, never private
    if kind is OutcomeKind.REFUSED:
        text = outcome.refusal.message if outcome.refusal is not None else outcome.message
        return Said(text or "Nothing to claim.", mention=True, kind=NoticeKind.REFUSAL)
    if kind is OutcomeKind.HELP:
        return Said(outcome.message, mention=True, kind=NoticeKind.REFUSAL)
    if kind is OutcomeKind.VOTED:
        return Said(f"🗳️ {outcome.message}", mention=False, kind=NoticeKind.NOTE)
    return None


def notice_content(
    text: str,
    *,
    users: Sequence[str],
    mention: bool,
    thread_root: str | None,
    reply_to: str | None = None,
) -> dict[str, Any]:
    """An ``m.notice`` for ``users`` (MXIDs), named first and pinged only if ``mention``; in the
    thread of ``thread_root`` (replying to ``reply_to``, default the root) when given."""
    text = clip(text.strip(), NOTICE_TEXT)
    if users:
        body = f"{', '.join(users)}: {neutralise(text)}"
        markup = f"{', '.join(pill(u) for u in users)}: {esc_lines(text)}"
    else:
        body, markup = neutralise(text), esc_lines(text)
    content: dict[str, Any] = {
        "msgtype": "m.notice",
        "body": body,
        "format": "org.matrix.custom.html",
        "formatted_body": markup,
        "m.mentions": {"user_ids": list(users)} if users and mention else {},
    }
    if thread_root:
        target = reply_to or thread_root
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": target == thread_root,
            "m.in_reply_to": {"event_id": target},
        }
    return content


def reply_content(text: str, reply_to: str) -> dict[str, Any]:
    """An ``m.notice`` answering a room message (a command) as a rich reply."""
    text = clip(text.strip(), NOTICE_TEXT)
    return {
        "msgtype": "m.notice",
        "body": neutralise(text),
        "format": "org.matrix.custom.html",
        "formatted_body": esc_lines(text),
        "m.mentions": {},
        "m.relates_to": {"m.in_reply_to": {"event_id": reply_to}},
    }


def encrypted_content() -> dict[str, Any]:
    """The one unencrypted notice an end-to-end encrypted room gets."""
    return {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE, "m.mentions": {}}


def notice_edit_content(notice_id: str, new: dict[str, Any]) -> dict[str, Any]:
    """An ``m.replace`` of our notice ``notice_id`` with ``new`` (a :func:`notice_content`); the
    new content carries no relation of its own (it stays in its thread) and pings nobody."""
    replacement = {k: v for k, v in new.items() if k != "m.relates_to"}
    replacement["m.mentions"] = {}
    return {
        "msgtype": "m.notice",
        "body": f"* {new['body']}",
        "format": "org.matrix.custom.html",
        "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": replacement,
        "m.mentions": {},
        "m.relates_to": {"rel_type": "m.replace", "event_id": notice_id},
    }

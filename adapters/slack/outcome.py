"""How a message says what became of its question: the result line, the write-back note and the
note in the thread. Pure: no I/O.

An answer is "Answered" only once the system that asked accepted it
(:func:`bot.domain.views.sending`): until then the result says
``⏳ Sending Alice’s answer — Deny — to SuperPipeline…`` (no buttons, the question is closed
here). When the upstream refused it for good (:func:`bot.domain.views.writeback_note`) the message
says so in a section of its own: above the buttons of a question open again, after the result of
one that failed (closed there too), whose result then reads ``❌ Not accepted by … — …``
(``❔ Not confirmed by …`` when the upstream never answered at all) instead of "Answered".
The thread note said at the moment of the answer claims no acceptance
(``📨 Alice answered — …; sending it to SuperPipeline.``), so it never needs taking back.

Everything an agent or an upstream wrote is escaped for mrkdwn and cut to the budgets below.
"""  # noqa: RUF002 - the typographic apostrophe the message shows

from __future__ import annotations

import re
from dataclasses import replace

from adapters.slack.blocks import Block, clip, escape, section_block
from adapters.slack.form_modal import answer_text
from bot.domain.model import Answer, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from bot.domain.rules import describe_answer, format_time
from bot.domain.views import cancelled_line, sending, source_name, writeback_note

RESULT_TEXT = 1500
NOTE_TEXT = 1200
"""The write-back note (what the upstream said, escaped) is cut to this."""

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_PLATFORMS = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


def who(respondent: str, display_name: str | None) -> str:
    """The person by name; a Slack user id as a mention when no name is known; else the id."""
    if respondent == "system":
        return "the timeout rule"
    name = " ".join((display_name or "").split())
    if name:
        return clip(escape(name), 100)
    platform, _, user = respondent.partition(":")
    if platform == "slack" and _SLACK_USER.match(user):
        return f"<@{user}>"
    return clip(escape(respondent), 100)


def what(view: PromptView, answer: Answer) -> str:
    """What was answered, escaped and cut: a form's answers question by question, else the
    option labels and the quoted text."""
    e = view.elicitation
    text = answer_text(e, answer) or describe_answer(e, answer)
    return clip(escape(text), RESULT_TEXT)


def _via(answer: Answer) -> str:
    return _PLATFORMS.get(answer.via.partition(":")[0], clip(escape(answer.via), 40))


def _failed(view: PromptView) -> bool:
    wb = view.writeback
    return (
        view.status is not Status.PENDING and wb is not None and wb.state is WritebackState.REFUSED
    )


def result_line(view: PromptView) -> str:
    """The outcome as one mrkdwn line: ✅ Answered by … (once accepted upstream), ⏳ Sending …
    (until then), ❌ Not accepted … (refused for good, closed there too), ❔ Not confirmed …
    (every attempt failed), ⌛ Expired …, 🚫 Cancelled …"""
    e = view.elicitation
    answer = view.answer
    upstream = escape(source_name(e))
    if view.status is Status.ANSWERED and answer is not None:
        said = what(view, answer)
        at = format_time(answer.at)
        system = answer.respondent == "system"
        person = who(answer.respondent, answer.display_name)
        if sending(view):
            whose = "the timeout outcome" if system else f"{person}’s answer"  # noqa: RUF001
            return f"⏳ Sending {whose} — {said} — to {upstream}…"
        if _failed(view):
            by = "Decided at timeout" if system else f"{person} answered"
            wb = view.writeback
            if wb is not None and wb.gave_up:  # never confirmed: it may or may not have arrived
                return f"❔ Not confirmed by {upstream} — {by}: {said} — {at}"
            return f"❌ Not accepted by {upstream} — {by}: {said} — {at}"
        if system:
            return f"⏱️ Decided at timeout — {said} — {at}"
        return f"✅ Answered by {person} — {said} — {at} via {_via(answer)}"
    if view.status is Status.EXPIRED:
        when = e.deadlines.expires_at
        text = "⌛ Expired — nobody answered"
        if when is not None:
            text += f" by {format_time(when)}"
        if answer is not None:
            text += f" — outcome: {what(view, answer)}"
        if sending(view):
            text += f" — ⏳ sending it to {upstream}…"
        return text
    if view.status is Status.CANCELLED:
        return clip(escape(cancelled_line(view)), RESULT_TEXT)
    return "Closed."


def note_block(view: PromptView) -> Block | None:
    """The ⚠️ sentence about a write-back the upstream refused, as a section; None otherwise."""
    note = writeback_note(view)
    if note is None:
        return None
    return section_block(clip(escape(note), NOTE_TEXT))


def closed_blocks(view: PromptView) -> list[Block]:
    """What a closed message ends with: the result, then the ⚠️ note when the upstream refused."""
    note = note_block(view)
    return [section_block(result_line(view)), *([note] if note is not None else [])]


def thread_note(view: PromptView, answer: Answer | None = None) -> str:
    """What is said in the thread when someone answers: who and what, and that it is on its way
    (never "Answered": the upstream may still refuse it, and this note is not rewritten).
    ``answer``: the answer just recorded, when ``view`` was read before it."""
    if answer is not None:
        view = just_answered(view, answer)
    answer = view.answer
    if view.status is not Status.ANSWERED or answer is None:
        return result_line(view)
    by = who(answer.respondent, answer.display_name)
    upstream = escape(source_name(view.elicitation))
    return (
        f"📨 {by} answered — {what(view, answer)} — {format_time(answer.at)} via {_via(answer)}; "
        f"sending it to {upstream}."
    )


def just_answered(view: PromptView, answer: Answer) -> PromptView:
    """``view`` (read before the answer) as it stands once ``answer`` is recorded: answered, its
    write-back on its way (the next round), whatever the view read before said about it."""
    previous = view.writeback
    round_ = 1 if previous is None else previous.round + 1
    return replace(
        view,
        status=Status.ANSWERED,
        answer=answer,
        writeback=Writeback(WritebackState.SENDING, round_),
    )

"""What a surface renders: the one builder of :class:`~bot.domain.ports.PromptView`, and what a
copy says about the write-back. The title, the names and the result line are
:mod:`bot.domain.wording`'s."""

from __future__ import annotations

from datetime import datetime

from bot.domain import deadlines
from bot.domain.model import Answer, Status
from bot.domain.ports import PromptView
from bot.domain.records import StoredElicitation, Timeline, WritebackState
from bot.domain.rules import describe_answer
from bot.domain.wording import source_name, title_of

__all__ = ["prompt_view", "sending", "source_name", "title_of", "writeback_note"]


def prompt_view(
    stored: StoredElicitation,
    timeline: Timeline | None,
    *,
    link: str,
    now: datetime,
    escalation: deadlines.Escalation | None = None,
) -> PromptView:
    """The elicitation as it stands now, with what happens if nobody answers (the schedule, from
    its copies and pending deadlines) and who is on it while the claim holds."""
    timeline = timeline or Timeline()
    return PromptView(
        elicitation=stored.elicitation,
        status=stored.status,
        answer=stored.answer,
        version=stored.version,
        link=link,
        now=now,
        schedule=deadlines.schedule(
            stored.elicitation, stored.route, timeline.copies, timeline.timers, now, stored.claim
        ),
        claim=deadlines.active_claim(stored.claim, now),
        escalation=escalation,
        writeback=stored.writeback,
    )


def _whose(answer: Answer | None) -> str:
    if answer is None or answer.respondent == "system":
        return "the"
    name = answer.display_name or answer.respondent.partition(":")[2] or answer.respondent
    return f"{name}’s"  # noqa: RUF001 - typographic apostrophe


def sending(view: PromptView) -> bool:
    """The outcome is recorded here and not yet accepted upstream: a copy says "Sending…"
    (never "Answered") until it is."""
    wb = view.writeback
    return (
        view.status is not Status.PENDING and wb is not None and wb.state is WritebackState.SENDING
    )


def writeback_note(view: PromptView) -> str | None:
    """What a copy says about a write-back the upstream refused: reopened (the question is open
    again: answer it again) or failed (closed there too); None otherwise."""
    wb = view.writeback
    if wb is None or wb.state is not WritebackState.REFUSED:
        return None
    upstream = source_name(view.elicitation)
    person = wb.refused is not None and wb.refused.respondent != "system"
    subject = "answer" if person else "outcome"
    what = "" if wb.refused is None else f" ({describe_answer(view.elicitation, wb.refused)})"
    error = " ".join((wb.error or "no reason given").split())
    if wb.gave_up:
        return (
            f"⚠️ {upstream} could not be reached to deliver the {subject}{what}: {error} "
            "It may not have arrived."
        )
    error = error if error.endswith((".", "!", "?")) else f"{error}."
    if wb.reopened and view.status is Status.PENDING:
        whose = _whose(wb.refused)
        return (
            f"⚠️ {whose[:1].upper()}{whose[1:]} {subject}{what} was not accepted by {upstream}: "
            f"{error} The question is open again: answer it again."
        )
    return f"⚠️ The {subject}{what} was not accepted by {upstream}: {error}"

"""What a surface renders: the one builder of :class:`~bot.domain.ports.PromptView`, and the one
title of an elicitation."""

from __future__ import annotations

from datetime import datetime

from bot.domain import deadlines
from bot.domain.model import Elicitation, Kind
from bot.domain.ports import PromptView
from bot.domain.records import StoredElicitation, Timeline


def title_of(e: Elicitation) -> str:
    """The message's title: the elicitation's own, else its card's or board's, else its kind."""
    c = e.context
    title = e.title or c.card_title or c.board_name
    if title and title.strip():
        return " ".join(title.split())
    return "Approval request" if e.kind is Kind.APPROVAL else "Question"


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
    )

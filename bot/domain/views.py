"""What a surface renders: the one builder of :class:`~bot.domain.ports.PromptView`, and what a
copy says about the write-back. The title, the names and the result line are
:mod:`bot.domain.wording`'s."""

from __future__ import annotations

from datetime import datetime

from bot.domain import deadlines
from bot.domain.model import Status
from bot.domain.ports import CopyPolicy, PromptView
from bot.domain.records import StoredElicitation, Timeline, WritebackState
from bot.domain.votes import live_votes
from bot.domain.wording import source_name, title_of, writeback_sentence

__all__ = ["prompt_view", "sending", "source_name", "title_of", "writeback_note"]


def prompt_view(
    stored: StoredElicitation,
    timeline: Timeline | None,
    *,
    link: str,
    now: datetime,
    escalation: deadlines.Escalation | None = None,
    policy: CopyPolicy | None = None,
) -> PromptView:
    """The elicitation as it stands now, with its schedule (from its copies and pending deadlines)
    and who is on it while the claim holds; ``policy``: where approving counts, who may approve."""
    policy = policy or CopyPolicy()
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
        votes=live_votes(stored),
        approve_on=policy.policy.approve_on,
        approvers=policy.policy.approvers,
        principals=policy.principals,
    )


def sending(view: PromptView) -> bool:
    """The outcome is recorded here and not yet accepted upstream: a copy says "Sending…"
    (never "Answered") until it is."""
    wb = view.writeback
    return (
        view.status is not Status.PENDING and wb is not None and wb.state is WritebackState.SENDING
    )


def writeback_note(view: PromptView) -> str | None:
    """What a copy says about a write-back the upstream refused: reopened (the question is open
    again: answer it again), failed (closed there too) or never confirmed
    (:func:`bot.domain.wording.writeback_sentence`); None otherwise."""
    return writeback_sentence(view.elicitation, view.status, view.writeback)

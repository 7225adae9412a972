"""A route's quorum in the one judgement (answer rule 9): an approving answer from an eligible
person is a vote until ``quorum`` distinct people approved; the last vote is the answer. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.domain.model import Answer, Approval, People, Refusal, RefusalCode, Route
from bot.domain.quorum import Tally, Vote, decided_option, person_of, tally
from bot.domain.records import StoredElicitation
from bot.domain.wording import already_voted
from bot.domain.writes import AuditWrite, WriteSet


@dataclass(frozen=True)
class RecordVote:
    """Store an approving vote: conditional on the elicitation still pending, not expired, and
    unchanged since it was read (``version``: no other vote landed in between)."""

    vote: Vote
    version: int
    audit: Mapping[str, Any]


@dataclass(frozen=True)
class Voted:
    vote: Vote
    tally: Tally
    """The tally with this vote counted."""


def live_votes(stored: StoredElicitation) -> tuple[Vote, ...]:
    """The stored votes that still count: a decision the upstream refused for good reopens the
    question, and the votes given up to it are cleared with it."""
    wb = stored.writeback
    if wb is not None and wb.reopened and wb.refused is not None:
        refused_at = wb.refused.at
        return tuple(v for v in stored.votes if v.at > refused_at)
    return stored.votes


def by_quorum(
    stored: StoredElicitation, answer: Answer, route: Route | None, people: People
) -> Answer | Voted | Refusal:
    """What an answer the rules accepted becomes under ``route``'s quorum."""
    if route is None or route.quorum <= 1:
        return answer
    e = stored.elicitation
    approving = [i for i in answer.option_ids if (o := e.option(i)) is not None and o.approving]
    if not approving:
        return answer
    votes = live_votes(stored)
    before = tally(e, votes, route.quorum)
    me = person_of(answer.respondent, people)
    if before.has_voted(me):
        return Refusal(code=RefusalCode.ALREADY_VOTED, message=already_voted(before))
    vote = Vote(
        person=me,
        respondent=answer.respondent,
        display_name=answer.display_name,
        option_id=approving[0],
        via=answer.via,
        at=answer.at,
        revision=answer.subject_revision,
        digest=answer.subject_digest,
        needed=route.quorum,
    )
    after = tally(e, (*votes, vote), route.quorum)
    if not after.reached:
        return Voted(vote, after)
    option = decided_option(e, after.approvals)
    approvals = tuple(
        Approval(
            by=v.respondent, display_name=v.display_name, at=v.at, via=v.via, option=v.option_id
        )
        for v in after.approvals
    )
    return answer.model_copy(update={"option_ids": (option.id,), "approvals": approvals})


def vote_writes(by: str, audit: Mapping[str, Any]) -> WriteSet:
    """A vote was stored: an audit row, and every copy updated to show the tally."""
    return WriteSet(audits=(AuditWrite("vote", by, None, dict(audit)),), refresh=True)

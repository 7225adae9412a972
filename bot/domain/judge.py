"""One judgement per action: the stored state and what a person did in, what to show them and
what to write out. Pure: no store, no clock (``now`` is passed in), no surface.

:func:`judge` returns a :class:`Judgement`: the :class:`Outcome` the surface shows and the one
write that makes it true, decided by :mod:`bot.domain.rules`; surfaces never judge. A lost write
is judged again on the state the store returned (:func:`after_lost`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from bot.domain import deadlines, rules
from bot.domain.actions import (
    NOT_FOUND_TEXT,
    Choose,
    ClaimIt,
    Command,
    CommandResult,
    Open,
    Outcome,
    OutcomeKind,
    Reply,
    Submit,
    may_command,
    parse_command,
)
from bot.domain.commands import check_web_groups
from bot.domain.deciders import TOLD_BEFORE, is_approver, not_approver
from bot.domain.model import (
    Answer,
    Attempt,
    ElicitationKey,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.records import RecordResult, StoredElicitation
from bot.domain.replies import HelpReply, reply_attempt
from bot.domain.votes import RecordVote, Voted, by_quorum
from bot.domain.wording import voted_message

Judged = Choose | Reply | Submit | ClaimIt | Open
"""The actions judged on an elicitation (a chat command is judged on no elicitation)."""

NOTHING_TO_CLAIM = "This request is no longer waiting for an answer: nothing to claim."
CANNOT_ANSWER = "This question can no longer be answered."


@dataclass(frozen=True)
class RecordAnswer:
    """Record the answer: conditional on the elicitation still pending, not expired (nor, for
    an approving option, its subject) and at ``version``. A secret's text goes upstream first."""

    answer: Answer
    approving: bool
    version: int
    """The elicitation's version the judgement read: anything written since makes it lose."""
    audit: Mapping[str, Any]
    secret: str | None = None
    """The secret to pass upstream before recording (never stored)."""


@dataclass(frozen=True)
class RecordClaim:
    """Record "I'm on it": conditional on the elicitation still pending."""

    by: str
    name: str | None
    until: datetime


@dataclass(frozen=True)
class RecordRefusal:
    """An audit row for a refused attempt; nothing about the elicitation changes."""

    actor: str
    code: RefusalCode
    detail: Mapping[str, Any]
    once: bool = False
    """Told once per question and actor (:attr:`Refusal.once`): the store says whether it was
    told before, and a repeat is :func:`told_before`."""


Write = RecordAnswer | RecordClaim | RecordRefusal | RecordVote


@dataclass(frozen=True)
class Judgement:
    outcome: Outcome
    """What the surface shows the person."""
    write: Write | None = None
    """What makes it true (None: nothing to write)."""


def judge(
    stored: StoredElicitation | None,
    action: Judged,
    people: People,
    now: datetime,
    *,
    claim_minutes: float = deadlines.DEFAULT_CLAIM_MINUTES,
    route: Route | None = None,
) -> Judgement:
    """The one judgement of ``action`` on the elicitation as stored (None: unknown); ``route``:
    the one the elicitation takes, whose policy says who may decide (rule 9)."""
    if stored is None:
        return Judgement(not_found(action.key))
    if isinstance(action, ClaimIt):
        return _claim(stored, action, people, now, claim_minutes, route)
    if isinstance(action, Open):
        if stored.status is Status.PENDING:
            return Judgement(Outcome(OutcomeKind.FORM, action.key))
        attempt = Attempt(respondent=action.who, via=action.via, standing=action.standing)
        return judge_attempt(stored, attempt, people, now, route=route)
    if isinstance(action, Reply):
        return _reply(stored, action, people, now, route)
    seen: dict[str, Any] = {
        "respondent": action.who,
        "option_ids": action.option_ids,
        "via": action.via,
        "revision": action.revision,
        "digest": action.digest,
        "shown": action.shown,
        "standing": action.standing,
    }
    if isinstance(action, Submit):
        attempt = Attempt(**seen, text=action.text, secret=action.secret, fields=action.fields)
    else:
        attempt = Attempt(**seen)
        if action.form and stored.status is Status.PENDING:
            option = _needs_comment(stored, attempt, people, now, route)
            if option is not None:
                return Judgement(Outcome(OutcomeKind.FORM, action.key, option_id=option))
    return judge_attempt(stored, attempt, people, now, route=route)


def not_found(key: ElicitationKey) -> Outcome:
    return Outcome(OutcomeKind.NOT_FOUND, key, NOT_FOUND_TEXT)


def judge_command(command: Command, people: People, *, web_groups: bool = True) -> CommandResult:
    """A chat command read and checked against who may run it: final when help, unreadable or
    ``refused``, else the verb the shell carries out. ``web_groups``: ``web-group:`` can be met."""
    parsed = parse_command(command.text)
    if parsed.problem is not None or parsed.verb == "help":
        return parsed
    if not may_command(command.who, people, elevated=command.elevated):
        return CommandResult(parsed.verb, parsed.workspace, parsed.board, refused=True)
    if parsed.policy is not None and command.who.key not in people.admins:
        # A room moderator routes their room; who may decide is the workspace admins' to say.
        return CommandResult(
            parsed.verb, parsed.workspace, parsed.board, refused=True, admin_only=True
        )
    try:
        check_web_groups(parsed.policy, web_groups=web_groups)
    except ValueError as e:
        return CommandResult(parsed.verb, problem=str(e))
    return parsed


def judge_attempt(
    stored: StoredElicitation,
    attempt: Attempt,
    people: People,
    now: datetime,
    *,
    route: Route | None = None,
) -> Judgement:
    """An answer attempt by the answer rules (:func:`bot.domain.rules.decide`, rule 9 for
    ``route``): an answer to record (it wins if the write does) or a refusal to tell and audit."""
    e = stored.elicitation
    state = rules.AnswerState(stored.status, stored.answer)
    result = rules.decide(e, state, attempt, people, now, route=route).result
    key = e.key
    if isinstance(result, Refusal):
        return refused(stored, attempt, result, people)
    decided = by_quorum(stored, result, route, people)
    if isinstance(decided, Refusal):
        return refused(stored, attempt, decided, people)
    if isinstance(decided, Voted):
        outcome = Outcome(OutcomeKind.VOTED, key, voted_message(decided.tally))
        return Judgement(outcome, RecordVote(decided.vote, stored.version, attempt_audit(attempt)))
    result = decided
    approving = any((o := e.option(i)) is not None and o.approving for i in result.option_ids)
    secret = attempt.text if result.secret else None
    audit = attempt_audit(attempt)
    if result.approvals:  # a quorum decided: the audit row names every approver
        audit["approvals"] = [a.model_dump(mode="json") for a in result.approvals]
    write = RecordAnswer(result, approving, stored.version, audit, secret)
    return Judgement(Outcome(OutcomeKind.ANSWERED, key, answer=result), write)


def refused(
    stored: StoredElicitation, attempt: Attempt, refusal: Refusal, people: People
) -> Judgement:
    """A refused attempt: the refusal told privately, one audit row."""
    e, who = stored.elicitation, attempt.respondent
    identity = rules.who_may_decide(e, who, people) is not None
    audit = attempt_audit(attempt)
    return _refusal(e.key, who.key, refusal, audit, once=refusal.once, identity_refused=identity)


def _refusal(
    key: ElicitationKey | None,
    actor: str,
    refusal: Refusal,
    detail: Mapping[str, Any],
    *,
    once: bool,
    identity_refused: bool = False,
) -> Judgement:
    """``refusal`` told privately, and its audit row: ``detail`` with the message."""
    outcome = Outcome(
        OutcomeKind.REFUSED,
        key,
        refusal.message,
        refusal=refusal,
        identity_refused=identity_refused,
    )
    detail = {**detail, "message": refusal.message}
    return Judgement(outcome, RecordRefusal(actor, refusal.code, detail, once))


def told_before(judgement: Judgement) -> Judgement:
    """A ``once`` refusal the store says this person was already told: marked ``repeated``,
    saying only :data:`~bot.domain.deciders.TOLD_BEFORE`; the audit row is still written."""
    write, outcome = judgement.write, judgement.outcome
    if not isinstance(write, RecordRefusal) or not write.once or outcome.refusal is None:
        return judgement
    refusal = Refusal(code=outcome.refusal.code, message=TOLD_BEFORE, once=True)
    repeated = replace(outcome, message=TOLD_BEFORE, refusal=refusal, repeated=True)
    return Judgement(repeated, write)


def after_lost(stored: StoredElicitation, lost: RecordResult) -> StoredElicitation:
    """The state a lost answer write reported (someone else answered, it closed; still pending:
    something changed since the read, which the shell reads again), to judge the attempt on."""
    return replace(stored, status=lost.status, answer=lost.answer)


def refuse_write(judgement: Judgement, refusal: Refusal) -> Judgement:
    """A judgement whose answer or claim cannot be written after all, refused instead: a secret
    with nowhere upstream to go, or a write that kept losing while the state read said it would
    win (the store's clock and ours disagree on an expiry)."""
    write, key = judgement.write, judgement.outcome.key
    if isinstance(write, RecordAnswer):
        return _refusal(key, write.answer.respondent, refusal, write.audit, once=False)
    if isinstance(write, RecordClaim):
        return _refusal(key, write.by, refusal, {"claim": True}, once=False)
    return judgement


def lost_for_good(judgement: Judgement) -> Judgement:
    """:func:`refuse_write` for a write that kept losing: closed."""
    claim = isinstance(judgement.write, RecordClaim)
    message = NOTHING_TO_CLAIM if claim else CANNOT_ANSWER
    return refuse_write(judgement, Refusal(code=RefusalCode.CLOSED, message=message))


def attempt_audit(attempt: Attempt) -> dict[str, Any]:
    """What the audit log keeps of an attempt: never a secret's text."""
    return {
        "via": attempt.via,
        "options": list(attempt.option_ids),
        "text_length": len(attempt.text) if attempt.text is not None else None,
        "secret": attempt.secret,
    }


def _needs_comment(
    stored: StoredElicitation, attempt: Attempt, people: People, now: datetime, route: Route | None
) -> str | None:
    """The one option picked, when it needs a comment and this person may pick it here: the form
    opens for it. Otherwise the choice is judged as it is (and refused)."""
    if len(attempt.option_ids) != 1:
        return None
    e = stored.elicitation
    option = e.option(attempt.option_ids[0])
    if option is None or not option.requires_text:
        return None
    pick = rules.Pick(option, now, attempt.shown, attempt.revision, attempt.via, attempt.digest)
    who = attempt.respondent
    if rules.who_may_decide(e, who, people, pick, route=route, standing=attempt.standing):
        return None
    return option.id


def _reply(
    stored: StoredElicitation, action: Reply, people: People, now: datetime, route: Route | None
) -> Judgement:
    """A thread reply: what it means, then judged as an attempt. Talk after the answer is ignored,
    and so is a reply naming nothing while the question waits: one who may answer is told how."""
    e = stored.elicitation
    parsed = reply_attempt(e, action.text, action.who, action.via)
    pending = stored.status is Status.PENDING
    if isinstance(parsed, HelpReply):
        if not pending:
            return Judgement(Outcome(OutcomeKind.IGNORED, action.key))
        standing = action.standing
        if rules.who_may_decide(e, action.who, people, route=route, standing=standing) is None:
            return Judgement(Outcome(OutcomeKind.HELP, action.key, parsed.message))
        attempt = Attempt(respondent=action.who, via=action.via, standing=standing)
    elif parsed.text is not None and not pending:
        return Judgement(Outcome(OutcomeKind.IGNORED, action.key))
    else:
        seen = {"shown": action.shown, "revision": action.revision, "digest": action.digest}
        attempt = parsed.model_copy(update={**seen, "standing": action.standing})
    return judge_attempt(stored, attempt, people, now, route=route)


def _claim(
    stored: StoredElicitation,
    action: ClaimIt,
    people: People,
    now: datetime,
    minutes: float,
    route: Route | None,
) -> Judgement:
    """Someone is on it: anyone who may answer (an approver, when the route names them), while
    it waits for an answer."""
    who = action.who
    refusal: Refusal | None
    if stored.status is not Status.PENDING:
        code = (
            RefusalCode.ALREADY_ANSWERED if stored.status is Status.ANSWERED else RefusalCode.CLOSED
        )
        refusal = Refusal(code=code, message=NOTHING_TO_CLAIM)
    else:
        e, standing = stored.elicitation, action.standing
        refusal = rules.who_may_decide(e, who, people, route=route, standing=standing)
        # Only an approver claims: rejecting by anyone does not pause the escalation.
        if refusal is None and route is not None and not is_approver(route, who, standing, people):
            refusal = not_approver(route, standing)
    if refusal is not None:
        return _refusal(action.key, who.key, refusal, {"claim": True}, once=refusal.once)
    until = deadlines.claim_until(now, minutes)
    claim = deadlines.Claim(who.key, until, who.display_name)
    return Judgement(
        Outcome(OutcomeKind.CLAIMED, action.key, claim=claim),
        RecordClaim(who.key, who.display_name, until),
    )

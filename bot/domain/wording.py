"""What every copy says in words of its own (not the agent's), said once: its title, who answered
and where, the system that asked, and the result line of a closed copy.

Pure, no markup: a surface reads a view's :class:`Result` (:func:`result_of`), writes it with
:func:`result_sentence` and adds only its markup. The sentences live in :data:`RESULT_LINES`,
:data:`PARTS`, :data:`NOTES` and :data:`QUORUM_LINES` and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from bot.domain.deciders import readable
from bot.domain.described import SURFACE_NAMES, clip, describe_answer
from bot.domain.model import Answer, Elicitation, Kind, Status
from bot.domain.policy import ApproverKind, parse_approver
from bot.domain.quorum import Tally, Vote, tally
from bot.domain.records import Writeback, WritebackState
from bot.domain.rules import format_time

# --------------------------------------------------------------------------- names

PLATFORMS = {**SURFACE_NAMES, "system": "elicitbot"}
"""Where an answer was given, as people call it (by the platform of its ``via``)."""

SOURCE_NAMES = {
    "superpipeline": "SuperPipeline",
    "handup": "handup",
    "toolshed": "Toolshed",
    "engine": "the engine",
    "pinework": "Pinework",
}

TIMEOUT_RULE = "the timeout rule"
"""Who decides when nobody answered in time (the ``system`` respondent)."""
SYSTEM = "system"

NAME_LIMIT = 150
"""A title quoted in a notice is cut to this many code points."""
_DIGEST_HEX = 8
"""Hex digits of a digest shown to a person: enough to tell two apart."""


def cut(text: str, limit: int) -> str:
    """At most ``limit`` code points, ``…`` marking a cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def one_line(text: str) -> str:
    return " ".join(text.split())


def sentence(text: str) -> str:
    """``text`` ending as a sentence does."""
    return text if text.endswith((".", "!", "?")) else f"{text}."


def source_name(e: Elicitation) -> str:
    """The system that asked, as people call it."""
    return SOURCE_NAMES.get(e.source, e.source)


def platform_name(via: str) -> str:
    """``slack:C0APPROVALS`` -> ``Slack``; an unknown platform by its own name."""
    platform = via.partition(":")[0]
    return PLATFORMS.get(platform, platform)


def who(respondent: str, display_name: str | None) -> str:
    """How a respondent is named: by display name, else a Matrix person by Matrix ID and anyone
    else by identity key; the timeout rule as such."""
    if respondent == SYSTEM:
        return TIMEOUT_RULE
    name = one_line(display_name or "")
    if name:
        return name
    platform, _, user = respondent.partition(":")
    return user if platform == "matrix" and user else respondent


def shorten_digest(digest: str) -> str:
    """``sha256:4f2a0c1e9b8d…`` -> ``sha256:4f2a0c1e…``."""
    algorithm, sep, value = digest.partition(":")
    if sep and len(value) > _DIGEST_HEX:
        return f"{algorithm}:{value[:_DIGEST_HEX]}…"
    return cut(digest, 20)


def title_of(e: Elicitation) -> str:
    """The message's title: the elicitation's own, else its card's or board's, else its kind
    (the question itself follows the title on every surface, so it is never the title)."""
    c = e.context
    title = e.title or c.card_title or c.board_name
    if title and title.strip():
        return one_line(title)
    return "Approval request" if e.kind is Kind.APPROVAL else "Question"


def named(e: Elicitation) -> str:
    """How a notice standing on its own (a reminder) names the request: its own title, else its
    question, else its key, cut to :data:`NAME_LIMIT`. Not :func:`title_of`: many questions
    share a card, so a notice names what is asked."""
    return cut(one_line(e.title) or one_line(e.question) or e.key, NAME_LIMIT)


# --------------------------------------------------------------------------- the result


class ResultState(StrEnum):
    """What became of a question, as a closed copy says it."""

    SENDING = "sending"
    """Answered here; the system that asked has not accepted it yet."""
    ANSWERED = "answered"
    """Answered, and accepted by the system that asked."""
    DECIDED = "decided"
    """The timeout rule's decision, accepted."""
    NOT_ACCEPTED = "not_accepted"
    """The system that asked refused the answer for good (and closed the question there)."""
    NOT_CONFIRMED = "not_confirmed"
    """Every attempt to deliver the answer failed: it may or may not have arrived."""
    EXPIRED = "expired"
    """Nobody answered in time (with the timeout rule's outcome, if it records one)."""
    CANCELLED = "cancelled"
    """Withdrawn by the system that asked."""
    CLOSED_UPSTREAM = "closed_upstream"
    """Closed by the system that asked, which said why."""
    CLOSED = "closed"


@dataclass(frozen=True)
class Result:
    """The result of a closed elicitation as every surface says it: the state and its values,
    all plain text (a surface escapes them for its markup)."""

    state: ResultState
    upstream: str
    """The system that asked (:func:`source_name`)."""
    who: str = ""
    """Who answered (:func:`who`); empty when nobody did."""
    respondent: str | None = None
    """Their identity key, for a surface that mentions a person it has no name for."""
    has_name: bool = False
    """``who`` is the person's display name."""
    system: bool = False
    """The timeout rule decided."""
    what: str = ""
    """What was answered (:func:`bot.domain.described.describe_answer`); empty when nothing was."""
    at: datetime | None = None
    """When it was answered, or when it expired."""
    via: str = ""
    """Where it was answered (:func:`platform_name`); empty for the timeout rule."""
    reason: str = ""
    """Why the system that asked closed it (``CLOSED_UPSTREAM``)."""
    sending: bool = False
    """``EXPIRED``: its outcome is still on its way to the system that asked."""


def result_of(
    e: Elicitation, status: Status, answer: Answer | None, writeback: Writeback | None
) -> Result | None:
    """What became of ``e``; None while it waits for an answer."""
    upstream = source_name(e)
    on_its_way = writeback is not None and writeback.state is WritebackState.SENDING
    if status is Status.PENDING:
        return None
    if status is Status.CANCELLED:
        reason = ""
        if answer is not None and answer.respondent == SYSTEM and answer.text:
            reason = one_line(answer.text)
        if reason:
            return Result(ResultState.CLOSED_UPSTREAM, upstream, reason=reason)
        return Result(ResultState.CANCELLED, upstream)
    if status is Status.EXPIRED:
        what = "" if answer is None else describe_answer(e, answer)
        at = e.deadlines.expires_at
        return Result(ResultState.EXPIRED, upstream, what=what, at=at, sending=on_its_way)
    if answer is None:
        return Result(ResultState.CLOSED, upstream)
    system = answer.respondent == SYSTEM
    if on_its_way:
        state = ResultState.SENDING
    elif writeback is not None and writeback.state is WritebackState.REFUSED:
        state = ResultState.NOT_CONFIRMED if writeback.gave_up else ResultState.NOT_ACCEPTED
    else:
        state = ResultState.DECIDED if system else ResultState.ANSWERED
    return Result(
        state,
        upstream,
        who=who(answer.respondent, answer.display_name),
        respondent=answer.respondent,
        has_name=bool(one_line(answer.display_name or "")),
        system=system,
        what=describe_answer(e, answer),
        at=answer.at,
        via="" if system else platform_name(answer.via),
    )


RESULT_LINES: Mapping[ResultState, str] = {
    ResultState.SENDING: "⏳ Sending {whose} — {what} — to {upstream}…",
    ResultState.ANSWERED: "✅ Answered by {who} — {what} — {when}{via}",
    ResultState.DECIDED: "⏱️ Decided at timeout — {what} — {when}",
    ResultState.NOT_ACCEPTED: "❌ Not accepted by {upstream}: {whose} — {what} — {when}{via}",
    ResultState.NOT_CONFIRMED: "❔ Not confirmed by {upstream}: {whose} — {what} — {when}{via}",
    ResultState.EXPIRED: "⌛ Expired — nobody answered{by}{outcome}{on_its_way}",
    ResultState.CANCELLED: (
        "🚫 Cancelled — this request was withdrawn; it can no longer be answered."
    ),
    ResultState.CLOSED_UPSTREAM: (
        "🚫 Closed by the system — {reason} — it can no longer be answered."
    ),
    ResultState.CLOSED: "Closed.",
}
"""The result line of each state; ``{…}`` are the values (escaped by the surface) or the
:data:`PARTS` built from them."""

PARTS: Mapping[str, str] = {
    "whose": "{who}’s answer",  # noqa: RUF001 - typographic apostrophe
    "whose_timeout": "the timeout outcome",
    "via": " via {via}",
    "by": " by {when}",
    "outcome": " — outcome: {what}",
    "on_its_way": " — sending it to {upstream}…",
    "answered_note": "📨 {who} answered — {what} — {when}{via}; sending it to {upstream}.",
}
"""The pieces a line is built of, and the note said in a chat's thread when someone answers
(it claims no acceptance: the upstream may still refuse the answer, and the note is not rewritten).
"""

SHORT: Mapping[ResultState, str] = {
    ResultState.SENDING: "⏳ sending to {upstream}…",
    ResultState.NOT_ACCEPTED: "❌ not accepted by {upstream}",
    ResultState.NOT_CONFIRMED: "❔ not confirmed by {upstream}",
}
"""Where the outcome stands upstream, in a list that already shows who, what and when."""

Fill = Callable[[str, str], str]
"""``(name, value) -> text``: how a surface writes one value into its markup."""


def _plain(_name: str, value: str) -> str:
    return value


def _values(result: Result, fill: Fill) -> dict[str, str]:
    when = "" if result.at is None else format_time(result.at)
    raw = {
        "who": result.who,
        "what": result.what,
        "when": when,
        "upstream": result.upstream,
        "reason": result.reason,
    }
    values = {name: fill(name, value) for name, value in raw.items()}
    values["via"] = PARTS["via"].format(via=fill("via", result.via)) if result.via else ""
    whose = PARTS["whose_timeout"] if result.system else PARTS["whose"]
    values["whose"] = whose.format(**values)
    values["by"] = PARTS["by"].format(**values) if when else ""
    values["outcome"] = PARTS["outcome"].format(**values) if result.what else ""
    values["on_its_way"] = PARTS["on_its_way"].format(**values) if result.sending else ""
    return values


def result_sentence(result: Result, fill: Fill = _plain) -> str:
    """The result line of ``result``: ``✅ Answered by Alice — Deny — 2026-11-10 09:31 UTC via
    Slack``. ``fill`` writes each value (who, what, when, via, upstream, reason) the surface's
    way."""
    return RESULT_LINES[result.state].format(**_values(result, fill))


def short_sentence(result: Result, fill: Fill = _plain) -> str:
    """Where the outcome stands upstream in a few words (``⏳ sending to handup…``); empty once
    it was accepted."""
    state = ResultState.SENDING if result.sending else result.state
    words = SHORT.get(state)
    return "" if words is None else words.format(**_values(result, fill))


def answered_note(result: Result, fill: Fill = _plain) -> str:
    """The note said in a chat's thread when someone answers (never "Answered")."""
    return PARTS["answered_note"].format(**_values(result, fill))


# --------------------------------------------------------------------------- the write-back note

NOTES: Mapping[str, str] = {
    "gave_up": (
        "⚠️ {upstream} could not be reached to deliver the {subject}{what}: {error} "
        "It may not have arrived."
    ),
    "reopened": (
        "⚠️ {whose}{what} was not accepted by {upstream}: {error} "
        "The question is open again: answer it again."
    ),
    "failed": "⚠️ The {subject}{what} was not accepted by {upstream}: {error}",
}
"""What a copy says, under its result or above its buttons, about an outcome the system that
asked refused: never confirmed, refused on a question open again, refused on one closed there."""


def writeback_sentence(e: Elicitation, status: Status, writeback: Writeback | None) -> str | None:
    """The note of a refused write-back (:data:`NOTES`); None unless it was refused."""
    wb = writeback
    if wb is None or wb.state is not WritebackState.REFUSED:
        return None
    refused = wb.refused
    person = refused is not None and refused.respondent != SYSTEM
    error = one_line(wb.error or "no reason given")
    values = {
        "upstream": source_name(e),
        "subject": "answer" if person else "outcome",
        "what": "" if refused is None else f" ({describe_answer(e, refused)})",
        "error": error,
    }
    if wb.gave_up:
        return NOTES["gave_up"].format(**values)
    values["error"] = sentence(error)
    if wb.reopened and status is Status.PENDING:
        whose = "The outcome"
        if person and refused is not None:
            whose = PARTS["whose"].format(who=who(refused.respondent, refused.display_name))
        return NOTES["reopened"].format(whose=whose, **values)
    return NOTES["failed"].format(**values)


# --------------------------------------------------------------------------- a quorum (rule 9)


QUORUM_LINES = {
    "waiting": "Approved by {names} ({count} of {needed}) — waiting for {more}",
    "who": "{line}: {who}",
    "voted": "Your approval is recorded ({count} of {needed}); waiting for {more}.",
    "already": "You already approved this; waiting for {missing} more approver(s).",
    "cleared": "The request changed after {names} approved, so those approvals no longer count"
    " — waiting for {more}",
    "one_more": "one more approver",
    "more": "{missing} more approvers",
}
"""What the copies, the voter and a second vote by the same person are told (answer rule 9)."""


def _names(votes: tuple[Vote, ...]) -> str:
    names = [v.display_name or v.respondent for v in votes]
    return clip(names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1])


def _more(missing: int) -> str:
    return (
        QUORUM_LINES["one_more"] if missing == 1 else QUORUM_LINES["more"].format(missing=missing)
    )


def still_approve(
    approvers: Sequence[str], votes: Sequence[Vote], principals: Mapping[str, str]
) -> tuple[str, ...]:
    """The route's approver entries who may still approve: a person entry is left out once
    that identity, or another identity of its principal (``principals``: the entries' own, from
    ``[people.principals]``), voted; groups, power levels and ``admins`` stay."""
    voted = {v.respondent for v in votes} | {v.person for v in votes}

    def left(entry: str) -> bool:
        if parse_approver(entry).kind is not ApproverKind.PERSON:
            return False
        return entry in voted or principals.get(entry, entry) in voted

    return tuple(a for a in approvers if not left(a))


def waiting_line(
    e: Elicitation,
    votes: Sequence[Vote],
    approvers: Sequence[str] | None = None,
    principals: Mapping[str, str] | None = None,
) -> str | None:
    """What a pending question's copies say while a quorum is counted: ``Approved by Alice (1 of 2)
    — waiting for one more approver: Bob, @deploy-team`` (readable ids, never a mention), or that a
    new revision or digest cleared the votes; None before any vote."""
    counted = tally(e, votes, votes[-1].needed if votes else 1)
    if not counted.approvals and votes:  # a new revision or digest cleared every vote: say so
        cleared = tally(e.model_copy(update={"subject": None}), votes, counted.needed)
        if cleared.approvals and not cleared.reached:
            names, more = _names(cleared.approvals), _more(counted.needed)
            return QUORUM_LINES["cleared"].format(names=names, more=more)
    if not counted.approvals or counted.reached:
        return None
    line = QUORUM_LINES["waiting"].format(
        names=_names(counted.approvals),
        count=counted.count,
        needed=counted.needed,
        more=_more(counted.missing),
    )
    still = still_approve(approvers or (), counted.approvals, principals or {})
    if not still:  # no approvers on the route (anyone may approve): the line as before
        return line
    return QUORUM_LINES["who"].format(line=line, who=clip(readable(still)))


def voted_message(counted: Tally) -> str:
    """What the person who voted is told."""
    return QUORUM_LINES["voted"].format(
        count=counted.count, needed=counted.needed, more=_more(counted.missing)
    )


def already_voted(counted: Tally) -> str:
    """What a second vote by the same person is told."""
    return QUORUM_LINES["already"].format(missing=counted.missing)

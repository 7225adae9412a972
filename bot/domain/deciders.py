"""Answer rule 9 for one route: may this person decide, and does an approving choice count on
this surface. Asked by :func:`bot.domain.rules.who_may_decide` after rules 1-3. A refusal names
who may decide and is told once per question and person; after that only :data:`TOLD_BEFORE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bot.domain.described import SURFACE_NAMES
from bot.domain.model import Elicitation, Identity, Option, People, Refusal, RefusalCode, Route
from bot.domain.policy import NO_STANDING, ApproverKind, Standing, parse_approver
from bot.domain.quorum import approvers_of, eligible


def _readable(entry: str, names: Mapping[str, str]) -> str:
    """One entry by name: the surface's name for it, a web user's name, a power level or the
    admins in words; else as written."""
    if entry == "admins":
        return "the workspace admins"
    if (a := parse_approver(entry)).kind is ApproverKind.MATRIX_POWER:
        return f"members with power level {a.value} or more in the Matrix room they answer in"
    if named := (names.get(entry) or "").strip():
        return named
    if a.kind is ApproverKind.PERSON and entry.startswith("web:"):
        return entry.removeprefix("web:")
    return entry


def readable(entries: Sequence[str], names: Mapping[str, str] | None = None) -> str:
    """Approver entries for people, by name where ``names`` knows it (a
    :attr:`~bot.domain.policy.Standing.names`): ``Bob, @deploy-team, the workspace admins``."""
    return ", ".join(_readable(e, names or {}) for e in entries)


POWER_UNKNOWN = (
    " I could not read your power level in this room just now: reply in this thread with your "
    "choice to try again."
)
"""Added to the refusal of a Matrix person whose power level could not be read (fail closed)."""


def is_approver(route: Route, who: Identity, standing: Standing, people: People) -> bool:
    return eligible(approvers_of(route.approvers), who, standing, people)


def _power_unknown(route: Route, who: Identity, standing: Standing) -> bool:
    """The route names a power level and the surface could not read this Matrix person's."""
    return (
        who.platform == "matrix"
        and standing.power is None
        and any(a.kind is ApproverKind.MATRIX_POWER for a in approvers_of(route.approvers) or ())
    )


def not_approver(
    route: Route, standing: Standing = NO_STANDING, *, power_unknown: bool = False
) -> Refusal:
    """Who may decide, by name; and which group or power-level lookup failed (counting as not
    in it). Told ``once`` per question and person, unless a lookup failed: that asks them to
    try again, so it is told every time."""
    entries = route.approvers or ()
    names = standing.names
    message = f"Only the approvers of this route can decide: {readable(entries, names)}."
    unread = [e for e in entries if e in standing.unknown]
    if unread:
        message += (
            f" Whether you are in {' or '.join(_readable(e, names) for e in unread)} could not "
            "be checked just now, so it did not count: try again in a minute (if it keeps "
            "failing, tell an elicitbot admin)."
        )
    if power_unknown:
        message += POWER_UNKNOWN
    once = not unread and not power_unknown
    return Refusal(code=RefusalCode.NOT_APPROVER, message=message, once=once)


TOLD_BEFORE = (
    "Not counted: you are not one of this route's approvers (you were told who may decide at "
    "your first try on this request)."
)
"""A later refusal as no approver, where the surface must say something (a Slack click, the web
inbox); Matrix says nothing more."""


def may_take_part(
    e: Elicitation, route: Route, who: Identity, standing: Standing, people: People
) -> Refusal | None:
    """Before knowing what they chose: an approver, or (``anyone_may_reject``) anyone while the
    question has a rejecting option to choose."""
    if is_approver(route, who, standing, people):
        return None
    if route.anyone_may_reject and any(o.rejecting for o in e.options):
        return None
    return not_approver(route, standing, power_unknown=_power_unknown(route, who, standing))


def may_choose(
    route: Route,
    who: Identity,
    standing: Standing,
    people: People,
    chosen: Sequence[Option],
) -> Refusal | None:
    """What they chose: an approver may choose anything; anyone else (``anyone_may_reject``)
    only rejecting options, and never a text or form alone."""
    if is_approver(route, who, standing, people):
        return None
    if route.anyone_may_reject and chosen and all(o.rejecting for o in chosen):
        return None
    return not_approver(route, standing, power_unknown=_power_unknown(route, who, standing))


def counts_only_in(surfaces: Sequence[str]) -> str:
    """``Approving this request counts only in the web inbox``: said instead of an approving
    option elsewhere, and when refusing one chosen there."""
    where = " or ".join(SURFACE_NAMES.get(s, s) for s in surfaces)
    return f"Approving this request counts only in {where}"


def approve_elsewhere(approve_on: Sequence[str] | None, surface: str | None) -> str | None:
    """Why approving options are not offered on ``surface`` (``approve_on`` does not name it),
    as one sentence; None where they count (no ``approve_on``, or an unknown surface: the
    judgement, :func:`approve_here`, still refuses one chosen there)."""
    if approve_on is None or surface is None or surface in approve_on:
        return None
    return f"{counts_only_in(approve_on)}."


def approve_here(route: Route, option: Option, via: str | None) -> Refusal | None:
    """``approve_on``: an approving option counts only on the surfaces it names (``via`` None:
    the surface is unknown, so it does not count)."""
    surfaces = route.approve_on
    if surfaces is None or not option.approving:
        return None
    if via is not None and via.split(":", 1)[0] in surfaces:
        return None
    return Refusal(
        code=RefusalCode.APPROVE_ELSEWHERE,
        message=f"{counts_only_in(surfaces)}: “{option.label}” is not taken here.",
    )


APPROVE_IN_WEB = "Approve in the web inbox"
"""Where a chat copy's approving option was when only the web inbox counts it (a Slack link
button's label, a Matrix line's start)."""


def links_to_web(approve_on: Sequence[str] | None) -> bool:
    """Approving counts in the web inbox and not on every surface: copies elsewhere link there."""
    return approve_on is not None and "web" in approve_on


def linked_refusal(refusal: Refusal, route: Route, link: str) -> Refusal:
    """An :func:`approve_here` refusal with the inbox page when the web inbox is where approving
    counts (``… Approve in the web inbox: <link>``); any other refusal unchanged."""
    if (
        refusal.code is not RefusalCode.APPROVE_ELSEWHERE
        or not links_to_web(route.approve_on)
        or not link
    ):
        return refusal
    return Refusal(code=refusal.code, message=f"{refusal.message} {APPROVE_IN_WEB}: {link}")

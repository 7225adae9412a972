"""Answer rule 9 for one route: may this person decide, and does an approving choice count
on this surface. Pure: :func:`bot.domain.rules.who_may_decide` asks it after rules 1-3.

- With ``approvers``, only an eligible person (:func:`bot.domain.quorum.eligible`) decides:
  others are refused and told who may, except that ``anyone_may_reject`` lets anyone choose a
  rejecting option.
- With ``approve_on``, an approving option counts only on the surfaces it names.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.domain.model import Elicitation, Identity, Option, People, Refusal, RefusalCode, Route
from bot.domain.policy import NO_STANDING, Standing
from bot.domain.quorum import approvers_of, eligible

SURFACE_NAMES = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


def surface_of(via: str) -> str:
    """The surface a destination or ``via`` belongs to: ``slack``, ``matrix`` or ``web``."""
    return via.split(":", 1)[0]


def readable(entries: Sequence[str]) -> str:
    """Approver entries for people: ``slack:U0BOB, the workspace admins``."""
    return ", ".join("the workspace admins" if e == "admins" else e for e in entries)


def is_approver(route: Route, who: Identity, standing: Standing, people: People) -> bool:
    return eligible(approvers_of(route.approvers), who, standing, people)


def not_approver(route: Route, standing: Standing = NO_STANDING) -> Refusal:
    """Who may decide, by name; and, when the surface could not read whether the person is in one
    of the route's approver groups (a failed lookup, which counts as not in it), that too."""
    entries = route.approvers or ()
    message = f"Only the approvers of this route can decide: {readable(entries)}."
    unread = [e for e in entries if e in standing.unknown]
    if unread:
        message += (
            f" Whether you are in {' or '.join(unread)} could not be checked just now, so it did "
            "not count: try again in a minute (if it keeps failing, tell an elicitbot admin)."
        )
    return Refusal(code=RefusalCode.NOT_APPROVER, message=message)


def may_take_part(
    e: Elicitation, route: Route, who: Identity, standing: Standing, people: People
) -> Refusal | None:
    """Before knowing what they chose: an approver, or (``anyone_may_reject``) anyone while the
    question has a rejecting option to choose."""
    if is_approver(route, who, standing, people):
        return None
    if route.anyone_may_reject and any(o.rejecting for o in e.options):
        return None
    return not_approver(route, standing)


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
    return not_approver(route, standing)


def approve_here(route: Route, option: Option, via: str | None) -> Refusal | None:
    """``approve_on``: an approving option counts only on the surfaces it names (``via`` None:
    the surface is unknown, so it does not count)."""
    surfaces = route.approve_on
    if surfaces is None or not option.approving:
        return None
    if via is not None and surface_of(via) in surfaces:
        return None
    where = " or ".join(SURFACE_NAMES.get(s, s) for s in surfaces)
    return Refusal(
        code=RefusalCode.APPROVE_ELSEWHERE,
        message=f"Approving this request counts only in {where}: “{option.label}” is not "
        "taken here.",
    )

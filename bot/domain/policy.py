"""Who may decide a route's questions (answer rule 9): the approver entries, the quorum and the
surfaces where approving counts, as written in a route and parsed once. Pure: no I/O.

An approver entry is one of:

========================  =================================================================
``slack:U…``              a Slack user (``slack:W…`` too: an Enterprise Grid user)
``matrix:@user:server``   a Matrix user
``web:<user>``            a web inbox user, as the sign-in proxy names them
``slack:S…``              a Slack user group: its members, read from Slack
``matrix-power:<n>``      anyone whose power level is at least ``n`` in the room they answer in
``web-group:<name>``      a web inbox user in that group, as the sign-in proxy says
``admins``                the configured workspace admins
========================  =================================================================

A route with no ``approvers`` lets anyone but the asker decide, as before rule 9.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

SURFACES = ("slack", "matrix", "web")
"""Where a person can answer: the values ``approve_on`` may name."""

MAX_QUORUM = 50
"""More distinct approvers than any team asks for; a larger number is a typo."""


class ApproverKind(StrEnum):
    PERSON = "person"
    SLACK_GROUP = "slack-group"
    MATRIX_POWER = "matrix-power"
    WEB_GROUP = "web-group"
    ADMINS = "admins"


@dataclass(frozen=True)
class Approver:
    """One parsed approver entry. ``value``: the identity key of a person (``slack:U0BOB``), the
    group's key (``slack:S0DEPLOYERS``, ``web-group:ops``), the least power level as digits, or
    empty for ``admins``."""

    kind: ApproverKind
    value: str
    text: str
    """The entry as written, for messages and ``/elicitbot policy``."""


@dataclass(frozen=True)
class Standing:
    """What the surface an answer came through knows of the person, beyond their identity."""

    groups: frozenset[str] = frozenset()
    """Approver group keys they belong to: ``slack:S…`` (read from Slack), ``web-group:<name>``
    (named by the sign-in proxy)."""
    power: int | None = None
    """Their power level in the Matrix room the answer came from; None elsewhere."""
    unknown: frozenset[str] = frozenset()
    """Approver group keys the surface could not read just now (a failed lookup): they do not
    count (fail closed), and a refusal says why rather than only "not an approver"."""
    names: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Approver entries by name, as far as the surface knows them (``slack:U0BOB`` -> ``Bob``,
    ``slack:S0DEPLOY`` -> ``@deploy-team``, ``matrix:@bob:server`` -> their name in the room):
    what a refusal calls them. An entry missing here is called by its id. Words only: it never
    changes who may decide (so it takes no part in comparing two standings)."""


NO_STANDING = Standing()


@dataclass(frozen=True)
class RoutePolicy:
    """A route's rule 9 keys together (``approvers`` as written), as a chat-made route stores
    them (``/elicitbot subscribe … approvers … quorum …``); the defaults: anyone but the asker."""

    approvers: tuple[str, ...] | None = None
    quorum: int = 1
    approve_on: tuple[str, ...] | None = None
    anyone_may_reject: bool = False


DEFAULT_POLICY = RoutePolicy()


_SLACK_USER = re.compile(r"^slack:[UW][A-Z0-9]+$")
_SLACK_GROUP = re.compile(r"^slack:S[A-Z0-9]+$")
_MATRIX_USER = re.compile(r"^matrix:@[^:\s]+:\S+$")
_WEB_USER = re.compile(r"^web:[^\s,]{1,200}$")
_POWER = re.compile(r"^matrix-power:(-?\d{1,9})$")
_WEB_GROUP = re.compile(r"^web-group:[^\s,]{1,200}$")


def parse_approver(text: str) -> Approver:
    """The entry ``text`` as an :class:`Approver`; ValueError saying what it should look like."""
    if text == "admins":
        return Approver(ApproverKind.ADMINS, "", text)
    if _SLACK_GROUP.match(text):
        return Approver(ApproverKind.SLACK_GROUP, text, text)
    if _SLACK_USER.match(text) or _MATRIX_USER.match(text) or _WEB_USER.match(text):
        return Approver(ApproverKind.PERSON, text, text)
    if power := _POWER.match(text):
        return Approver(ApproverKind.MATRIX_POWER, str(int(power.group(1))), text)
    if _WEB_GROUP.match(text):
        return Approver(ApproverKind.WEB_GROUP, text, text)
    raise ValueError(
        f"{text!r} is not an approver: use a person (slack:U…, matrix:@user:server, web:name), "
        "a Slack user group (slack:S…), matrix-power:<level>, web-group:<name> or admins"
    )


def check_approvers(values: Iterable[str] | None) -> tuple[str, ...] | None:
    """``approvers`` as given (each entry parsed, none repeated); None stays None (unset)."""
    if values is None:
        return None
    entries = tuple(values)
    if not entries:
        raise ValueError("must name at least one approver, or be left out (anyone may decide)")
    for entry in entries:
        parse_approver(entry)
    repeated = sorted({e for e in entries if entries.count(e) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once")
    return entries


def check_quorum(value: int) -> int:
    if not 1 <= value <= MAX_QUORUM:
        raise ValueError(f"must be a whole number from 1 to {MAX_QUORUM}")
    return value


def check_surfaces(values: Iterable[str] | None) -> tuple[str, ...] | None:
    """``approve_on``: known surfaces, none repeated; None stays None (every surface)."""
    if values is None:
        return None
    surfaces = tuple(values)
    if not surfaces:
        raise ValueError("must name at least one surface, or be left out (every surface)")
    unknown = [s for s in surfaces if s not in SURFACES]
    if unknown:
        raise ValueError(
            f"{', '.join(map(repr, unknown))}: not a surface (use {', '.join(SURFACES)})"
        )
    if len(set(surfaces)) != len(surfaces):
        raise ValueError("names a surface more than once")
    return surfaces

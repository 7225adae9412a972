"""Answer rule 9 — who may decide, and how many must agree. Pure: no I/O, no clock.
A tally counts one approving vote per person (linked by ``[people.principals]`` across surfaces)
on the subject's current revision and digest. The asker never counts (rule 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.domain.model import Elicitation, Frozen, Identity, Option, People, Scope
from bot.domain.policy import Approver, ApproverKind, Standing, parse_approver


def person_of(identity_key: str, people: People) -> str:
    """Who an identity is, across surfaces: its principal when ``[people.principals]`` links it,
    else the identity itself. Two identities with one principal are one person."""
    return people.principal_of(identity_key) or identity_key


def approvers_of(entries: Iterable[str] | None) -> tuple[Approver, ...] | None:
    """A route's ``approvers`` parsed (they were checked when the route was made)."""
    return None if entries is None else tuple(parse_approver(e) for e in entries)


_GROUPS = frozenset({ApproverKind.SLACK_GROUP, ApproverKind.WEB_GROUP})


def eligible(
    approvers: Sequence[Approver] | None, who: Identity, standing: Standing, people: People
) -> bool:
    """May ``who`` decide? Unset approvers: anyone (rule 1 still refuses the asker)."""
    if approvers is None:
        return True
    me = person_of(who.key, people)
    for a in approvers:
        if a.kind is ApproverKind.PERSON and person_of(a.value, people) == me:
            return True
        if a.kind is ApproverKind.ADMINS and who.key in people.admins:
            return True
        if a.kind in _GROUPS and a.value in standing.groups:
            return True
        if (
            a.kind is ApproverKind.MATRIX_POWER
            and who.platform == "matrix"
            and standing.power is not None
            and standing.power >= int(a.value)
        ):
            return True
    return False


class Vote(Frozen):
    """One eligible person's approving choice, stored until the quorum is reached."""

    person: str
    """:func:`person_of` the respondent: one vote per person."""
    respondent: str
    """The identity key they voted with (``slack:U0BOB``)."""
    display_name: str | None = None
    option_id: str
    via: str
    at: datetime
    revision: int | None = None
    digest: str | None = None
    """The approval subject's revision and digest the vote was given on."""
    needed: int = 1
    """The route's quorum when the vote was given: what the copies' tally line counts to."""


def current(e: Elicitation, votes: Iterable[Vote]) -> tuple[Vote, ...]:
    """The votes given on the subject as it stands: a new revision or digest clears the rest."""
    subject = e.subject
    if subject is None:
        return tuple(votes)
    return tuple(v for v in votes if (v.revision, v.digest) == (subject.revision, subject.digest))


@dataclass(frozen=True)
class Tally:
    approvals: tuple[Vote, ...]
    """The counted votes: the first of each person, in the order given."""
    needed: int

    @property
    def count(self) -> int:
        return len(self.approvals)

    @property
    def reached(self) -> bool:
        return self.count >= self.needed

    @property
    def missing(self) -> int:
        return max(0, self.needed - self.count)

    def has_voted(self, person: str) -> bool:
        return any(v.person == person for v in self.approvals)


def tally(e: Elicitation, votes: Iterable[Vote], quorum: int) -> Tally:
    """The approving votes that count toward ``quorum``: current ones, one per person, only for
    options that are still approving options of ``e``, never the asker's."""
    approving = {o.id for o in e.options if o.approving}
    counted: list[Vote] = []
    seen: set[str] = {e.asker}
    for v in current(e, votes):
        if v.option_id in approving and v.person not in seen and v.respondent != e.asker:
            seen.add(v.person)
            counted.append(v)
    return Tally(tuple(counted), quorum)


_SCOPE_ORDER = {Scope.ONCE: 0, None: 0, Scope.RUN: 1, Scope.ALWAYS: 2}


def decided_option(e: Elicitation, approvals: Sequence[Vote]) -> Option:
    """What a reached quorum decides: of the approving options the counted people chose, the one
    that grants the least (``once`` before ``run`` before ``always``; then the question's order).
    Everyone who voted approved at least that much, so nobody is held to more than they chose."""
    chosen = {v.option_id for v in approvals}
    options = [o for o in e.options if o.id in chosen]
    if not options:
        raise ValueError("no counted vote names an approving option of this question")
    order = {o.id: i for i, o in enumerate(e.options)}
    return min(options, key=lambda o: (_SCOPE_ORDER[o.scope], order[o.id]))

"""Votes toward a route's quorum (answer rule 9): one conditional ``UPDATE`` of the elicitation
(pending, not expired, at the version the judgement read) and one ``vote`` row in the same
transaction, so two last votes on two replicas make one decision: the second is judged again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Table, insert, or_, select
from sqlalchemy.engine import Connection

from bot.domain.model import ElicitationKey
from bot.domain.quorum import Vote
from bot.domain.votes import vote_writes
from store.sql.apply import Applier
from store.sql.base import E, open_changed
from store.tables import VoteRow

VOTE: Table = VoteRow.__table__  # type: ignore[attr-defined]

NO_REVISION = -1
"""The ``revision`` a vote on a question without an approval subject is stored with."""


def votes_of(conn: Connection, key: str) -> tuple[Vote, ...]:
    """The votes stored for ``key``, oldest first (:func:`bot.domain.quorum.current` keeps the
    ones given on the subject as it stands)."""
    return votes_for(conn, [key]).get(key, ())


def votes_for(conn: Connection, keys: Sequence[str]) -> dict[str, tuple[Vote, ...]]:
    """:func:`votes_of` for several elicitations at once (only those with votes)."""
    if not keys:
        return {}
    rows = conn.execute(
        select(VOTE)
        .where(VOTE.c.elicitation_key.in_(sorted(set(keys))))
        .order_by(VOTE.c.at, VOTE.c.person)
    )
    found: dict[str, list[Vote]] = {}
    for r in rows:
        found.setdefault(r.elicitation_key, []).append(_vote(r))
    return {key: tuple(votes) for key, votes in found.items()}


def _vote(r: Any) -> Vote:
    return Vote(
        person=r.person,
        respondent=r.respondent,
        display_name=r.display_name,
        option_id=r.option_id,
        via=r.via,
        at=r.at,
        revision=None if r.revision == NO_REVISION else r.revision,
        digest=r.digest or None,
        needed=r.needed,
    )


class Votes(Applier):
    async def record_vote(
        self,
        key: ElicitationKey,
        vote: Vote,
        now: datetime,
        *,
        version: int,
        audit: dict[str, object],
    ) -> bool:
        conditions = [
            E.c.version == version,
            or_(E.c.expires_at.is_(None), E.c.expires_at > now),
            or_(E.c.subject_expires_at.is_(None), E.c.subject_expires_at > now),
        ]
        writes = vote_writes(vote.respondent, audit)

        def work(conn: Connection) -> bool:
            if not open_changed(conn, key, now, *conditions):
                return False
            conn.execute(
                insert(VOTE).values(
                    elicitation_key=key,
                    person=vote.person,
                    revision=NO_REVISION if vote.revision is None else vote.revision,
                    digest=vote.digest or "",
                    respondent=vote.respondent,
                    display_name=vote.display_name,
                    option_id=vote.option_id,
                    via=vote.via,
                    at=vote.at,
                    needed=vote.needed,
                )
            )
            self._write(conn, key, writes, now)
            return True

        return await self._run(work, write=True)

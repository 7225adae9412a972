"""Which waiting questions' copies are drawn again when who may decide changes. Pure.

A copy shows its policy route at render time (rule 9), so a route's policy change makes it stale;
one an earlier (config) route matches is not touched by a chat route's change.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.domain.model import ElicitationKey, Route, Status
from bot.domain.records import StoredElicitation
from bot.domain.routing import policy_of, resolve_route
from bot.domain.writes import AuditWrite, WriteSet

__all__ = ["REDRAW", "config_routes_json", "redraw_writes", "redrawn", "routes_of_json"]

REDRAW = "redraw"
"""The audit action of a redraw."""


def redrawn(
    before: Sequence[Route], after: Sequence[Route], waiting: Iterable[StoredElicitation]
) -> tuple[ElicitationKey, ...]:
    """The keys of the pending elicitations in ``waiting`` whose policy route's policy under
    ``after`` differs from the one under ``before`` (sorted; each once)."""
    keys = {
        s.elicitation.key
        for s in waiting
        if s.status is Status.PENDING
        and policy_of(resolve_route(before, s.elicitation))
        != policy_of(resolve_route(after, s.elicitation))
    }
    return tuple(sorted(keys))


def redraw_writes(by: str, detail: Mapping[str, Any]) -> WriteSet:
    """A redraw: an audit row, and every posted chat copy updated (coalesced with an update
    already waiting)."""
    return WriteSet(audits=(AuditWrite(REDRAW, by, None, dict(detail)),), refresh=True)


def config_routes_json(routes: Sequence[Route]) -> str:
    """The config routes as last served, kept so the next start can tell what changed."""
    return json.dumps([r.model_dump(mode="json") for r in routes], sort_keys=True)


def routes_of_json(text: str) -> tuple[Route, ...]:
    """:func:`config_routes_json` read back; ValueError when it is not that."""
    value = json.loads(text)
    if not isinstance(value, list):
        msg = "config routes: not a list"
        raise ValueError(msg)  # noqa: TRY004 - a stored value, not a caller's type
    return tuple(Route.model_validate(r) for r in value)

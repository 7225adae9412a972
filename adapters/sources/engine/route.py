"""Where an engine ask goes: the request's own destinations (as ``Inbound.route``), not the
config's routes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.domain.bounds import id_problem
from bot.domain.model import Route, RouteMatch, check_destinations

WEB = "web"
CHAT_PREFIXES = ("slack:", "matrix:")
DESTINATION_MAX = 300
"""A destination is stored as one delivery's ``destination`` (300 characters on both databases);
``matrix:`` and a Matrix room id (at most 255 bytes) fit."""


def destination_problem(destination: str) -> str | None:
    """Why ``destination`` is no ``web``, ``slack:<id>`` or ``matrix:<id>`` in bounds, or None."""
    if (bad := id_problem(destination, max_length=DESTINATION_MAX, required=True)) is not None:
        return bad
    try:
        check_destinations((destination,))
    except ValueError as exc:
        return str(exc)
    return None


def mention_identity(mention: Any) -> str | None:
    """The chat identity a mention names (``"slack:U…"``, or an object's ``id``), else None."""
    value = mention.get("id") if isinstance(mention, dict) else mention
    if isinstance(value, str) and value.startswith(CHAT_PREFIXES) and value.split(":", 1)[1]:
        return value
    return None


def delivery_route(
    destinations: Sequence[str], followup_seconds: int, mentions: Sequence[str] = ()
) -> Route:
    """The ask's route; raises ValueError for a destination or delay the contract refuses."""
    return Route(
        match=RouteMatch(source="engine"),
        destinations=tuple(destinations) or (WEB,),
        followup_seconds=followup_seconds,
        mention=tuple(dict.fromkeys(mentions)),
        origin="request",
    )

"""What the service reads to redraw waiting copies (:mod:`bot.domain.redraw` decides which):
every pending elicitation, and the config routes as last served (a stored value), so ``serve``
start can tell which questions' policy changed while it was down."""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from bot.domain.model import Route, Status
from bot.domain.records import StoredElicitation
from bot.domain.redraw import config_routes_json, routes_of_json
from bot.domain.store import Store

log = structlog.get_logger("elicitbot.redraw")

CONFIG_ROUTES = "config_routes"
"""The stored value holding the config routes as last served."""
PAGE = 500


async def waiting(store: Store) -> list[StoredElicitation]:
    """Every pending elicitation, read a page at a time."""
    found: list[StoredElicitation] = []
    page = await store.list_elicitations(status=Status.PENDING.value, limit=PAGE)
    while page:
        found.extend(page)
        page = await store.list_elicitations(
            status=Status.PENDING.value, after=page[-1].elicitation.key, limit=PAGE
        )
    return found


async def last_served(store: Store, config_routes: Sequence[Route]) -> tuple[Route, ...]:
    """The config routes the last start served. Never stored (a first start) or unreadable:
    today's without ``approve_on``, so the questions of a route that sets it are drawn again
    once (the one part of a policy a copy shows)."""
    saved = await store.get_value(CONFIG_ROUTES)
    if saved is not None:
        try:
            return routes_of_json(saved)
        except ValueError:
            log.warning("config_routes.unreadable")
    return tuple(r.model_copy(update={"approve_on": None}) for r in config_routes)


async def remember_served(store: Store, config_routes: Sequence[Route]) -> None:
    await store.set_value(CONFIG_ROUTES, config_routes_json(config_routes))

"""Which route an elicitation takes: the first route whose match fits wins, else the web inbox."""

from __future__ import annotations

from collections.abc import Sequence

from bot.domain.model import Elicitation, Route, RouteMatch
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy

DEFAULT_ROUTE = Route()
"""No route matched: the web inbox only (``destinations = ("web",)``)."""


def route_matches(route: Route, e: Elicitation) -> bool:
    """Each field set in ``route.match`` (source, workspace, board) equals the elicitation's; a
    route naming a workspace or board never matches an elicitation without one."""
    match = route.match
    return (
        (match.source is None or match.source == e.source)
        and (match.workspace is None or match.workspace == e.workspace)
        and (match.board is None or match.board == e.context.board_id)
    )


def resolve_route(routes: Sequence[Route], e: Elicitation) -> Route:
    """The first route that matches, in the given order; none -> :data:`DEFAULT_ROUTE`."""
    return next((route for route in routes if route_matches(route, e)), DEFAULT_ROUTE)


def chat_route(
    workspace: str, board: str | None, destination: str, policy: RoutePolicy = DEFAULT_POLICY
) -> Route:
    """What ``/elicitbot subscribe <workspace> [board <id>] [approvers …]`` makes for the channel
    it ran in."""
    return Route(
        match=RouteMatch(workspace=workspace, board=board),
        destinations=(destination,),
        origin="chat",
        approvers=policy.approvers,
        quorum=policy.quorum,
        approve_on=policy.approve_on,
        anyone_may_reject=policy.anyone_may_reject,
    )


def policy_of(route: Route) -> RoutePolicy:
    """Who may decide a route's questions, as written in it (rule 9's keys)."""
    return RoutePolicy(route.approvers, route.quorum, route.approve_on, route.anyone_may_reject)


def route_name(route: Route) -> str:
    """What a route matches, as ``/elicitbot routes`` and ``policy`` name it:
    ``workspace=acme board=brd_1``; ``everything`` when it matches every question."""
    m = route.match
    named = (("source", m.source), ("workspace", m.workspace), ("board", m.board))
    return " ".join(f"{name}={value}" for name, value in named if value) or "everything"

"""Routes: the first match wins; nothing matched goes to the web inbox."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bot.domain.model import Context, Route, RouteMatch
from bot.domain.routing import DEFAULT_ROUTE, chat_route, resolve_route, route_matches
from tests.unit.domain.builders import BOARD, elicitation, sp_approval, sp_options


def route(dest: str, **match: str) -> Route:
    return Route(match=RouteMatch(**match), destinations=(dest,))


def test_empty_match_matches_everything():
    assert route_matches(Route(), sp_options())
    assert route_matches(Route(), elicitation(workspace=None, context=Context()))


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"source": "superpipeline"}, True),
        ({"source": "pinework"}, False),
        ({"workspace": "acme"}, True),
        ({"workspace": "other"}, False),
        ({"board": BOARD}, True),
        ({"board": "brd_other"}, False),
        ({"source": "superpipeline", "workspace": "acme", "board": BOARD}, True),
        ({"source": "superpipeline", "workspace": "acme", "board": "brd_other"}, False),
    ],
)
def test_each_set_field_must_equal(match, expected):
    assert route_matches(route("web", **match), sp_options()) is expected


def test_workspace_or_board_route_never_matches_an_elicitation_without_one():
    no_workspace = elicitation(workspace=None)
    assert not route_matches(route("web", workspace="acme"), no_workspace)
    assert route_matches(route("web", source="superpipeline"), no_workspace)
    assert sp_approval().context.board_id is None
    assert not route_matches(route("web", board=BOARD), sp_approval())


def test_first_match_wins():
    routes = [
        route("slack:C0OTHER", workspace="other"),
        route("slack:C0BOARD", board=BOARD),
        route("slack:C0ACME", workspace="acme"),
    ]
    assert resolve_route(routes, sp_options()).destinations == ("slack:C0BOARD",)
    assert resolve_route(routes, sp_approval()).destinations == ("slack:C0ACME",)


def test_no_match_goes_to_the_web_inbox():
    assert resolve_route([], sp_options()) is DEFAULT_ROUTE
    assert resolve_route([route("slack:C0X", workspace="other")], sp_options()) is DEFAULT_ROUTE
    assert DEFAULT_ROUTE.destinations == ("web",)
    assert DEFAULT_ROUTE.followup_seconds == 0


def test_chat_route_made_by_subscribe():
    made = chat_route("acme", BOARD, "matrix:!room:example.org")
    assert made.match == RouteMatch(workspace="acme", board=BOARD)
    assert made.destinations == ("matrix:!room:example.org",)
    assert made.origin == "chat"
    assert resolve_route([made], sp_options()) == made
    whole_workspace = chat_route("acme", None, "slack:C0APPROVALS")
    assert whole_workspace.match == RouteMatch(workspace="acme")
    assert route_matches(whole_workspace, sp_approval())


def test_chat_route_refuses_a_malformed_destination():
    with pytest.raises(ValidationError):
        chat_route("acme", None, "irc:#x")

"""Which waiting questions are redrawn when routes change (:mod:`bot.domain.redraw`): those whose
policy route (first match wins) has another policy now; pending ones only; the config routes last
served read back as written."""

from __future__ import annotations

import json

import pytest

from bot.domain.model import Route, RouteMatch, Status
from bot.domain.policy import RoutePolicy
from bot.domain.records import StoredElicitation
from bot.domain.redraw import REDRAW, config_routes_json, redraw_writes, redrawn, routes_of_json
from bot.domain.routing import DEFAULT_ROUTE, chat_route
from tests.unit.domain.builders import NOW, elicitation

C1 = "slack:C0DEPLOYS"
WEB_ONLY = RoutePolicy(approve_on=("web",))


def waiting(
    source_id: str, board: str | None = None, status: Status = Status.PENDING
) -> StoredElicitation:
    e = elicitation(source_id=source_id)
    e = e.model_copy(update={"context": e.context.model_copy(update={"board_id": board})})
    return StoredElicitation(e, status, None, 1, DEFAULT_ROUTE, NOW, NOW)


def test_only_the_questions_the_changed_chat_route_decides_are_redrawn() -> None:
    config = Route(match=RouteMatch(workspace="acme", board="brd_config"), destinations=(C1,))
    before = (config, chat_route("acme", None, C1))
    after = (config, chat_route("acme", None, C1, WEB_ONLY))
    mine, theirs = waiting("eli_1", "brd_1"), waiting("eli_2", "brd_config")
    done = waiting("eli_3", "brd_1", Status.ANSWERED)
    assert redrawn(before, after, [mine, theirs, done]) == (mine.elicitation.key,)
    assert redrawn(before, before, [mine, theirs]) == ()


def test_a_second_chat_route_for_the_same_questions_changes_nothing_they_show() -> None:
    """Two channels subscribed to the same workspace: the first one's policy decides."""
    first, second = chat_route("acme", None, C1), chat_route("acme", None, "slack:C0OTHER")
    changed = chat_route("acme", None, "slack:C0OTHER", WEB_ONLY)
    assert redrawn((first, second), (first, changed), [waiting("eli_1")]) == ()
    # Once the first is gone, the second decides: its policy is new to these questions.
    assert redrawn((first, second), (changed,), [waiting("eli_1")]) == (
        waiting("eli_1").elicitation.key,
    )


def test_a_new_route_that_now_decides_a_question_redraws_it() -> None:
    assert redrawn((), (chat_route("acme", None, C1, WEB_ONLY),), [waiting("eli_1")]) == (
        waiting("eli_1").elicitation.key,
    )
    # A new route with the defaults decides as no route did: nothing to redraw.
    assert redrawn((), (chat_route("acme", None, C1),), [waiting("eli_1")]) == ()


def test_the_writes_and_the_stored_routes() -> None:
    ws = redraw_writes("slack:U0ADA", {"why": "subscribe"})
    assert ws.refresh
    [audit] = ws.audits
    assert (audit.action, audit.actor, audit.detail) == (
        REDRAW,
        "slack:U0ADA",
        {"why": "subscribe"},
    )
    routes = (
        Route(match=RouteMatch(source="superpipeline"), destinations=(C1,), approve_on=("web",)),
        Route(destinations=(C1, "web"), approvers=("admins",), quorum=2),
    )
    assert routes_of_json(config_routes_json(routes)) == routes
    with pytest.raises(ValueError, match="not a list"):
        routes_of_json("{}")
    with pytest.raises(json.JSONDecodeError):  # a ValueError too, as the service reads it
        routes_of_json("not json")

"""``[[routes]]`` policy keys (answer rule 9): what check-config takes, and what it refuses by
name, including approver kinds no surface resolves yet."""

from __future__ import annotations

from typing import Any

import pytest

from bot.app.config import parse_config, preflight
from bot.domain.errors import ConfigError


def route(**keys: Any) -> dict[str, Any]:
    return {"routes": [{"destinations": ["web"]}, {"destinations": ["web"], **keys}]}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return str(exc.value).splitlines()


def test_people_and_admins_are_taken_and_reach_the_route() -> None:
    config = parse_config(
        route(
            approvers=["slack:U0BOB", "matrix:@bob:example.org", "web:carol", "admins"],
            quorum=1,
            approve_on=["web", "slack"],
            anyone_may_reject=True,
        )
    )
    r = config.route_list()[1]
    assert r.approvers == ("slack:U0BOB", "matrix:@bob:example.org", "web:carol", "admins")
    assert r.quorum == 1
    assert r.approve_on == ("web", "slack")
    assert r.anyone_may_reject is True
    first = config.route_list()[0]
    assert (first.approvers, first.quorum, first.approve_on, first.anyone_may_reject) == (
        None,
        1,
        None,
        False,
    )


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({"quorum": 0}, "routes[1].quorum"),
        ({"quorum": -2}, "routes[1].quorum"),
        ({"quorum": 51}, "routes[1].quorum"),
        ({"approve_on": ["email"]}, "routes[1].approve_on"),
        ({"approve_on": []}, "routes[1].approve_on"),
        ({"approvers": ["bob"]}, "routes[1].approvers"),
        ({"approvers": []}, "routes[1].approvers"),
        ({"approvers": ["admins", "admins"]}, "routes[1].approvers"),
        ({"anyone_may_reject": "sometimes"}, "routes[1].anyone_may_reject"),
    ],
)
def test_a_policy_that_cannot_be_enforced_is_refused_by_key(keys: dict[str, Any], key: str) -> None:
    assert [line.split(": ", 1)[0] for line in problems(route(**keys))] == [key]


@pytest.mark.parametrize("entry", ["slack:S0DEPLOYERS"])
def test_approver_kinds_no_surface_resolves_yet_are_refused(entry: str) -> None:
    """Until Slack user groups reach the rule, a route naming them would silently refuse
    everyone (or worse): check-config says so."""
    (line,) = problems(route(approvers=["slack:U0BOB", entry]))
    key, message = line.split(": ", 1)
    assert key == "routes[1].approvers"
    assert entry in message
    assert "not resolved by any surface yet" in message


def test_a_web_group_approver_needs_the_proxys_groups_header() -> None:
    """``web-group:<name>`` is resolved from ``[web] groups_header``: without it the route could
    never be decided, so preflight (serve and check-config alike) names the route's key."""
    data = {"routes": [{"destinations": ["web"], "approvers": ["web-group:ops", "admins"]}]}
    config = parse_config(data)
    [line] = preflight(config, {})
    assert line.startswith("routes[0].approvers: web-group:ops needs [web] groups_header")
    proxied = {
        **data,
        "server": {"trusted_proxies": ["127.0.0.1"]},
        "web": {"user_header": "X-Forwarded-User", "groups_header": "X-Forwarded-Groups"},
    }
    assert preflight(parse_config(proxied), {}) == []
    alone = {**proxied, "web": {"groups_header": "X-Forwarded-Groups"}}
    assert [p.split(": ", 1)[0] for p in preflight(parse_config(alone), {})] == [
        "web.groups_header"
    ]


MATRIX = {
    "homeserver": "https://matrix.example.org",
    "user_id": "@elicitbot:example.org",
    "device_id": "ELICITBOT",
}


def test_a_power_level_approver_is_taken_with_matrix_and_refused_by_key_without_it() -> None:
    """``matrix-power:<n>`` is resolved by the Matrix adapter (the room's power levels): with a
    ``[matrix]`` section it reaches the route; without one no answer could ever carry a power
    level, so preflight names the route's key."""
    data = {"routes": [{"destinations": ["web"], "approvers": ["matrix-power:50", "web:carol"]}]}
    [line] = preflight(parse_config(data), {})
    assert line == (
        "routes[0].approvers: matrix-power:50 needs a [matrix] section: power levels are read "
        "in the Matrix rooms people answer in"
    )
    config = parse_config({**data, "matrix": MATRIX})
    assert preflight(config, {"MATRIX_ACCESS_TOKEN": "syt_x"}) == []
    assert config.route_list()[0].approvers == ("matrix-power:50", "web:carol")
    (wrong,) = problems({**data, "matrix": MATRIX, "routes": [{"approvers": ["matrix-power:x"]}]})
    assert wrong.startswith("routes[0].approvers: ")

"""``[[routes]]`` policy keys (answer rule 9): what check-config takes, and what it refuses by
name, including approver kinds no surface resolves yet and a Slack user group the app's manifest
could not read."""

from __future__ import annotations

from pathlib import Path
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


REPO = Path(__file__).resolve().parents[2]
SLACK = {"slack": {"bot_token_env": "SLACK_BOT_TOKEN", "app_token_env": "SLACK_APP_TOKEN"}}
ENV = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"}


def grouped(**slack: Any) -> dict[str, Any]:
    return {
        "slack": {**SLACK["slack"], **slack},
        "routes": [
            {"destinations": ["web"], "approvers": ["slack:U0BOB"]},
            {"destinations": ["slack:C0DEPLOYS"], "approvers": ["slack:S0DEPLOY", "admins"]},
        ],
    }


def test_a_slack_user_group_is_taken_and_the_repositorys_manifest_may_read_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)  # where slack-app-manifest.yaml is read from by default
    config = parse_config(grouped())
    assert config.route_list()[1].approvers == ("slack:S0DEPLOY", "admins")
    assert preflight(config, ENV) == []


def test_a_manifest_without_usergroups_read_is_named(tmp_path: Path) -> None:
    manifest = tmp_path / "slack-app-manifest.yaml"
    text = (REPO / "slack-app-manifest.yaml").read_text(encoding="utf-8")
    manifest.write_text(text.replace("      - usergroups:read", "      # -"), encoding="utf-8")
    [line] = preflight(parse_config(grouped(manifest=str(manifest))), ENV)
    print(line)
    assert line == (
        f"slack.manifest: {manifest} lacks the bot scope usergroups:read, which "
        "routes[1].approvers needs to read who is in slack:S0DEPLOY (usergroups.users.list): "
        "add it under oauth_config.scopes.bot and reinstall the app"
    )


def test_a_manifest_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    [line] = preflight(parse_config(grouped(manifest=str(missing))), ENV)
    assert line.startswith(f"slack.manifest: {missing}: cannot be read")
    other = tmp_path / "other.yaml"
    other.write_text("name: not a manifest\n", encoding="utf-8")
    [line] = preflight(parse_config(grouped(manifest=str(other))), ENV)
    assert (
        line
        == f"slack.manifest: {other}: no oauth_config.scopes.bot list: not a Slack app manifest"
    )


def test_without_a_manifest_here_nothing_is_read_and_without_slack_a_group_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No manifest in the working directory: the token's scopes are checked at start instead.
    No ``[slack]`` at all: nobody could ever be read into the group."""
    monkeypatch.chdir(tmp_path)
    assert preflight(parse_config(grouped()), ENV) == []
    data = grouped()
    del data["slack"]
    [line] = preflight(parse_config(data), {})
    assert line == (
        "routes[1].approvers: slack:S0DEPLOY needs [slack]: a Slack user group's members are "
        "read from Slack"
    )


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

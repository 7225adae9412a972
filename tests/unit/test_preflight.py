"""Preflight: every check ``serve`` makes before it listens, by the config key it names, and
Elicitbot refusing exactly what ``check-config`` (preflight) refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.app.config import parse_config, preflight
from bot.domain.errors import ConfigError
from tests.unit.test_config import _elicitbot, example_data, problem_keys

TOKEN = {"TEST_INTAKE_TOKEN": "token-123456"}
SLACK_ENV = {"SLACK_BOT_TOKEN": "xoxb-123456", "SLACK_SIGNING_SECRET": "signing-123456"}

BAD_CONFIGS: list[tuple[str, dict[str, Any], dict[str, str], list[str]]] = [
    (
        "public listen, no token",
        {"server": {"listen": "0.0.0.0:8787"}},
        {},
        ["server.intake_token_env"],
    ),
    (
        "public v6 listen, no token",
        {"server": {"listen": "[::]:8787"}},
        {},
        ["server.intake_token_env"],
    ),
    (
        "LAN listen, no token",
        {"server": {"listen": "192.0.2.10:8787"}},
        {},
        ["server.intake_token_env"],
    ),
    (
        "token named, not set",
        {"server": {"intake_token_env": "TEST_INTAKE_TOKEN"}},
        {},
        ["server.intake_token_env"],
    ),
    (
        "token named, empty",
        {"server": {"intake_token_env": "TEST_INTAKE_TOKEN"}},
        {"TEST_INTAKE_TOKEN": ""},
        ["server.intake_token_env"],
    ),
    (
        "user header without trusted proxies",
        {"web": {"user_header": "X-Forwarded-User"}},
        {},
        ["web.user_header"],
    ),
    (
        "user header, public listen, nothing else",
        {"server": {"listen": "0.0.0.0:8787"}, "web": {"user_header": "X-Forwarded-User"}},
        {},
        ["server.intake_token_env", "web.user_header"],
    ),
    (
        "slack without its secrets",
        {"slack": {}},
        {},
        [
            "slack.bot_token_env",
            "slack.signing_secret_env",
        ],
    ),
    (
        "pinework without its token",
        {
            "sources": {
                "pinework": [
                    {"base_url": "https://p.example", "token_env": "PW_TOKEN", "workspace": "w"}
                ]
            }
        },
        {},
        ["sources.pinework[0].token_env"],
    ),
]

GOOD_CONFIGS: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("the embedded default", {}, {}),
    ("loopback by name", {"server": {"listen": "localhost:8787"}}, {}),
    ("loopback v6", {"server": {"listen": "[::1]:8787"}}, {}),
    (
        "public listen with a token",
        {"server": {"listen": "0.0.0.0:8787", "intake_token_env": "TEST_INTAKE_TOKEN"}},
        TOKEN,
    ),
    (
        "behind a sign-in proxy",
        {
            "server": {
                "listen": "0.0.0.0:8787",
                "intake_token_env": "TEST_INTAKE_TOKEN",
                "trusted_proxies": ["10.0.0.5"],
            },
            "web": {"user_header": "X-Forwarded-User"},
        },
        TOKEN,
    ),
    ("trusted proxies alone", {"server": {"trusted_proxies": ["10.0.0.0/8"]}}, {}),
    ("slack with its secrets", {"slack": {}}, SLACK_ENV),
]


@pytest.mark.parametrize(
    ("data", "environ", "keys"),
    [pytest.param(d, e, k, id=name) for name, d, e, k in BAD_CONFIGS],
)
def test_preflight_refuses_each_bad_config_by_key(
    data: dict[str, Any], environ: dict[str, str], keys: list[str]
) -> None:
    assert sorted(problem_keys("\n".join(preflight(parse_config(data), environ)))) == keys


@pytest.mark.parametrize(
    ("data", "environ"), [pytest.param(d, e, id=name) for name, d, e in GOOD_CONFIGS]
)
def test_preflight_passes_each_good_config(data: dict[str, Any], environ: dict[str, str]) -> None:
    assert preflight(parse_config(data), environ) == []


def test_preflight_passes_the_example_with_its_secrets() -> None:
    environ = dict.fromkeys(parse_config(example_data()).secret_envs().values(), "secret-123456")
    assert preflight(parse_config(example_data()), environ) == []


@pytest.mark.parametrize(
    ("data", "environ", "keys"),
    [pytest.param(d, e, k, id=name) for name, d, e, k in BAD_CONFIGS],
)
def test_elicitbot_refuses_what_preflight_refuses(
    tmp_path: Path, data: dict[str, Any], environ: dict[str, str], keys: list[str]
) -> None:
    """serve builds Elicitbot: it must refuse exactly what check-config (preflight) refuses."""
    config = parse_config({**data, "store": {"url": f"sqlite:///{tmp_path / 'x.db'}"}})
    with pytest.raises(ConfigError) as exc:
        _elicitbot()(config, environ=environ)
    assert sorted(problem_keys(str(exc.value))) == keys

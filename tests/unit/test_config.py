"""The TOML config: the example file documents every key; bad keys are refused by name.

Preflight's refusals (every check ``serve`` makes before it listens) are in ``test_preflight.py``.
"""

from __future__ import annotations

import ipaddress
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bot.app.config import (
    AppConfig,
    ServerConfig,
    StoreConfig,
    load_config,
    parse_config,
)
from bot.domain.errors import ConfigError
from bot.domain.model import Route

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.toml"


def _elicitbot() -> Any:
    """``bot.app.wiring.Elicitbot``, imported when a test needs it (the config and log tests that
    do not build it run without the adapters)."""
    from bot.app.wiring import Elicitbot

    return Elicitbot


def example_data() -> dict[str, Any]:
    with EXAMPLE.open("rb") as f:
        return tomllib.load(f)


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    return str(exc.value)


def problem_keys(message: str) -> list[str]:
    """The dotted key each line of a ConfigError names (``key: message``)."""
    return [line.split(": ", 1)[0] for line in message.splitlines()]


# --- the example file --------------------------------------------------------------------------


def test_the_example_parses() -> None:
    config = parse_config(example_data())
    assert config.server.listen == "127.0.0.1:8787"
    assert config.server.intake_token_env == "ELICITBOT_INTAKE_TOKEN"
    assert config.server.base_url == "https://elicitbot.example.org"
    assert config.store.url == "sqlite:///elicitbot.db"
    assert config.slack is not None
    assert config.slack.app_token_env == "SLACK_APP_TOKEN"
    assert config.matrix is not None
    assert config.matrix.user_id == "@elicitbot:example.org"
    assert config.nats is not None
    assert config.nats.subjects == ("evt.*.superpipeline.elicitation.pending",)
    assert config.people.principals["slack:U0ALICE"] == "usr_alice"
    assert len(config.routes) == 1
    assert config.routes[0].followup_seconds == 300
    assert config.routes[0].match.board == "brd_134a0ddb6d434478"
    assert len(config.sources.pinework) == 1
    assert config.sources.pinework[0].poll_seconds == 5
    route = config.route_list()[0]
    assert isinstance(route, Route)
    assert route.destinations == ("slack:C0APPROVALS", "matrix:!room:example.org", "web")


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (``X | None``, ``tuple[X, ...]``, …)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None and not isinstance(annotation, types.UnionType):
        return []
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def field_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a model and its nested sections, e.g. ('routes', 'match', 'board')."""
    paths = []
    for name, info in model.model_fields.items():
        if model is not AppConfig and name == "origin":
            continue  # Route.origin is set by the code, never written in a config file
        path = (*prefix, info.alias or name)
        paths.append(path)
        # A table of named sections ([mcp.agents.<name>]): any one name stands for all.
        keyed = typing.get_origin(info.annotation) is dict
        for nested in _models(info.annotation):
            paths += field_paths(nested, (*path, "*") if keyed else path)
    return paths


def _lookup(data: Any, path: tuple[str, ...]) -> bool:
    for part in path:
        if part == "*":  # the first of a table's named sections
            if not isinstance(data, dict) or not data:
                return False
            data = next(iter(data.values()))
            continue
        if isinstance(data, list):
            if not data:
                return False
            data = data[0]
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def test_the_walk_sees_the_nested_sections() -> None:
    paths = field_paths(AppConfig)
    for path in [
        ("server", "listen"),
        ("slack", "api_url"),
        ("routes", "match", "board"),
        ("sources", "pinework", "poll_seconds"),
        ("sources", "handup", "callback_allowlist"),
        ("people", "principals"),
        ("mcp", "agents", "*", "token_env"),
    ]:
        assert path in paths


def test_every_config_key_is_in_the_example() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    data = example_data()
    missing_text = [p for p in field_paths(AppConfig) if p[-1] not in text]
    missing_key = [".".join(p) for p in field_paths(AppConfig) if not _lookup(data, p)]
    assert missing_text == []
    assert missing_key == []


# --- unknown keys ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"server": {"lisen": "127.0.0.1:8787"}}, "server.lisen"),
        ({"sever": {"listen": "127.0.0.1:8787"}}, "sever"),
        ({"slack": {"bot_token": "xoxb-1"}}, "slack.bot_token"),
        ({"routes": [{"destinations": ["web"], "followup": 5}]}, "routes[0].followup"),
        ({"routes": [{}, {"match": {"team": "x"}}]}, "routes[1].match.team"),
        (
            {
                "sources": {
                    "pinework": [
                        {
                            "base_url": "https://p.example",
                            "token_env": "T",
                            "workspace": "w",
                            "pol_seconds": 5,
                        }
                    ]
                }
            },
            "sources.pinework[0].pol_seconds",
        ),
        ({"sources": {"toolshed": {}}}, "sources.toolshed"),
        ({"people": {"admin": ["slack:U1"]}}, "people.admin"),
    ],
)
def test_unknown_key_is_refused_by_its_dotted_name(data: dict[str, Any], key: str) -> None:
    assert problem_keys(refused(data)) == [key]


def test_every_problem_is_named_at_once() -> None:
    message = refused(
        {"server": {"lisen": "x", "listen": "nohost"}, "store": {"url": "mysql://db"}}
    )
    assert sorted(problem_keys(message)) == ["server.lisen", "server.listen", "store.url"]


def test_bad_value_is_refused_by_its_dotted_name() -> None:
    assert problem_keys(refused({"server": {"listen": "127.0.0.1:99999"}})) == ["server.listen"]
    assert problem_keys(refused({"server": {"intake_token_env": "not a name"}})) == [
        "server.intake_token_env"
    ]
    assert problem_keys(refused({"matrix": {"homeserver": "https://m.example"}})) == [
        "matrix.user_id",
        "matrix.device_id",
    ]


# --- routes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [0, 5, 6, 300, 899, 900])
def test_followup_seconds_in_range_is_accepted(seconds: int) -> None:
    config = parse_config({"routes": [{"destinations": ["web"], "followup_seconds": seconds}]})
    assert config.routes[0].followup_seconds == seconds
    assert config.route_list()[0].followup_seconds == seconds


@pytest.mark.parametrize("seconds", [-1, 3, 901])
def test_followup_seconds_out_of_range_is_refused(seconds: int) -> None:
    message = refused({"routes": [{"destinations": ["web"], "followup_seconds": seconds}]})
    assert problem_keys(message) == ["routes[0].followup_seconds"]


@pytest.mark.parametrize("destination", ["slak:C0", "slack:"])
def test_route_destination_of_the_wrong_form_is_refused(destination: str) -> None:
    """DESIGN: destinations are written slack:<id>, matrix:<id> or web (as Route requires)."""
    message = refused({"routes": [{"destinations": ["web", destination]}]})
    keys = problem_keys(message)
    assert len(keys) == 1
    assert keys[0].startswith("routes[0].destinations"), message


# --- people ------------------------------------------------------------------------------------


def test_identities_in_people_are_accepted() -> None:
    config = parse_config(
        {
            "people": {
                "admins": ["slack:U0ADMIN", "matrix:@alice:example.org"],
                "agents": ["slack:B0AGENT"],
                "principals": {"matrix:@agent:example.org": "agt_1"},
            }
        }
    )
    people = config.people_model()
    assert people.admins == frozenset({"slack:U0ADMIN", "matrix:@alice:example.org"})
    assert people.agents == frozenset({"slack:B0AGENT"})
    assert people.principal_of("matrix:@agent:example.org") == "agt_1"


@pytest.mark.parametrize(
    ("people", "key"),
    [
        ({"admins": ["U0ADMIN"]}, "people.admins"),
        ({"admins": ["slack:U0ADMIN", "slack:"]}, "people.admins"),
        ({"agents": ["irc:bob"]}, "people.agents"),
        ({"agents": ["@agent:example.org"]}, "people.agents"),
        ({"principals": {"U0ALICE": "usr_alice"}}, "people.principals"),
    ],
)
def test_bad_identity_in_people_is_refused(people: dict[str, Any], key: str) -> None:
    message = refused({"people": people})
    assert problem_keys(message) == [key]
    assert "identity" in message


# --- the embedded default ----------------------------------------------------------------------


def test_without_a_file_the_embedded_default_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config, origin = load_config(None)
    assert origin is None
    assert config.store.url == "sqlite:///elicitbot.db"
    assert config.server.listen == "127.0.0.1:8787"
    assert (config.server.host, config.server.port) == ("127.0.0.1", 8787)
    assert config.server.intake_token_env is None
    assert config.server.base_url == "http://127.0.0.1:8787"
    assert config.slack is None
    assert config.matrix is None
    assert config.nats is None
    assert config.secret_envs() == {}
    assert list(tmp_path.iterdir()) == []


def test_elicitbot_toml_in_the_cwd_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elicitbot.toml").write_text('[server]\nlisten = "127.0.0.1:9000"\n')
    config, origin = load_config(None)
    assert origin == Path("elicitbot.toml")
    assert config.server.port == 9000


def test_a_named_file_that_is_missing_or_not_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


# --- what Elicitbot refuses at start -----------------------------------------------------------


@pytest.mark.parametrize("listen", ["0.0.0.0:8787", "192.0.2.10:8787", "[::]:8787"])
def test_elicitbot_refuses_a_public_listen_without_a_token(tmp_path: Path, listen: str) -> None:
    config = AppConfig(
        server=ServerConfig(listen=listen),
        store=StoreConfig(url=f"sqlite:///{tmp_path / 'x.db'}"),
    )
    with pytest.raises(ConfigError, match=r"server\.intake_token_env"):
        _elicitbot()(config, environ={})


async def test_elicitbot_takes_a_public_listen_with_a_token(tmp_path: Path) -> None:
    config = AppConfig(
        server=ServerConfig(listen="0.0.0.0:8787", intake_token_env="TEST_INTAKE_TOKEN"),
        store=StoreConfig(url=f"sqlite:///{tmp_path / 'x.db'}"),
    )
    bot = _elicitbot()(config, environ={"TEST_INTAKE_TOKEN": "token-123456"})
    try:
        assert bot.runtime.intake_token == "token-123456"
    finally:
        await bot.http_client.aclose()
        await bot.store.close()


@pytest.mark.parametrize("listen", ["127.0.0.1:8787", "localhost:8787", "[::1]:8787"])
async def test_elicitbot_takes_a_loopback_listen_without_a_token(
    tmp_path: Path, listen: str
) -> None:
    config = AppConfig(
        server=ServerConfig(listen=listen),
        store=StoreConfig(url=f"sqlite:///{tmp_path / 'x.db'}"),
    )
    bot = _elicitbot()(config, environ={})
    try:
        assert bot.runtime.intake_token is None
    finally:
        await bot.http_client.aclose()
        await bot.store.close()


def test_elicitbot_refuses_a_named_secret_that_is_not_set(tmp_path: Path) -> None:
    config = AppConfig(
        server=ServerConfig(intake_token_env="TEST_INTAKE_TOKEN"),
        store=StoreConfig(url=f"sqlite:///{tmp_path / 'x.db'}"),
    )
    with pytest.raises(ConfigError, match=r"server\.intake_token_env.*TEST_INTAKE_TOKEN"):
        _elicitbot()(config, environ={})
    with pytest.raises(ConfigError, match=r"server\.intake_token_env"):
        _elicitbot()(config, environ={"TEST_INTAKE_TOKEN": ""})


# --- proxies and log format --------------------------------------------------------------------


def test_trusted_proxies_take_addresses_and_networks() -> None:
    config = parse_config(
        {"server": {"trusted_proxies": ["10.0.0.5", "192.168.0.0/16", "::1", "fd00::/8"]}}
    )
    assert config.server.trusted_proxies == (
        ipaddress.ip_network("10.0.0.5/32"),
        ipaddress.ip_network("192.168.0.0/16"),
        ipaddress.ip_network("::1/128"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert config.server.forwarded_allow_ips == [
        "10.0.0.5/32",
        "192.168.0.0/16",
        "::1/128",
        "fd00::/8",
    ]


def test_no_proxy_is_trusted_by_default() -> None:
    server = AppConfig().server
    assert server.trusted_proxies == ()
    assert server.forwarded_allow_ips == []
    assert not server.trusts("127.0.0.1")


@pytest.mark.parametrize(
    ("peer", "trusted"),
    [
        ("10.0.0.5", True),
        ("10.0.0.6", False),
        ("192.168.3.4", True),
        ("::ffff:192.168.3.4", True),
        ("[fd00::1]", True),
        ("127.0.0.1", False),
        ("not-an-address", False),
        ("", False),
        (None, False),
    ],
)
def test_a_peer_is_trusted_only_inside_trusted_proxies(peer: str | None, trusted: bool) -> None:
    server = ServerConfig(trusted_proxies=("10.0.0.5", "192.168.0.0/16", "fd00::/8"))
    assert server.trusts(peer) is trusted


@pytest.mark.parametrize(
    ("proxies", "key"),
    [
        (["10.0.0.5", "10.0.0.300"], "server.trusted_proxies[1]"),
        (["proxy.example.org"], "server.trusted_proxies[0]"),
        (["10.0.0.5/8"], "server.trusted_proxies[0]"),
        (["10.0.0.5", "", "::1"], "server.trusted_proxies[1]"),
        ([" 10.0.0.5"], "server.trusted_proxies[0]"),
        (["10.0.0.5", 7], "server.trusted_proxies[1]"),
        ("10.0.0.5", "server.trusted_proxies"),
    ],
)
def test_a_bad_trusted_proxy_is_refused_by_its_index(proxies: Any, key: str) -> None:
    message = refused({"server": {"trusted_proxies": proxies}})
    assert problem_keys(message) == [key], message


def test_host_bits_say_which_network_was_meant() -> None:
    assert "10.0.0.0/8" in refused({"server": {"trusted_proxies": ["10.0.0.5/8"]}})


@pytest.mark.parametrize("log_format", ["auto", "json", "console"])
def test_log_format_takes_its_three_values(log_format: str) -> None:
    assert parse_config({"server": {"log_format": log_format}}).server.log_format == log_format


@pytest.mark.parametrize("log_format", ["text", "JSON", "", 1])
def test_another_log_format_is_refused(log_format: Any) -> None:
    assert problem_keys(refused({"server": {"log_format": log_format}})) == ["server.log_format"]


def test_log_format_defaults_to_auto() -> None:
    assert AppConfig().server.log_format == "auto"

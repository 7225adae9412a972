"""The TOML config: pydantic models, unknown keys refused, secrets from the environment. Each
surface's and source's section lives in its adapter package, composed into ``AppConfig``.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AnyHttpUrl,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
)

from adapters.matrix.config import MatrixConfig
from adapters.shared.config import EnvName, Section
from adapters.slack.api.scopes import MANIFEST, USERGROUPS_READ, manifest_scopes
from adapters.slack.config import SlackConfig
from adapters.sources.engine.config import EngineConfig
from adapters.sources.handup.config import HandupConfig
from adapters.sources.mcp.config import McpConfig
from adapters.sources.pinework.config import PineworkConfig
from adapters.sources.superpipeline.config import NatsConfig, SuperPipelineConfig
from adapters.web.config import WebConfig
from bot.domain.errors import ConfigError
from bot.domain.model import (
    People,
    Route,
    RouteMatch,
    check_destinations,
    check_followup_seconds,
)
from bot.domain.policy import check_approvers, check_quorum, check_surfaces

DEFAULT_FILE = Path("elicitbot.toml")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LogFormat = Literal["auto", "json", "console"]


def _network(value: object) -> Network:
    """An address (``10.0.0.5``, ``::1``) or a network (``10.0.0.0/8``), by the stdlib."""
    if not isinstance(value, str):
        msg = "must be a string: an address like 10.0.0.5 or a network like 10.0.0.0/8"
        raise ValueError(msg)  # noqa: TRY004 - pydantic reports a ValueError by its key
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        if "host bits set" in str(exc):
            network = ipaddress.ip_network(value, strict=False)
            msg = f"{value!r} has host bits set: write the network {network} or one address"
        else:
            msg = f"{value!r} is not an address like 10.0.0.5 or a network like 10.0.0.0/8"
        raise ValueError(msg) from None


ProxyNetwork = Annotated[Network, PlainValidator(_network)]


class ServerConfig(Section):
    listen: str = "127.0.0.1:8787"
    intake_token_env: EnvName | None = None
    public_url: AnyHttpUrl | None = None
    trusted_proxies: tuple[ProxyNetwork, ...] = ()
    """The reverse proxies' addresses or networks: only their requests may set ``X-Forwarded-*``
    and ``[web] user_header``. Empty: no peer is trusted."""
    log_format: LogFormat = "auto"
    """auto: readable lines on a terminal, JSON lines otherwise; json or console force one."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:  # noqa: PLR2004
            msg = "must be host:port, e.g. 127.0.0.1:8787"
            raise ValueError(msg)
        return value

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def trusts(self, peer: str | None) -> bool:
        """Whether a request from ``peer`` (the socket's address) comes from a trusted proxy."""
        if not peer or not self.trusted_proxies:
            return False
        try:
            address = ipaddress.ip_address(peer.strip("[]"))
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.trusted_proxies)

    @property
    def forwarded_allow_ips(self) -> list[str]:
        """For uvicorn's ``forwarded_allow_ips`` (with ``proxy_headers`` only when non-empty)."""
        return [str(network) for network in self.trusted_proxies]

    @property
    def base_url(self) -> str:
        """``public_url``, defaulting to ``http://<listen>``."""
        return str(self.public_url).rstrip("/") if self.public_url else f"http://{self.listen}"


class StoreConfig(Section):
    url: str = "sqlite:///elicitbot.db"

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not value.startswith(("sqlite:", "sqlite+", "postgresql:", "postgresql+")):
            msg = "must be sqlite:///<file> or postgresql[+psycopg]://user@host/db"
            raise ValueError(msg)
        return value


class PeopleConfig(Section):
    admins: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    principals: dict[str, str] = Field(default_factory=dict)

    @field_validator("admins", "agents", "principals")
    @classmethod
    def _identities(cls, values: Collection[str]) -> Collection[str]:
        for value in values:  # principals: its keys
            _check_identity(value)
        return values


def _check_identity(value: str) -> None:
    platform, sep, ident = value.partition(":")
    if platform not in ("slack", "matrix", "web") or not sep or not ident:
        msg = (
            f"{value!r} is not an identity like 'slack:U0ALICE', 'matrix:@alice:example.org' "
            "or 'web:alice@example.org'"
        )
        raise ValueError(msg)


class RouteConfig(Section):
    match: RouteMatch = RouteMatch()
    destinations: tuple[str, ...] = ("web",)
    followup_seconds: int = 0
    escalate_to: tuple[str, ...] = ()
    mention: tuple[str, ...] = ()
    approvers: tuple[str, ...] | None = None
    """Who may decide (answer rule 9); unset: anyone but the asker."""
    # quorum > 1: votes are stored (store.sql.votes) and counted in the one judgement.
    quorum: int = 1
    approve_on: tuple[str, ...] | None = None
    anyone_may_reject: bool = False

    _followup = field_validator("followup_seconds")(check_followup_seconds)
    _destinations = field_validator("destinations", "escalate_to", "mention")(check_destinations)
    _approvers = field_validator("approvers")(check_approvers)
    _approve_on = field_validator("approve_on")(check_surfaces)

    _quorum = field_validator("quorum")(check_quorum)

    def to_route(self) -> Route:
        return Route(**self.model_dump(), origin="config")


class DeadlinesConfig(Section):
    claim_minutes: float = Field(default=30, gt=0)
    """How long an "I'm on it" claim pauses escalation and follow-ups."""
    sweep_seconds: float = Field(default=15, ge=1, le=300)
    """The periodic sweep that catches any due deadline a wake-up missed."""


class SourcesConfig(Section):
    superpipeline: SuperPipelineConfig = SuperPipelineConfig()
    pinework: tuple[PineworkConfig, ...] = ()
    handup: HandupConfig = HandupConfig()
    engine: EngineConfig = EngineConfig()


class AppConfig(Section):
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    slack: SlackConfig | None = None
    matrix: MatrixConfig | None = None
    nats: NatsConfig | None = None
    people: PeopleConfig = PeopleConfig()
    web: WebConfig = WebConfig()
    deadlines: DeadlinesConfig = DeadlinesConfig()
    routes: tuple[RouteConfig, ...] = ()
    sources: SourcesConfig = SourcesConfig()
    mcp: McpConfig | None = None
    """``[mcp]``: the MCP server at ``/mcp`` and its agents (absent: off)."""

    def route_list(self) -> tuple[Route, ...]:
        return tuple(r.to_route() for r in self.routes)

    def people_model(self, bot_identities: frozenset[str] = frozenset()) -> People:
        return People(
            admins=frozenset(self.people.admins),
            agents=frozenset(self.people.agents),
            principals=dict(self.people.principals),
            bot_identities=bot_identities,
        )

    def secret_envs(self) -> dict[str, str]:
        """Config key -> environment variable, for every secret this config needs."""
        needed: dict[str, str] = {}
        if self.server.intake_token_env:
            needed["server.intake_token_env"] = self.server.intake_token_env
        if self.slack is not None:
            needed["slack.bot_token_env"] = self.slack.bot_token_env
            if self.slack.app_token_env:
                needed["slack.app_token_env"] = self.slack.app_token_env
            elif self.slack.signing_secret_env:
                needed["slack.signing_secret_env"] = self.slack.signing_secret_env
        if self.matrix is not None:
            needed["matrix.access_token_env"] = self.matrix.access_token_env
            if self.matrix.pickle_key_env:
                needed["matrix.pickle_key_env"] = self.matrix.pickle_key_env
        for i, p in enumerate(self.sources.pinework):
            needed[f"sources.pinework[{i}].token_env"] = p.token_env
        if self.mcp is not None:
            for name, agent in self.mcp.agents.items():
                needed[f"mcp.agents.{name}.token_env"] = agent.token_env
        return needed


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_config(data: Mapping[str, Any]) -> AppConfig:
    try:
        return AppConfig.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_loc(err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors()]
        raise ConfigError("\n".join(problems)) from None


def load_config(path: Path | None) -> tuple[AppConfig, Path | None]:
    """The config and the file it came from (None: the embedded default)."""
    if path is None:
        if not DEFAULT_FILE.exists():
            return AppConfig(), None
        path = DEFAULT_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse_config(data), path


def check_environment(config: AppConfig, environ: Mapping[str, str]) -> list[str]:
    """Problems with the secrets the config names: each missing variable, by config key."""
    return [
        f"{key}: environment variable {env} is not set"
        for key, env in config.secret_envs().items()
        if not environ.get(env)
    ]


def preflight(config: AppConfig, environ: Mapping[str, str]) -> list[str]:
    """Every check ``serve`` makes before it listens, as ``key: problem`` lines (``[]``: ok);
    ``check-config`` prints the same list, so the two can never disagree."""
    problems = check_environment(config, environ)
    if config.server.intake_token_env is None and not is_loopback(config.server.host):
        problems.append(
            "server.intake_token_env: required when server.listen is not a loopback address"
        )
    if config.web.groups_header is not None and config.web.user_header is None:
        problems.append(
            "web.groups_header: needs web.user_header: groups are believed only with the name "
            "the sign-in proxy gives"
        )
    for i, route in enumerate(config.routes):
        grouped = [a for a in route.approvers or () if a.startswith("web-group:")]
        if grouped and config.web.groups_header is None:
            problems.append(
                f"routes[{i}].approvers: {', '.join(grouped)} needs [web] groups_header, the "
                "sign-in proxy's header naming the user's groups"
            )
        powered = [a for a in route.approvers or () if a.startswith("matrix-power:")]
        if powered and config.matrix is None:
            problems.append(
                f"routes[{i}].approvers: {', '.join(powered)} needs a [matrix] section: power "
                "levels are read in the Matrix rooms people answer in"
            )
    problems += _slack_group_problems(config)
    if config.web.user_header is not None and not config.server.trusted_proxies:
        problems.append(
            "web.user_header: needs server.trusted_proxies, the sign-in proxy's addresses: "
            "a user header is believed only from them, or anyone reaching the port could be anyone"
        )
    return problems


def check_startable(config: AppConfig, environ: Mapping[str, str]) -> None:
    """The :func:`preflight` problems as one ConfigError: ``serve`` and ``check-config`` alike."""
    problems = preflight(config, environ)
    if problems:
        raise ConfigError("\n".join(problems))


def _slack_group_problems(config: AppConfig) -> list[str]:
    """A ``slack:S…`` approver needs Slack, and an app that may read user groups: the manifest's
    bot scopes must have ``usergroups:read`` (the installed token's are logged at start)."""
    grouped = [
        (i, [a for a in route.approvers or () if a.startswith("slack:S")])
        for i, route in enumerate(config.routes)
    ]
    grouped = [(i, groups) for i, groups in grouped if groups]
    if not grouped:
        return []
    if config.slack is None:
        return [
            f"routes[{i}].approvers: {', '.join(groups)} needs [slack]: a Slack user group's "
            "members are read from Slack"
            for i, groups in grouped
        ]
    path = config.slack.manifest or MANIFEST
    if config.slack.manifest is None and not path.is_file():
        return []  # no manifest here to check: the token's scopes are checked at start
    try:
        scopes = manifest_scopes(path)
    except ValueError as exc:
        return [f"slack.manifest: {exc}"]
    if USERGROUPS_READ in scopes:
        return []
    i, groups = grouped[0]
    return [
        f"slack.manifest: {path} lacks the bot scope {USERGROUPS_READ}, which routes[{i}]."
        f"approvers needs to read who is in {', '.join(groups)} (usergroups.users.list): add it "
        "under oauth_config.scopes.bot and reinstall the app"
    ]


def secret(environ: Mapping[str, str], env: str | None) -> str | None:
    return environ.get(env) if env else None


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")

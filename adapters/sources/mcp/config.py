"""``[mcp]``: the MCP server's agents; tokens are never in the file, only in ``token_env``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, field_validator

from adapters.shared.config import EnvName, Section
from bot.domain.errors import ConfigError
from bot.domain.model import check_destinations

AgentName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
WAIT_MAX = 600  # the longest ``wait_seconds``: a client that waits longer times out first


class McpAgentConfig(Section):
    token_env: EnvName
    destinations: tuple[str, ...] = ()
    """Where its questions go when it names no route, and the only ones its ``ask`` may name.
    Empty: the config's routes decide."""

    @field_validator("destinations")
    @classmethod
    def _destination_form(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return check_destinations(values)


class McpConfig(Section):
    wait_seconds: float = Field(default=45, gt=0, le=WAIT_MAX)
    """How long ``ask`` (and ``get_answer`` at most) holds the call before returning pending."""
    agents: dict[AgentName, McpAgentConfig] = Field(default_factory=dict)


def agent_tokens(config: McpConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Agent by token; ConfigError for a missing or shared token (agents would see each other's)."""
    tokens: dict[str, str] = {}
    for name, agent in config.agents.items():
        token = agent_token(name, agent, environ)
        if token in tokens:
            msg = f"mcp.agents.{name}.token_env: the same token as mcp.agents.{tokens[token]}"
            raise ConfigError(msg)
        tokens[token] = name
    return tokens


def agent_token(name: str, agent: McpAgentConfig, environ: Mapping[str, str]) -> str:
    """The agent's token from ``token_env``; ConfigError when it is unset or blank."""
    token = environ.get(agent.token_env, "")
    if not token.strip():
        msg = f"mcp.agents.{name}.token_env: the variable {agent.token_env} is not set"
        raise ConfigError(msg)
    return token

"""A small MCP server (stdio) whose tools elicit mid-call: the upstream behind the proxy in the
proxy's tests. Run as a script."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, MCPServer, Resolve
from mcp.server.mcpserver.resolve import ElicitationResult
from pydantic import BaseModel, Field

server: MCPServer = MCPServer("deployer", instructions="Deploys things, after asking.")


class DeployForm(BaseModel):
    replicas: int = Field(ge=1, le=9, description="How many replicas")
    canary: bool
    note: str | None = None


class Confirm(BaseModel):
    pass


@server.tool()
async def deploy(service: str, ctx: Context) -> str:
    """Deploy a service, asking for its settings first."""
    result = await ctx.elicit(f"Deploy settings for {service}?", schema=DeployForm)
    data = result.data.model_dump() if result.action == "accept" else None
    return f"{result.action}: {data}"


@server.tool()
async def wipe(ctx: Context) -> str:
    """Wipe the cache, after a confirmation."""
    result = await ctx.elicit("Wipe the cache?", schema=Confirm)
    return result.action


@server.tool()
async def login(ctx: Context) -> str:
    """Sign in to the registry, in the person's browser."""
    result = await ctx.elicit_url(
        "Sign in to the registry", url="https://registry.example.org/login?s=1", elicitation_id="e1"
    )
    return result.action


class ScaleForm(BaseModel):
    replicas: int = Field(ge=1, le=9)


def ask_scale(service: str) -> Elicit[ScaleForm]:
    return Elicit(f"How far should {service} scale?", ScaleForm)


@server.tool()
async def scale(
    service: str, plan: Annotated[ElicitationResult[ScaleForm], Resolve(ask_scale)]
) -> str:
    """Scale a service; asks how far (mid-call on 2025-11-25, input_required on 2026-07-28)."""
    data = plan.data.model_dump() if isinstance(plan, AcceptedElicitation) else None
    return f"{plan.action}: {data}"


@server.resource("memo://motd")
def motd() -> str:
    return "deploys are frozen on Fridays"


@server.prompt()
def release_notes(version: str) -> str:
    return f"Write the release notes for {version}."


if __name__ == "__main__":
    server.run("stdio")

"""MCP: any agent asks people through elicitbot (issue 24).

Two parts, both speaking the ``mcp`` SDK (protocols 2025-11-25 and 2026-07-28):

- the server at ``/mcp`` (:mod:`.server`): the tools ``ask``, ``get_answer`` and ``cancel``, a
  bearer token per agent (``[mcp.agents.<name>]``, :mod:`.config`);
- ``elicitbot mcp-proxy`` (:mod:`.proxy`): a stdio MCP server in front of another one, whose
  elicitations it asks through the ``/mcp`` tools.

The composition root builds the server with one call::

    part = mcp_part(config.mcp, os.environ, service, clock)
    # part: McpPart
    app.router.routes.append(part.route)     # Route("/mcp", part.app): GET, POST, DELETE
    async with part.lifespan(): ...          # inside the HTTP app's lifespan
    part.ready()                             # None, or what is not ready (for /readyz)
    part.shutdown()                          # on SIGTERM: waiting calls return "pending" now

``mcp_part(config: McpConfig, environ: Mapping[str, str], elicitations: Elicitations,
clock: Clock, *, new_id: Callable[[], str] = uuid4 hex, poll_seconds: float = 0.5) -> McpPart``;
it raises ``ConfigError`` (naming ``mcp.agents.<name>.token_env``) when a token variable is unset
or two agents share a token. The question's source is ``mcp`` (a ``[[routes]]`` match may name
``source = "mcp"``); its answers go back in the tool result, so there is no answer sink.

The proxy's entry point for the CLI is :func:`.proxy.run_proxy` (see its docstring).
"""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.mcp.config import McpAgentConfig, McpConfig
    from adapters.sources.mcp.server import McpPart, mcp_part

__all__, __getattr__ = lazy_exports(__name__, __file__)

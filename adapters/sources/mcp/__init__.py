"""MCP: any agent asks people through elicitbot (issue 24), on the ``mcp`` SDK.

The server at ``/mcp`` (:mod:`.server`: ``ask``, ``get_answer``, ``cancel``, a bearer token per
agent) and ``elicitbot mcp-proxy`` (:mod:`.proxy`); answers go back in the tool result, not a sink.
"""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.mcp.config import McpAgentConfig, McpConfig
    from adapters.sources.mcp.server import McpPart, mcp_part

__all__, __getattr__ = lazy_exports(__name__, __file__)

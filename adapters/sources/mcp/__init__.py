"""MCP: agents ask people through the server at ``/mcp`` (a bearer token per agent) or
``elicitbot mcp-proxy``; answers go back in the tool result, not a sink."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.mcp.config import McpConfig
    from adapters.sources.mcp.server import McpPart, mcp_part

__all__, __getattr__ = lazy_exports(__name__, __file__)

"""Toolshed elicitation routes (spec 002): elicitbot serves the runtime's three routes."""

from adapters.sources.toolshed.parse import (
    ASKER,
    RESOLVER,
    SOURCE,
    ElicitationRequest,
    Resolution,
    parse_request,
    parse_resolution,
    poll_body,
    to_elicitation,
)
from adapters.sources.toolshed.routes import toolshed_router

__all__ = [
    "ASKER",
    "RESOLVER",
    "SOURCE",
    "ElicitationRequest",
    "Resolution",
    "parse_request",
    "parse_resolution",
    "poll_body",
    "to_elicitation",
    "toolshed_router",
]

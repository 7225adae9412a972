"""Toolshed elicitation routes: elicitbot serves the runtime's three routes."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.toolshed.parse import (
        ASKER,
        SOURCE,
        parse_request,
        parse_resolution,
        poll_body,
        to_elicitation,
    )
    from adapters.sources.toolshed.routes import toolshed_router

__all__, __getattr__ = lazy_exports(__name__, __file__)

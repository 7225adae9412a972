"""The engine's ask/approval SDK (spec 001): elicitbot is its delivery provider."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.engine.document import ask_document
    from adapters.sources.engine.parse import (
        MAX_BODY_BYTES,
        NO_DEADLINE_TEXT,
        delivery_route,
        parse_delivery,
    )
    from adapters.sources.engine.routes import acceptance, engine_router
    from adapters.sources.engine.sink import EngineSink

__all__, __getattr__ = lazy_exports(__name__, __file__)

"""The engine's ask/approval SDK (spec 001): elicitbot is its delivery provider."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.engine.document import ask_document
    from adapters.sources.engine.parse import (
        MAX_BODY_BYTES,
        NO_DEADLINE_TEXT,
        SOURCE,
        DeliveryRequest,
        parse_delivery,
    )
    from adapters.sources.engine.route import delivery_route
    from adapters.sources.engine.routes import acceptance, engine_router
    from adapters.sources.engine.sink import EngineSink

__all__ = [
    "MAX_BODY_BYTES",
    "NO_DEADLINE_TEXT",
    "SOURCE",
    "DeliveryRequest",
    "EngineSink",
    "acceptance",
    "ask_document",
    "delivery_route",
    "engine_router",
    "parse_delivery",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "document": ("ask_document",),
        "parse": (
            "MAX_BODY_BYTES",
            "NO_DEADLINE_TEXT",
            "SOURCE",
            "DeliveryRequest",
            "parse_delivery",
        ),
        "route": ("delivery_route",),
        "routes": ("acceptance", "engine_router"),
        "sink": ("EngineSink",),
    },
)

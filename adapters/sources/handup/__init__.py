"""handup Requests: ``POST /v1/handup/requests`` in, the terminal Request to its callback out."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.handup.routes import handup_router
    from adapters.sources.handup.sink import HandupSink

__all__, __getattr__ = lazy_exports(__name__, __file__)

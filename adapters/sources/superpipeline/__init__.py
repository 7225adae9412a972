"""SuperPipeline `elicitation.pending` v1 intake: a CloudEvent in, an Elicitation out."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.superpipeline.parse import (
        CE_TYPE,
        SOURCE,
        parse_body,
        to_elicitation,
        workspace_from_subject,
    )
    from adapters.sources.superpipeline.routes import superpipeline_router

__all__, __getattr__ = lazy_exports(__name__, __file__)

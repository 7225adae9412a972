"""handup Requests: ``POST /v1/handup/requests`` in, the terminal Request to its callback out."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.handup.document import request_document
    from adapters.sources.handup.duration import parse_timeout
    from adapters.sources.handup.elicitation import SOURCE, to_elicitation
    from adapters.sources.handup.routes import handup_router
    from adapters.sources.handup.sink import HandupSink
    from adapters.sources.handup.validation import CheckedRequest, callback_allowed, check, schema

__all__, __getattr__ = lazy_exports(__name__, __file__)

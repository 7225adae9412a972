"""handup approval requests (spec 004): ``POST /v1/handup/requests`` in, the terminal Request
POSTed to its allowlisted ``callback_url`` out."""

from adapters.sources.handup.parse import (
    SOURCE,
    CheckedRequest,
    callback_allowed,
    check,
    parse_timeout,
    request_document,
    schema,
    to_elicitation,
)
from adapters.sources.handup.routes import handup_router
from adapters.sources.handup.sink import HandupSink

__all__ = [
    "SOURCE",
    "CheckedRequest",
    "HandupSink",
    "callback_allowed",
    "check",
    "handup_router",
    "parse_timeout",
    "request_document",
    "schema",
    "to_elicitation",
]

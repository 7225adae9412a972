"""SuperPipeline over NATS: the intake consumer in (:mod:`.nats_intake`), the answer publisher
out (:mod:`.nats_answers`), on one bounded connect (:mod:`.nats_client`)."""

from adapters.sources.superpipeline.nats_answers import CompositeSink, NatsAnswerPublisher
from adapters.sources.superpipeline.nats_client import connect
from adapters.sources.superpipeline.nats_intake import (
    DEFAULT_STREAM,
    Handler,
    NatsIntake,
    default_backoff,
    inbound_from_message,
)

__all__ = [
    "DEFAULT_STREAM",
    "CompositeSink",
    "Handler",
    "NatsAnswerPublisher",
    "NatsIntake",
    "connect",
    "default_backoff",
    "inbound_from_message",
]

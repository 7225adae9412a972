"""Pinework questions: polled in, answered back through the answer and secret routes."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.sources.pinework.parse import account_key
    from adapters.sources.pinework.poller import PineworkPoller, PollError
    from adapters.sources.pinework.sink import PineworkSecretSink, PineworkSink

__all__, __getattr__ = lazy_exports(__name__, __file__)

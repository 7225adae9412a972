"""The Slack surface: Block Kit rendering, the ChatAdapter, error mapping."""

from typing import TYPE_CHECKING

from adapters.shared.exports import lazy_exports

if TYPE_CHECKING:
    from adapters.slack.chat import SlackChat

__all__, __getattr__ = lazy_exports(__name__, __file__)

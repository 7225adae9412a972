"""The Slack surface: Block Kit rendering, the ChatAdapter, error mapping."""

from adapters.slack.chat import SlackChat

__all__ = ["SlackChat"]

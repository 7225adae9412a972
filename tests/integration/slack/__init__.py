"""Slack end to end: the real Bolt AsyncApp, signed requests, the fake Web API."""

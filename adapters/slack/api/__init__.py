"""Slack Web API use beside posting: pacing, cached lookups of people and groups, scopes."""

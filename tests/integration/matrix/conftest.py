"""The real Synapse homeserver and the shared accounts, for every Matrix integration test."""

from tests.synapse import cast, homeserver, synapse

__all__ = ["cast", "homeserver", "synapse"]

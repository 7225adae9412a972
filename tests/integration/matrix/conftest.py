"""The per-test rig for every Matrix integration test (fresh rooms, a fresh database, one bot
process); the real Synapse and its shared accounts are session fixtures of tests/conftest.py."""

from tests.integration.matrix.rig import rig

__all__ = ["rig"]

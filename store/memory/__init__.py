"""The store port kept in memory (see :mod:`store.memory.store`)."""

from store.memory.store import MemoryStore

__all__ = ["MemoryStore"]

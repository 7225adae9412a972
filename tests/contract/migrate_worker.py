"""One replica's start for the concurrent-migration test, in a module light enough to spawn
quickly (it imports the migration code only, not the test suite)."""

from __future__ import annotations

from multiprocessing.synchronize import Barrier

from store.db import upgrade


def start_replica(url: str, barrier: Barrier) -> None:
    """Released with the other replicas, then ``upgrade`` (a failure exits the process with 1)."""
    barrier.wait(timeout=60)
    upgrade(url)

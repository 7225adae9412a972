"""A loop step that keeps failing logged once, not every turn: the first failure with its
traceback, then a count every ``every`` failures, and how many when it succeeds again.
"""

from __future__ import annotations

from typing import Any

REPEAT_EVERY = 100
"""Say again (without a traceback) that a streak goes on after this many more failures."""


class Streak:
    def __init__(self, log: Any, event: str, *, every: int = REPEAT_EVERY) -> None:
        self.log = log
        self.event = event
        self.every = every
        self.failures = 0

    def failed(self, **fields: Any) -> None:
        """Call from an ``except`` block: the failure being handled is the one logged."""
        self.failures += 1
        if self.failures == 1:
            self.log.exception(self.event, **fields)
        elif self.failures % self.every == 0:
            self.log.warning(self.event, failures=self.failures, still=True, **fields)

    def ok(self) -> None:
        if self.failures:
            self.log.warning(f"{self.event}.over", failures=self.failures)
            self.failures = 0

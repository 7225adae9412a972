"""A failing loop step is logged once per streak (with its traceback), then counted."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from bot.streak import Streak


def refuse() -> None:
    raise ConnectionRefusedError("the database")


def test_a_streak_logs_its_first_failure_every_nth_repeat_and_its_end() -> None:
    streak = Streak(structlog.get_logger("t"), "loop.failed", every=10)
    with capture_logs() as logs:
        for _ in range(25):
            try:
                refuse()
            except ConnectionRefusedError:
                streak.failed()
        streak.ok()
        streak.ok()
    assert [(e["event"], e.get("exc_info"), e.get("failures")) for e in logs] == [
        ("loop.failed", True, None),
        ("loop.failed", None, 10),
        ("loop.failed", None, 20),
        ("loop.failed.over", None, 25),
    ]

"""``serve`` says, once ready, where the inbox is: the log event always, and for a person the
line itself (issue 15: the README's first command printed JSON records only)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from bot.app import logs
from bot.app.config import AppConfig


@pytest.fixture(autouse=True)
def isolated_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Logging, structlog and the person's stream are put back afterwards."""
    monkeypatch.setattr(logs, "_person", logs._person)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)


def test_readable_logs_get_the_ready_line_on_its_own() -> None:
    stream = io.StringIO()
    logs.configure(log_format="console", stream=stream)

    line = logs.announce_ready(AppConfig())

    assert line.startswith("elicitbot ready — web inbox http://127.0.0.1:8787/")
    written = stream.getvalue().splitlines()
    assert line in written  # the bare line, for a person
    assert any("elicitbot.ready" in w for w in written)  # and the event


def test_json_logs_get_the_event_only() -> None:
    stream = io.StringIO()
    logs.configure(log_format="json", stream=stream)

    line = logs.announce_ready(AppConfig())

    records = [json.loads(w) for w in stream.getvalue().splitlines()]  # every line is JSON
    assert [(r["event"], r["line"]) for r in records] == [("elicitbot.ready", line)]


def test_auto_is_json_when_stderr_is_no_terminal() -> None:
    stream = io.StringIO()  # not a TTY
    logs.configure(log_format="auto", stream=stream)

    logs.announce_ready(AppConfig())

    assert all(w.startswith("{") for w in stream.getvalue().splitlines())

"""Logs never carry a registered secret: structlog events, stdlib records and tracebacks alike."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot.app import logs
from bot.app.config import AppConfig, ServerConfig, StoreConfig, parse_config

CANARY = "xoxb-canary-123456"


def _elicitbot() -> Any:
    """``bot.app.wiring.Elicitbot``, imported when a test needs it (the config and log tests that
    do not build it run without the adapters)."""
    from bot.app.wiring import Elicitbot

    return Elicitbot


@pytest.fixture(autouse=True)
def isolated_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own secret set; logging and structlog are put back afterwards."""
    monkeypatch.setattr(logs, "_SECRETS", set())
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)


def lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines written (every line must be one)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_registered_secret_is_redacted_from_fields_and_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure()
    logs.register_secrets([CANARY])
    log = structlog.get_logger("test.logs")
    log.info(
        f"sending with token {CANARY} now",
        token=CANARY,
        header=f"Bearer {CANARY}",
        nested={"auth": [CANARY, "fine"], "deeper": {"t": (CANARY,)}},
        count=3,
    )
    err = capsys.readouterr().err
    assert CANARY not in err
    (line,) = lines(err)
    assert line["event"] == "sending with token [redacted] now"
    assert line["token"] == "[redacted]"
    assert line["header"] == "Bearer [redacted]"
    assert line["nested"] == {"auth": ["[redacted]", "fine"], "deeper": {"t": ["[redacted]"]}}
    assert line["count"] == 3
    assert line["level"] == "info"
    assert line["logger"] == "test.logs"


def test_a_stdlib_record_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure()
    logs.register_secrets([CANARY])
    logging.getLogger("some.library").warning("connecting with %s", CANARY)
    err = capsys.readouterr().err
    assert CANARY not in err
    (line,) = lines(err)
    assert line["event"] == "connecting with [redacted]"
    assert line["level"] == "warning"


def _call_upstream() -> None:
    raise RuntimeError(f"upstream refused token {CANARY}")


def test_a_traceback_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure()
    logs.register_secrets([CANARY])
    log = structlog.get_logger("test.logs")
    try:
        _call_upstream()
    except RuntimeError:
        log.exception("call.failed")
    err = capsys.readouterr().err
    assert CANARY not in err
    (line,) = lines(err)
    assert "RuntimeError: upstream refused token [redacted]" in line["exception"]


def test_nothing_is_redacted_before_a_secret_is_registered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure()
    structlog.get_logger("test.logs").info("plain", value=CANARY)
    assert lines(capsys.readouterr().err)[0]["value"] == CANARY


def test_short_or_empty_values_are_not_registered(capsys: pytest.CaptureFixture[str]) -> None:
    """A one-letter 'secret' would shred every log line; empty and None mean unset."""
    logs.configure()
    logs.register_secrets(["a", "", None, "12345"])
    structlog.get_logger("test.logs").info("a value 12345", value="a")
    (line,) = lines(capsys.readouterr().err)
    assert line["event"] == "a value 12345"
    assert line["value"] == "a"


def test_every_registered_secret_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure()
    logs.register_secrets([CANARY])
    logs.register_secrets(["syt_matrix_canary_987"])
    structlog.get_logger("test.logs").info("two", a=CANARY, b="x syt_matrix_canary_987 y")
    err = capsys.readouterr().err
    assert CANARY not in err
    assert "syt_matrix_canary_987" not in err
    (line,) = lines(err)
    assert (line["a"], line["b"]) == ("[redacted]", "x [redacted] y")


async def test_elicitbot_registers_the_secrets_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure()
    config = AppConfig(
        server=ServerConfig(intake_token_env="TEST_INTAKE_TOKEN"),
        store=StoreConfig(url=f"sqlite:///{tmp_path / 'x.db'}"),
    )
    bot = _elicitbot()(config, environ={"TEST_INTAKE_TOKEN": CANARY})
    try:
        structlog.get_logger("test.logs").info("request", authorization=f"Bearer {CANARY}")
    finally:
        await bot.http_client.aclose()
        await bot.store.close()
    err = capsys.readouterr().err
    assert CANARY not in err
    assert lines(err)[-1]["authorization"] == "Bearer [redacted]"


# --- renderers: readable on a terminal, JSON otherwise ------------------------------------------


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _log_everything() -> None:
    log = structlog.get_logger("test.logs")
    log.info(f"sending with token {CANARY} now", token=CANARY, nested={"auth": [CANARY]})
    logging.getLogger("some.library").warning("connecting with %s", CANARY)
    try:
        _call_upstream()
    except RuntimeError:
        log.exception("call.failed", raw=CANARY.encode(), error=RuntimeError(CANARY))


@pytest.mark.parametrize("stream_kind", ["terminal", "pipe"])
def test_the_console_renderer_redacts_too(stream_kind: str) -> None:
    stream: io.StringIO = Terminal() if stream_kind == "terminal" else io.StringIO()
    logs.configure(log_format="console", stream=stream)
    logs.register_secrets([CANARY])
    _log_everything()
    out = stream.getvalue()
    assert CANARY not in out
    assert "sending with token [redacted] now" in out
    assert "connecting with [redacted]" in out
    assert "RuntimeError: upstream refused token [redacted]" in out
    assert not out.lstrip().startswith("{")


def test_a_terminal_gets_readable_coloured_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = Terminal()
    logs.configure(stream=stream)
    structlog.get_logger("test.logs").info("elicitbot.started", listen="127.0.0.1:8787")
    out = stream.getvalue()
    assert "elicitbot.started" in out
    assert "listen" in out
    assert "127.0.0.1:8787" in out
    assert "\x1b[" in out  # colours
    with pytest.raises(json.JSONDecodeError):
        json.loads(out.splitlines()[0])


def test_console_on_a_pipe_has_no_colours() -> None:
    stream = io.StringIO()
    logs.configure(log_format="console", stream=stream)
    structlog.get_logger("test.logs").info("plain", value=1)
    out = stream.getvalue()
    assert "plain" in out
    assert "\x1b[" not in out


def test_not_a_terminal_gets_json_lines() -> None:
    stream = io.StringIO()
    logs.configure(stream=stream)
    structlog.get_logger("test.logs").info("plain", value=1)
    (line,) = lines(stream.getvalue())
    assert (line["event"], line["value"]) == ("plain", 1)


def test_json_is_forced_on_a_terminal_too() -> None:
    stream = Terminal()
    logs.configure(log_format="json", stream=stream)
    structlog.get_logger("test.logs").info("plain", value=1)
    (line,) = lines(stream.getvalue())
    assert line["event"] == "plain"


@pytest.mark.parametrize(
    ("log_format", "tty", "expected"),
    [
        ("auto", True, False),
        ("auto", False, True),
        ("json", True, True),
        ("json", False, True),
        ("console", True, False),
        ("console", False, False),
    ],
)
def test_which_renderer(log_format: str, tty: bool, expected: bool) -> None:
    assert logs.wants_json(log_format, Terminal() if tty else io.StringIO()) is expected


def test_bytes_and_objects_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure()
    logs.register_secrets([CANARY])
    structlog.get_logger("test.logs").info(
        "odd values", raw=CANARY.encode(), error=ValueError(CANARY), **{CANARY: "as a key"}
    )
    err = capsys.readouterr().err
    assert CANARY not in err
    (line,) = lines(err)
    assert line["raw"] == "b'[redacted]'"
    assert line["error"] == "ValueError('[redacted]')"


# --- the ready line ----------------------------------------------------------------------------


def test_the_ready_line_of_the_embedded_default() -> None:
    assert logs.ready_line(AppConfig()) == (
        "elicitbot ready — web inbox http://127.0.0.1:8787/ · SQLite ./elicitbot.db"
        " · Slack off · Matrix off"
    )


def test_the_ready_line_names_every_part_and_no_secret() -> None:
    config = parse_config(
        {
            "server": {"public_url": "https://elicitbot.example.org"},
            "store": {"url": "postgresql+psycopg://bot:hunter2-pw@db.example:5432/elicit"},
            "slack": {"app_token_env": "SLACK_APP_TOKEN"},
            "matrix": {
                "homeserver": "https://matrix.example.org",
                "user_id": "@elicitbot:example.org",
                "device_id": "ELICITBOT",
            },
            "nats": {"url": "nats://relay:nats-pw-123@nats.example:4222"},
            "sources": {
                "pinework": [
                    {
                        "base_url": "https://pinework.example.org",
                        "token_env": "PINEWORK_TOKEN",
                        "workspace": "ws_main",
                    }
                ]
            },
        }
    )
    line = logs.ready_line(config)
    assert line == (
        "elicitbot ready — web inbox https://elicitbot.example.org/"
        " · PostgreSQL postgresql+psycopg://bot@db.example:5432/elicit"
        " · Slack on (Socket Mode) · Matrix @elicitbot:example.org"
        " · NATS nats://relay@nats.example:4222"
        " · Pinework https://pinework.example.org (ws_main)"
    )
    assert "hunter2" not in line
    assert "nats-pw" not in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("url", "text"),
    [
        ("sqlite:///elicitbot.db", "SQLite ./elicitbot.db"),
        ("sqlite:///data/x.db", "SQLite ./data/x.db"),
        ("sqlite:////var/lib/elicitbot/x.db", "SQLite /var/lib/elicitbot/x.db"),
        ("sqlite+pysqlite:///x.db?timeout=5", "SQLite ./x.db"),
        ("sqlite://", "SQLite in memory"),
        ("sqlite:///:memory:", "SQLite in memory"),
        ("postgresql://u@h/db", "PostgreSQL postgresql://u@h/db"),
        ("postgresql://u:pw-secret@h/db", "PostgreSQL postgresql://u@h/db"),
        (
            "postgresql://h/db?sslmode=require&password=pw-secret",
            "PostgreSQL postgresql://h/db?sslmode=require",
        ),
    ],
)
def test_the_store_as_the_ready_line_shows_it(url: str, text: str) -> None:
    assert logs.store_text(url) == text


def test_the_ready_line_shows_slack_http_mode() -> None:
    line = logs.ready_line(parse_config({"slack": {}}))
    assert "Slack on (HTTP, POST /slack/events)" in line


def test_the_ready_line_redacts_a_registered_secret() -> None:
    logs.register_secrets([CANARY])
    config = parse_config({"store": {"url": f"postgresql://h/{CANARY}"}})
    assert CANARY not in logs.ready_line(config)


def test_at_debug_nio_keeps_its_whole_responses_to_itself() -> None:
    """matrix-nio's DEBUG line carries each response it parsed, whole (every /sync batch): left
    out at DEBUG; its INFO and warnings stay, and a quieter level stays quieter for it too."""
    nio_log = logging.getLogger("nio.responses")
    saved = logging.getLogger("nio").level
    try:
        stream = io.StringIO()
        logs.configure("DEBUG", stream=stream)
        nio_log.debug("Validating response schema: %s", {"next_batch": "s1"})
        nio_log.info("nio info")
        nio_log.warning("Error validating response")
        structlog.get_logger("test.logs").debug("ours")
        assert [line["event"] for line in lines(stream.getvalue())] == [
            "nio info",
            "Error validating response",
            "ours",
        ]
        stream = io.StringIO()
        logs.configure("WARNING", stream=stream)
        nio_log.info("nio info")
        nio_log.warning("nio warning")
        assert [line["event"] for line in lines(stream.getvalue())] == ["nio warning"]
    finally:
        logging.getLogger("nio").setLevel(saved)

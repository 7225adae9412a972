"""Logs never carry a registered secret: structlog events, stdlib records and tracebacks alike."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from bot import logs
from bot.config import AppConfig, ServerConfig, StoreConfig
from bot.wiring import Elicitbot

CANARY = "xoxb-canary-123456"


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
    bot = Elicitbot(config, environ={"TEST_INTAKE_TOKEN": CANARY})
    try:
        structlog.get_logger("test.logs").info("request", authorization=f"Bearer {CANARY}")
    finally:
        await bot.http_client.aclose()
        await bot.store.close()
    err = capsys.readouterr().err
    assert CANARY not in err
    assert lines(err)[-1]["authorization"] == "Bearer [redacted]"

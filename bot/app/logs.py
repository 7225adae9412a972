"""Logs on stderr that never carry a secret: readable lines for a person, JSON lines otherwise.
Every secret the process reads is registered here and replaced by ``[redacted]`` in any field
before a renderer sees the event.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import structlog

if TYPE_CHECKING:
    from bot.app.config import AppConfig

_SECRETS: set[str] = set()
MIN_SECRET_LENGTH = 6
_person: IO[str] | None = None
"""Where readable log lines go (set by :func:`configure`); None while the logs are JSON."""


def register_secrets(values: Iterable[str | None]) -> None:
    _SECRETS.update(v for v in values if v and len(v) >= MIN_SECRET_LENGTH)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        for secret in _SECRETS:
            if secret in value:
                value = value.replace(secret, "[redacted]")
        return value
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    if value is None or isinstance(value, bool | int | float):
        return value
    # Anything else (bytes, an exception, an object) is shown by its repr in both renderers.
    text = repr(value)
    return _scrub(text) if any(secret in text for secret in _SECRETS) else value


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if not _SECRETS:
        return event
    for key, value in list(event.items()):
        clean = _scrub(key)
        if clean != key:
            del event[key]
        event[clean] = _scrub(value)
    return event


def is_tty(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


def wants_json(log_format: str, stream: IO[str]) -> bool:
    """JSON lines for ``json``, and for ``auto`` when the stream is not a terminal."""
    if log_format == "json":
        return True
    if log_format == "console":
        return False
    return not is_tty(stream)


def renderer(log_format: str, stream: IO[str]) -> Any:
    """The last processor: JSON, or structlog's console renderer. Exceptions are formatted to plain
    text before redaction either way, so no traceback (or its locals) escapes the redaction."""
    if wants_json(log_format, stream):
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=is_tty(stream))


def configure(level: str = "INFO", log_format: str = "auto", stream: IO[str] | None = None) -> None:
    """Route structlog and stdlib logging to ``stream`` (default stderr) in ``log_format``."""
    global _person  # noqa: PLW0603 - one process, one log configuration
    out = sys.stderr if stream is None else stream
    _person = None if wants_json(log_format, out) else out
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,  # so tests can capture events after configure()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            renderer(log_format, out),
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "httpcore", "alembic", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # matrix-nio's DEBUG writes every response it parses, whole (each /sync batch): at DEBUG
    # that was 8 % of serve's event loop during the Matrix benchmark (bench/README.md).
    logging.getLogger("nio").setLevel(max(root.getEffectiveLevel(), logging.INFO))


# --- the line serve prints once it is ready ------------------------------------------------------

_SECRET_PARAMS = ("pass", "secret", "token", "key")


def without_password(url: str) -> str:
    """``url`` with no password in its user info and no password-like query parameter."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}@{host}"
    query = urlencode(
        [
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not any(word in k.lower() for word in _SECRET_PARAMS)
        ]
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def store_text(url: str) -> str:
    """``SQLite ./elicitbot.db``, ``SQLite in memory`` or ``PostgreSQL <url without password>``."""
    if url.startswith("sqlite"):
        path = url.split("://", 1)[1] if "://" in url else ""
        path = path.removeprefix("/")
        path = path.split("?", 1)[0]
        if not path or path == ":memory:":
            return "SQLite in memory"
        return f"SQLite {path if path.startswith(('/', './', '../')) else './' + path}"
    return f"PostgreSQL {without_password(url)}"


def ready_line(config: AppConfig) -> str:
    """The one line ``serve`` prints once it listens: where the inbox is and what is on (``elicitbot
    ready — web inbox http://127.0.0.1:8787/ · SQLite ./elicitbot.db · Slack off · Matrix off``).
    Never a secret: URLs lose their passwords, and any registered secret is redacted."""
    parts = [f"web inbox {config.server.base_url}/", store_text(config.store.url)]
    slack = config.slack
    if slack is None:
        parts.append("Slack off")
    elif slack.app_token_env is not None:
        parts.append("Slack on (Socket Mode)")
    else:
        parts.append("Slack on (HTTP, POST /slack/events)")
    matrix = config.matrix
    parts.append("Matrix off" if matrix is None else f"Matrix {matrix.user_id}")
    if config.nats is not None:
        parts.append(f"NATS {without_password(config.nats.url)}")
    for pinework in config.sources.pinework:
        base = without_password(str(pinework.base_url)).rstrip("/")
        parts.append(f"Pinework {base} ({pinework.workspace})")
    line: str = _scrub("elicitbot ready — " + " · ".join(parts))
    return line


def announce_ready(config: AppConfig) -> str:
    """Log ``elicitbot.ready`` with :func:`ready_line`, and print the line on its own when the logs
    are for a person: JSON logs get the event only (a bare line would break a JSON stream)."""
    line = ready_line(config)
    structlog.get_logger("elicitbot").info("elicitbot.ready", line=line)
    if _person is not None:
        print(line, file=_person, flush=True)
    return line

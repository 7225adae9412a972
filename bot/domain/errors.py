"""elicitbot's error tree.

ElicitBotError
├── ConfigError                 a bad config key (startup only); the message names the key
├── IntakeError                 inbound request refused
│   ├── PayloadRejected         400: ``problems`` names each bad field
│   ├── UnsupportedMediaType    415
│   └── PayloadTooLarge         413
├── DeliveryError               from a ChatAdapter or an AnswerSink
│   ├── TransientDeliveryError  retried with backoff; ``retry_after`` when the peer said so
│   └── PermanentDeliveryError  recorded as failed, not retried
└── StoreError
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROBLEM = "application/problem+json"
"""The media type of every refusal elicitbot answers over HTTP (RFC 9457)."""


class ElicitBotError(Exception):
    """Base of every error elicitbot raises on purpose."""


class ConfigError(ElicitBotError):
    pass


@dataclass(frozen=True)
class FieldProblem:
    """One bad field: ``loc`` is a path like ``data.options[2].scope`` or ``[1].id``."""

    loc: str
    message: str

    def __str__(self) -> str:
        return f"{self.loc}: {self.message}"


def problem_body(
    status: int, title: str, detail: str, errors: list[FieldProblem] | None = None, **more: Any
) -> dict[str, Any]:
    """A problem document: RFC 9457's members plus ``errors: [{field, message}]`` and ``more``."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    body["detail"] = detail
    if errors is not None:
        body["errors"] = [{"field": p.loc, "message": p.message} for p in errors]
    body.update(more)
    return body


class IntakeError(ElicitBotError):
    status_code = 400


class PayloadRejected(IntakeError):  # noqa: N818 - named for the HTTP outcome
    status_code = 400

    def __init__(self, problems: list[FieldProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))

    def prefixed(self, prefix: str) -> PayloadRejected:
        """The same problems with ``prefix`` before each location (``[2].`` for a batch index)."""
        return PayloadRejected([FieldProblem(f"{prefix}{p.loc}", p.message) for p in self.problems])


class UnsupportedMediaType(IntakeError):  # noqa: N818 - named for the HTTP outcome
    status_code = 415


class PayloadTooLarge(IntakeError):  # noqa: N818 - named for the HTTP outcome
    status_code = 413


class DeliveryError(ElicitBotError):
    pass


class TransientDeliveryError(DeliveryError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class PermanentDeliveryError(DeliveryError):
    """Not retried. For a write-back: the upstream refused the answer. ``reopen`` (the default):
    the question is still open there, so elicitbot reopens it for another answer; False: it is
    closed there too (resolved, gone), so the elicitation is marked failed instead."""

    def __init__(self, message: str, *, reopen: bool = True) -> None:
        self.reopen = reopen
        super().__init__(message)


class StoreError(ElicitBotError):
    pass

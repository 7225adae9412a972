"""``application/problem+json`` responses naming each bad field (every route of the one app)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from bot.domain.errors import PROBLEM, FieldProblem, problem_body


def problem(
    status: int, title: str, detail: str, errors: list[FieldProblem] | None = None, **more: Any
) -> JSONResponse:
    """:func:`bot.domain.errors.problem_body` as a response with its status and media type."""
    body = problem_body(status, title, detail, errors, **more)
    return JSONResponse(body, status_code=status, media_type=PROBLEM)

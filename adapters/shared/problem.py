"""``application/problem+json`` responses naming each bad field (every route of the one app)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from bot.domain.errors import FieldProblem

PROBLEM = "application/problem+json"


def problem(
    status: int, title: str, detail: str, errors: list[FieldProblem] | None = None, **more: Any
) -> JSONResponse:
    """RFC 9457 shape plus ``errors: [{field, message}]`` and any ``more`` members."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    body["detail"] = detail
    if errors is not None:
        body["errors"] = [{"field": p.loc, "message": p.message} for p in errors]
    body.update(more)
    return JSONResponse(body, status_code=status, media_type=PROBLEM)

"""Request bodies as strict JSON: UTF-8 only, no ``NaN``/``Infinity``, bounded nesting, and no
lone UTF-16 surrogate escape (valid JSON, but no Unicode text: nothing downstream could encode it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from adapters.shared.problem import problem
from bot.domain.errors import FieldProblem, PayloadRejected

T = TypeVar("T")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""Valid UTF-8 holds no surrogate, so only such an escape makes one: without it, no walk."""


def load_json(raw: bytes) -> Any:
    document, found = read_strict(raw, "body")
    if found is not None:
        raise PayloadRejected([found])
    return document


def read_strict(raw: bytes, loc: str) -> tuple[Any, FieldProblem | None]:
    """The document, or the problem (to report it with others)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, FieldProblem(loc, "is not valid UTF-8")
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        return None, FieldProblem(loc, "is nested too deeply")
    except ValueError as exc:
        return None, FieldProblem(loc, f"is not valid JSON ({exc})")
    if _SURROGATE_ESCAPE.search(text) is not None and _has_lone_surrogate(document):
        return None, FieldProblem(loc, "holds a lone UTF-16 surrogate escape: not valid Unicode")
    return document, None


async def read_json(request: Request, parser: Callable[[Any], T]) -> T | JSONResponse:
    """``parser`` applied to the JSON body, or the problem to send (415, or 400 naming each
    bad field)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        return problem(
            415, "Unsupported Media Type", f"The body must be application/json, not {content_type}."
        )
    try:
        return parser(load_json(await request.body()))
    except PayloadRejected as exc:
        return rejected(exc)


def rejected(exc: PayloadRejected) -> JSONResponse:
    return problem(400, "Invalid request", str(exc), exc.problems)


def _has_lone_surrogate(document: Any) -> bool:
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
    return False


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")

"""Request bodies as strict JSON: the reader every JSON intake uses, and the route helper.

Strict means: UTF-8 only, no ``NaN``/``Infinity``, a bounded nesting depth, and no lone UTF-16
surrogate escape (``"\\ud800"`` is valid JSON but no Unicode text: nothing downstream could
encode it). Each refusal is a ``PayloadRejected`` naming where the body went wrong.
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
"""Where a surrogate can come from: valid UTF-8 holds none, so only a ``\\uD800``-``\\uDFFF``
escape makes one. A text without such an escape needs no walk of the parsed document."""


def load_json(raw: bytes, loc: str = "body") -> Any:
    """A request body as strict JSON, or PayloadRejected naming ``loc``: not UTF-8, not JSON,
    NaN/Infinity, nested too deeply, or a lone UTF-16 surrogate escape."""
    document, found = read_strict(raw, loc)
    if found is not None:
        raise PayloadRejected([found])
    return document


def read_strict(raw: bytes, loc: str) -> tuple[Any, FieldProblem | None]:
    """:func:`load_json` returning the problem instead of raising it (to report it with others)."""
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
    """``parser`` applied to the JSON body, or the problem to send: 415 for a declared non-JSON
    content type, 400 (each bad field named) for a body that is not JSON or that ``parser``
    rejects."""
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
    """The 400 for a body that broke the rules, naming each field."""
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

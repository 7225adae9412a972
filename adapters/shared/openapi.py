"""What the OpenAPI document says about every route, declared with FastAPI's own ``responses=``,
``openapi_extra=`` and security dependencies (never by rewriting the generated document).
:func:`problems` adds ``default`` too, which also stops FastAPI inventing its 422 answer (a bad
parameter is a 400 here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.params import Depends as DependsParam
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict

from bot.domain.bounds import ID_MAX
from bot.domain.errors import PROBLEM as PROBLEM  # noqa: PLC0414 - re-exported

FORM = "application/x-www-form-urlencoded"


class FieldError(BaseModel):
    field: str
    """Where: ``ask.body``, ``destinations[1]``, ``[2].data.options``, a query parameter."""
    message: str


class Problem(BaseModel):
    """``application/problem+json`` (RFC 9457) with ``errors`` naming each bad field."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


def inline(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema with its ``$defs`` put in place (and ``$schema`` left out): inside the
    OpenAPI document a ``#/$defs/…`` reference would point at the document's root, not into
    this schema. The schema must not be recursive."""
    schema = {k: v for k, v in schema.items() if k != "$schema"}
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


PROBLEM_SCHEMA: dict[str, Any] = inline(Problem.model_json_schema())

_NOT_IN_ID = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
# Lone surrogates (U+D800 to U+DFFF), refused too, are left out of the patterns: UTF-8 cannot
# carry them (only a JSON ``\ud800`` escape can), and a range of them makes the generators
# drop the whole pattern.
_ID_PATTERN = rf"^[^\s{_NOT_IN_ID}](?:[^{_NOT_IN_ID}]*[^\s{_NOT_IN_ID}])?$"


ID_TAIL = rf"[^{_NOT_IN_ID}]*[^\s{_NOT_IN_ID}]"
"""One or more identifier characters ending in no whitespace: what follows a fixed prefix."""


def id_schema(
    max_length: int = ID_MAX, *, pattern: str = _ID_PATTERN, required: bool = True
) -> dict[str, Any]:
    """An identifier as ``bot.domain.bounds.id_problem`` takes it (``pattern`` may narrow it,
    e.g. with :data:`ID_TAIL` after a prefix); ``required=False``: the empty string too."""
    if not required:
        inner = pattern.removeprefix("^").removesuffix("$")
        return {"type": "string", "maxLength": max_length, "pattern": f"^(?:{inner})?$"}
    return {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": pattern}


def bounded(schema: dict[str, Any], ids: Mapping[str, int]) -> dict[str, Any]:
    """``schema`` with the intake bounds: each property in ``ids`` an optional identifier of at
    most that many characters, every other string a free text. Changed in place; returned."""

    def bound(name: str, node: Any) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "string" and "const" not in node and "enum" not in node:
            if name in ids:
                node.update(id_schema(ids[name], required=False))
            elif "format" not in node:
                node.update(text_schema())
        for branch in [*node.get("anyOf", []), *node.get("oneOf", [])]:
            bound(name, branch)
        for key, child in (node.get("properties") or {}).items():
            bound(key, child)
        bound(name, node.get("items"))

    bound("", schema)
    return schema


def text_schema() -> dict[str, Any]:
    """A free text as ``bot.domain.bounds.text_problem`` takes it: no NUL (no lone surrogate)."""
    return {"type": "string", "pattern": r"^[^\x00]*$"}


_JSON_WITHOUT_NUL_NAME = "JsonWithoutNul"
JSON_WITHOUT_NUL: dict[str, Any] = {"$ref": f"#/components/schemas/{_JSON_WITHOUT_NUL_NAME}"}
"""Any JSON value with no NUL in a string or a key at any depth: an open object the intake keeps
(``bot.domain.bounds``: ``extra`` is checked so, and no store can hold NUL)."""
COMPONENTS: Mapping[str, dict[str, Any]] = {
    _JSON_WITHOUT_NUL_NAME: {
        "description": "Any JSON value without NUL (U+0000) in a string or a key, at any depth",
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            text_schema(),
            {"type": "array", "items": JSON_WITHOUT_NUL},
            {
                "type": "object",
                "propertyNames": text_schema(),
                "additionalProperties": JSON_WITHOUT_NUL,
            },
        ],
    }
}


def with_components(app: FastAPI) -> FastAPI:
    """FastAPI lists only the models its routes declare: add :data:`COMPONENTS`."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas.update({name: dict(schema) for name, schema in COMPONENTS.items()})
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]
    return app


DESCRIPTIONS: Mapping[int | str, str] = {
    303: "See other: back to the page (a browser's form post)",
    400: "Invalid request: `errors` names each bad field or parameter",
    401: "The intake bearer token is missing or wrong",
    403: "Refused: not allowed for this caller",
    404: "No such resource",
    405: "Not a method this resource takes: `Allow` names those it does",
    409: "Conflict with the resource's current state",
    413: "The body is over 1 MiB",
    415: "The body's content type is not one this route takes",
    422: "Well formed, but this deployment cannot do it (`errors` names each field and why)",
    502: "The chat platforms refused every destination (`errors` names each and why)",
    503: "Shutting down, or not ready: send it again shortly",
    "default": "Unexpected error: a problem document with a correlation id",
}


def json_response(description: str) -> dict[str, Any]:
    """A ``responses=`` entry for a JSON body the route writes itself."""
    return {"description": description, "content": {"application/json": {"schema": {}}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    keys: list[int | str] = [*statuses, "default"]
    return {
        key: {"description": DESCRIPTIONS[key], "content": {PROBLEM: {"schema": PROBLEM_SCHEMA}}}
        for key in keys
    }


BEARER = HTTPBearer(
    scheme_name="intakeToken",
    description="`Authorization: Bearer <token>`: required on intake and read routes when "
    "`server.intake_token_env` is set (always in production configs).",
    auto_error=False,  # the route answers the 401 itself, as problem+json
)
SECURED: list[DependsParam] = [Depends(BEARER)]
"""``dependencies=`` of a route that checks the intake token: the document names the scheme."""


def request_body(
    schema: Mapping[str, Any],
    media_types: Iterable[str] = ("application/json",),
    *,
    examples: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``openapi_extra`` declaring the body the route reads itself (from ``Request``)."""
    shown = {"examples": {k: {"value": v} for k, v in examples.items()}} if examples else {}
    content = {media: {"schema": dict(schema), **shown} for media in media_types}
    return {"requestBody": {"required": True, "content": content}}

"""What the OpenAPI document says about every route, declared with FastAPI's own ``responses=``,
``openapi_extra=`` and security dependencies (never by rewriting the generated document).

- :data:`PROBLEM_SCHEMA`: the one ``application/problem+json`` shape every refusal has (RFC 9457's
  members plus ``errors: [{field, message}]``, and whatever a route adds beside them: ``id``,
  ``elicitation``, ``correlationId``), built from the :class:`Problem` model;
- :func:`problems`: the ``responses=`` entries for the statuses a route answers besides its
  success, each with that schema, and ``default`` (an unexpected 500 has the same shape). A
  ``default`` also stops FastAPI from inventing its 422 "validation error" answer, which this app
  never gives for a bad parameter (that is a 400, see ``bot.app.http``);
- :data:`BEARER`: the intake bearer token as an HTTP ``bearer`` security scheme, for the routes
  that check it (when ``server.intake_token_env`` is set);
- :func:`request_body`: a body's schema under each media type the route takes, with examples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Depends
from fastapi.params import Depends as DependsParam
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict

from bot.domain.errors import PROBLEM

__all__ = [
    "BEARER",
    "FORM",
    "PROBLEM",
    "PROBLEM_SCHEMA",
    "SECURED",
    "Problem",
    "inline",
    "problems",
    "request_body",
]

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

DESCRIPTIONS: Mapping[int | str, str] = {
    303: "See other: back to the page (a browser's form post)",
    400: "Invalid request: `errors` names each bad field or parameter",
    401: "The intake bearer token is missing or wrong",
    403: "Refused: not allowed for this caller",
    404: "No such resource",
    409: "Conflict with the resource's current state",
    413: "The body is over 1 MiB",
    415: "The body's content type is not one this route takes",
    422: "Well formed, but this deployment cannot do it (`errors` names each field and why)",
    502: "The chat platforms refused every destination (`errors` names each and why)",
    503: "Shutting down, or not ready: send it again shortly",
    "default": "Unexpected error: a problem document with a correlation id",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for the refusals a route can answer, each an ``application/problem+json``
    document, and ``default``."""
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
    required: bool = True,
) -> dict[str, Any]:
    """``openapi_extra`` declaring the body the route reads itself (from ``Request``)."""
    content: dict[str, Any] = {}
    for media in media_types:
        entry: dict[str, Any] = {"schema": dict(schema)}
        if examples:
            entry["examples"] = {name: {"value": value} for name, value in examples.items()}
        content[media] = entry
    return {"requestBody": {"required": required, "content": content}}

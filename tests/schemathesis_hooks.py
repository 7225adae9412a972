"""What the OpenAPI document cannot state, made true of a schema-valid request before
schemathesis sends it, so that ``positive_data_acceptance`` ("a schema-valid request is
accepted") judges the rest of the request. ``schemathesis.toml`` (the repo root) loads this
file for ``schemathesis run`` (test_openapi_cli.py runs that command; docs/openapi.md).

Each rule below is one the service enforces because a spec requires it, and that neither JSON
Schema 2020-12 nor OpenAPI 3.1 can write; everything they can write is in the document instead:

- ``POST /v1/deliveries``: ``ask.expires_at`` within 90 days of now (spec 001, "explicit expiry
  must be within ninety days"), a bound relative to the clock. A later one is moved to a day
  from now (the "no deadline" ``9999-01-01T00:00:00Z`` and past dates are left alone).
- ``POST /v1/events`` in binary mode (``application/json``: the body is the event's data): the
  ``ce-*`` headers carry the envelope, so ``ce-specversion``, ``ce-id``, ``ce-source`` and
  ``ce-type`` are required there and every ``ce-*`` header is the attribute the structured
  envelope's schema describes (CloudEvents HTTP binding). OpenAPI can require or constrain a
  header of an operation only, not of one of its media types, and structured and batch mode
  ignore these headers, so the document declares them optional strings. Each header that
  breaks its attribute's schema is dropped, and a required one missing then takes the
  document's structured example's value.
- ``approvalRequestId`` equal to ``elicitationId`` (spec 000): equality of two fields.
- Distinct by one property (``uniqueItems`` compares whole items): option ids (specs 000 and
  004), question ids and each question's option labels (004). A repeat gets its index appended.
- handup's ``recommended`` indexing its question's options (004): a bound that is another
  field's length. One past the end is dropped (null).
- A date-time's instant within 0001-01-01 to 9999-12-31 UTC, what the store can hold
  (``adapters.shared.timestamps``): ``format: date-time`` is the RFC 3339 syntax, and
  ``0001-01-01T01:00:00+07:57`` is one, an instant before the year 1. Such an offset becomes Z
  (the same fields, in range).
- handup's ``timeout`` at most one year and not zero (004): the document's pattern writes the
  grammar, not the sum of its spans (nor a number past a Rust ``u64``). One out of bounds
  becomes ``1h``; one that breaks the grammar is left for the check to find.

Only what was generated valid changes (the body of a case whose body is positive, the headers
of one whose headers are): a part made invalid must reach the service as broken as it was made.

One failure is the tool's own and is dropped (:func:`filter_failure`): after a 4xx whose
problem document says a field "must not be empty", the tool's error feedback adds that field to
the body's schema as a required non-blank string, and then reports a request without it, or
with it empty, as a schema-violating one accepted (ST201), though the document has no such rule
(``subject``, a CloudEvent attribute, named so in binary mode where it is the ``ce-subject``
header). Only an ST201 whose broken rule the document does not have is dropped.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import schemathesis
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.meta import CoveragePhaseData

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # loaded by path from the schemathesis CLI
    sys.path.insert(0, str(_ROOT))

from adapters.shared.timestamps import parse_rfc3339  # noqa: E402
from adapters.sources.engine.parse import MAX_EXPIRY, NO_DEADLINE  # noqa: E402
from adapters.sources.handup.duration import (  # noqa: E402
    NANOS_PER_SECOND,
    YEAR_SECONDS,
    DurationError,
    parse_nanos,
)
from bot.domain.bounds import ID_MAX  # noqa: E402

_WITHIN_A_YEAR = "1h"


def made_sayable(path: str, media_type: str | None, body: Any) -> Any:
    """The schema-valid body of a case on ``path``, changed in place where it breaks a rule above,
    and returned."""
    body = _instants_in_range(body)
    if path == "/v1/deliveries" and isinstance(body, dict):
        _expiry_within_window(body.get("ask"))
    elif path == "/v1/events":
        if media_type == "application/json":
            _pending_data(body)
        elif isinstance(body, list):
            for event in body:
                if isinstance(event, dict):
                    _pending_data(event.get("data"))
        elif isinstance(body, dict):
            _pending_data(body.get("data"))
    elif path == "/v1/handup/requests" and isinstance(body, dict):
        _handup_request(body)
    return body


def binary_envelope(content: dict[str, Any], headers: dict[str, Any]) -> dict[str, Any]:
    """``headers`` of a binary-mode event whose ``ce-*`` headers were generated valid, each
    true of its attribute's schema in ``content`` (``POST /v1/events``'s request media types,
    as the document writes them)."""
    structured = content["application/cloudevents+json"]
    envelope = structured["schema"]
    example = next(iter(structured["examples"].values()))["value"]
    fixed = {
        name: value
        for name, value in headers.items()
        if not name.lower().startswith("ce-")
        or _attribute_valid(envelope, name.lower().removeprefix("ce-"), value)
    }
    present = {name.lower() for name in fixed}
    for attribute in envelope["required"]:
        if attribute != "data" and f"ce-{attribute}" not in present:
            fixed[f"ce-{attribute}"] = str(example[attribute])
    return fixed


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    meta = case.meta
    if meta is None or case.operation.method.upper() != "POST":
        return case
    if not meta.is_negative_at(ParameterLocation.BODY):
        case.body = made_sayable(case.operation.path, case.media_type, case.body)
    if (
        case.operation.path == "/v1/events"
        and case.media_type == "application/json"
        and not meta.is_negative_at(ParameterLocation.HEADER)
    ):
        content = case.operation.definition.raw["requestBody"]["content"]
        case.headers = binary_envelope(content, dict(case.headers or {}))
    return case


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """False for the one failure the tool invents (see above): kept are all others."""
    return not _required_by_the_tool_alone(failure, case)


def _required_by_the_tool_alone(failure: Any, case: Any) -> bool:
    """An ST201 of the coverage phase whose broken rule is not in the document: a keyword its
    pointer does not reach, or a ``required`` list without the property it names."""
    data = case.meta.phase.data if case.meta is not None else None
    if getattr(failure, "code", None) != "ST201" or not isinstance(data, CoveragePhaseData):
        return False
    if data.parameter_location != ParameterLocation.BODY or not data.location:
        return False
    content = case.operation.definition.raw.get("requestBody", {}).get("content", {})
    node: Any = content.get(case.media_type, {}).get("schema")
    for step in data.location.strip("/").split("/"):  # a JSON pointer into the body's schema
        if isinstance(node, dict) and "$ref" in node:
            return False  # not followed: kept
        if isinstance(node, list) and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        elif isinstance(node, dict) and step.replace("~1", "/").replace("~0", "~") in node:
            node = node[step.replace("~1", "/").replace("~0", "~")]
        else:
            return True  # the rule is the tool's: the document has nothing there
    missing = data.description.removeprefix("Missing required property: ")
    return isinstance(node, list) and missing != data.description and missing not in node


# --- the rules ---------------------------------------------------------------------------------


def _expiry_within_window(ask: Any) -> None:
    if not isinstance(ask, dict) or not isinstance(ask.get("expires_at"), str):
        return
    try:
        when = parse_rfc3339(ask["expires_at"])
    except ValueError:
        return  # not a date-time: the check is to judge it
    bound = isinstance(ask.get("action"), dict)  # a bound action approval has a deadline
    if when == NO_DEADLINE and not bound:
        return
    now = datetime.now(UTC)
    if when > now + MAX_EXPIRY:
        ask["expires_at"] = (now + timedelta(days=1)).isoformat()


def _attribute_valid(envelope: dict[str, Any], attribute: str, value: Any) -> bool:
    schema = envelope["properties"].get(attribute, envelope.get("additionalProperties", {}))
    if not jsonschema.Draft202012Validator(schema).is_valid(value):
        return False
    if schema.get("format") == "date-time":  # the format too (jsonschema leaves it out)
        try:
            parse_rfc3339(value)
        except ValueError:
            return False
    return True


def _pending_data(data: Any) -> None:
    if not isinstance(data, dict):
        return
    _distinct(data.get("options"), "id")
    if isinstance(data.get("approvalRequestId"), str) and isinstance(
        data.get("elicitationId"), str
    ):
        data["approvalRequestId"] = data["elicitationId"]


def _handup_request(request: dict[str, Any]) -> None:
    _distinct(request.get("options"), "id")
    request_input = request.get("input")
    questions = request_input.get("questions") if isinstance(request_input, dict) else None
    _distinct(questions, "id")
    for question in questions if isinstance(questions, list) else []:
        if not isinstance(question, dict):
            continue
        options = question.get("options")
        _distinct(options, "label")
        recommended = question.get("recommended")
        count = len(options) if isinstance(options, list) else 0
        if isinstance(recommended, int | float) and recommended >= count:
            question["recommended"] = None
    timeout = request.get("timeout")
    if isinstance(timeout, str) and timeout.strip(" \t\n\r").lower() != "none":
        try:
            nanos = parse_nanos(timeout)
        except DurationError as exc:
            if "too large" not in str(exc):  # a number past a u64: far over a year
                return  # breaks the grammar the document writes: the check is to judge it
            nanos = -1
        if not 0 < nanos <= YEAR_SECONDS * NANOS_PER_SECOND:
            request["timeout"] = _WITHIN_A_YEAR


def _instants_in_range(value: Any) -> Any:
    if isinstance(value, list):
        return [_instants_in_range(item) for item in value]
    if isinstance(value, dict):
        return {key: _instants_in_range(item) for key, item in value.items()}
    if not isinstance(value, str) or len(value) < len("0001-01-01T00:00:00Z"):
        return value
    try:
        parse_rfc3339(value)
    except ValueError as exc:
        if "out of range" not in str(exc):
            return value
        in_utc = value[:19] + "Z"
        try:
            parse_rfc3339(in_utc)
        except ValueError:
            return value  # another part out of range: the check is to judge it
        return in_utc
    return value


def _distinct(items: Any, key: str) -> None:
    """Each object's ``key`` made distinct from the ones before it (its index appended)."""
    if not isinstance(items, list):
        return
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get(key), str):
            continue
        value, suffix = item[key], index
        while value in seen:  # a suffix in place of the tail, so the length bound holds
            value = item[key][: ID_MAX - len(str(suffix))] + str(suffix)
            suffix += len(items)
        item[key] = value
        seen.add(value)

"""CloudEvents 1.0 over HTTP (structured, binary, batch) and NATS, parsed strictly. Pure: no I/O.

Not the ``cloudevents`` SDK, which invents missing ids, accepts empty or integer ids and picks the
mode from stray ``ce-`` headers: an event without an id cannot be deduplicated, so it is refused,
and the mode comes from ``Content-Type`` alone.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from adapters.shared.jsonbody import load_json, read_strict
from adapters.shared.timestamps import parse_rfc3339
from bot.domain.errors import (
    FieldProblem,
    PayloadRejected,
    PayloadTooLarge,
    UnsupportedMediaType,
)

SPECVERSION = "1.0"
MAX_BODY_BYTES = 1024 * 1024  # a body over 1 MiB is refused (413)

STRUCTURED = "application/cloudevents"
BATCH = "application/cloudevents-batch"
_STRUCTURED_TYPES = frozenset({STRUCTURED, STRUCTURED + "+json"})
_BATCH_TYPES = frozenset({BATCH, BATCH + "+json"})
_PREFIX = "ce-"

_REQUIRED = ("id", "source", "specversion", "type")
_OPTIONAL = ("subject", "datacontenttype", "dataschema")
_CONTEXT = frozenset({*_REQUIRED, *_OPTIONAL, "time"})
_NAME = re.compile(r"[a-z0-9]+")
_QUOTED_PAIR = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class CloudEvent:
    """One validated event. ``data`` is the parsed JSON value (None when the event has none)."""

    id: str
    source: str
    specversion: str
    type: str
    subject: str | None
    time: datetime | None
    datacontenttype: str | None
    dataschema: str | None
    data: Any
    extensions: dict[str, str]


def parse_http(
    headers: Mapping[str, str], body: bytes, *, max_bytes: int = MAX_BODY_BYTES
) -> tuple[list[CloudEvent], bool]:
    """Events of one HTTP request and whether it was a batch; the mode comes from Content-Type."""
    _check_size(body, max_bytes)
    content_type, media, ce_headers, problems = _split_headers(headers)
    if media is not None and media.startswith(BATCH):
        return _batch(media, body), True
    if media is not None and media.startswith(STRUCTURED):
        return [_structured(media, body)], False
    if content_type is None and not ce_headers:
        raise UnsupportedMediaType("no Content-Type and no ce- headers: not a CloudEvent")
    return [_binary(content_type, ce_headers, body, problems)], False


def parse_nats(
    headers: Mapping[str, str] | None, body: bytes, *, max_bytes: int = MAX_BODY_BYTES
) -> CloudEvent:
    """One event of a NATS message: binary when ``ce-`` headers are present, else structured."""
    _check_size(body, max_bytes)
    content_type, media, ce_headers, problems = _split_headers(headers or {})
    if media is not None and media.startswith(BATCH):
        raise UnsupportedMediaType("a NATS message carries one event, not a batch")
    if media is not None and media.startswith(STRUCTURED):
        return _structured(media, body)
    if not ce_headers:  # NATS publishers often send the JSON event with no headers at all
        return _structured(STRUCTURED, body)
    return _binary(content_type, ce_headers, body, problems)


def event_from_attributes(
    attributes: Mapping[str, Any], data: Any, problems: list[FieldProblem] | None = None
) -> CloudEvent:
    """Validate context attributes (JSON values; null = absent) and build the event, reporting
    ``problems`` already found (e.g. in the data) together with the attributes'."""
    found = list(problems or [])
    values = {name: value for name, value in attributes.items() if value is not None}
    strings: dict[str, str | None] = {
        name: _string_attribute(name, values.get(name), name in _REQUIRED, found)
        for name in (*_REQUIRED, *_OPTIONAL)
    }
    if strings["specversion"] is not None and strings["specversion"] != SPECVERSION:
        found.append(FieldProblem("specversion", f'must be "{SPECVERSION}"'))
        strings["specversion"] = None
    media = strings["datacontenttype"]
    if media is not None and not is_json_media_type(media):
        found.append(
            FieldProblem(
                "datacontenttype", "must be a JSON media type (application/json or type/sub+json)"
            )
        )
    time = _time_attribute(values.get("time"), found)
    extensions = _extensions(values, found)
    if found:
        raise PayloadRejected(found)
    return CloudEvent(
        id=_present(strings["id"]),
        source=_present(strings["source"]),
        specversion=_present(strings["specversion"]),
        type=_present(strings["type"]),
        subject=strings["subject"],
        time=time,
        datacontenttype=strings["datacontenttype"],
        dataschema=strings["dataschema"],
        data=data,
        extensions=extensions,
    )


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` or any ``type/subtype+json``, parameters allowed."""
    media = _media_type(content_type) or ""
    return media == "application/json" or ("/" in media and media.endswith("+json"))


def _structured(media: str, body: bytes) -> CloudEvent:
    if media not in _STRUCTURED_TYPES:
        raise UnsupportedMediaType(
            f"{media} is not a supported event format: use {STRUCTURED}+json"
        )
    document = load_json(body)
    if not isinstance(document, dict):
        raise PayloadRejected([FieldProblem("body", "must be a JSON object (one CloudEvent)")])
    return _from_json_object(document)


def _batch(media: str, body: bytes) -> list[CloudEvent]:
    if media not in _BATCH_TYPES:
        raise UnsupportedMediaType(f"{media} is not a supported batch format: use {BATCH}+json")
    document = load_json(body)
    if not isinstance(document, list):
        raise PayloadRejected([FieldProblem("body", "must be a JSON array of CloudEvents")])
    if not document:
        raise PayloadRejected([FieldProblem("body", "a batch must hold at least one event")])
    events: list[CloudEvent] = []
    problems: list[FieldProblem] = []
    for index, item in enumerate(document):
        if not isinstance(item, dict):
            problems.append(FieldProblem(f"[{index}]", "must be a JSON object (one CloudEvent)"))
            continue
        try:
            events.append(_from_json_object(item))
        except PayloadRejected as exc:
            problems.extend(exc.prefixed(f"[{index}].").problems)
    if problems:
        raise PayloadRejected(problems)
    return events


def _binary(
    content_type: str | None,
    ce_headers: Mapping[str, str],
    body: bytes,
    problems: list[FieldProblem],
) -> CloudEvent:
    if content_type is not None and not is_json_media_type(content_type):
        raise UnsupportedMediaType(f"event data must be JSON, not {content_type}")
    found = list(problems)
    if "datacontenttype" in ce_headers:
        found.append(FieldProblem("datacontenttype", "must be sent as Content-Type instead"))
    if "data" in ce_headers:
        found.append(FieldProblem("data", "goes in the body, not in a ce-data header"))
    attributes: dict[str, Any] = {
        name: value for name, value in ce_headers.items() if name not in ("datacontenttype", "data")
    }
    attributes["datacontenttype"] = content_type
    data: Any = None
    if body.strip():
        data, problem = read_strict(body, "data")
        if problem is not None:
            found.append(problem)
    return event_from_attributes(attributes, data, found)


def _from_json_object(document: Mapping[str, Any]) -> CloudEvent:
    """A structured-mode event (JSON format): attributes are members, beside data/data_base64."""
    problems: list[FieldProblem] = []
    data: Any = document.get("data")
    encoded = document.get("data_base64")
    if encoded is not None:
        if data is not None:
            problems.append(FieldProblem("data_base64", "must not be present together with data"))
        elif not isinstance(encoded, str):
            problems.append(FieldProblem("data_base64", "must be a string"))
        else:
            data = _decode_base64_json(encoded, problems)
    attributes = {k: v for k, v in document.items() if k not in ("data", "data_base64")}
    return event_from_attributes(attributes, data, problems)


def _check_size(body: bytes, max_bytes: int) -> None:
    if len(body) > max_bytes:
        raise PayloadTooLarge(f"body is {len(body)} bytes; the limit is {max_bytes}")


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower()


def _split_headers(
    headers: Mapping[str, str],
) -> tuple[str | None, str | None, dict[str, str], list[FieldProblem]]:
    """Content-Type and its media type, decoded ``ce-`` attributes (by name) and their problems."""
    fields: dict[str, str] = {}
    ce_headers: dict[str, str] = {}
    problems: list[FieldProblem] = []
    for raw_name, raw_value in headers.items():
        name = raw_name.strip().lower()
        if not name.startswith(_PREFIX):
            fields.setdefault(name, raw_value.strip())
            continue
        attribute = name[len(_PREFIX) :]
        try:
            value = _decode_header_value(raw_value)
        except UnicodeDecodeError:
            problems.append(FieldProblem(attribute, "is not valid percent-encoded UTF-8"))
            continue
        if ce_headers.setdefault(attribute, value) != value:
            problems.append(FieldProblem(attribute, f"{name} is given twice with different values"))
    content_type = fields.get("content-type")
    return content_type, _media_type(content_type), ce_headers, problems


def _decode_header_value(raw: str) -> str:
    """A ``ce-`` header value: a quoted-string is unquoted, then percent-decoded exactly once."""
    value = raw.strip(" \t")
    if len(value) >= 2 and value[0] == value[-1] == '"':  # noqa: PLR2004 - the two quotes
        value = _QUOTED_PAIR.sub(r"\1", value[1:-1])
    return unquote(value, encoding="utf-8", errors="strict")


def _decode_base64_json(encoded: str, problems: list[FieldProblem]) -> Any:
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        problems.append(FieldProblem("data_base64", "is not valid base64"))
        return None
    data, problem = read_strict(raw, "data")
    if problem is not None:
        problems.append(problem)
    return data


def _string_attribute(
    name: str, value: Any, required: bool, problems: list[FieldProblem]
) -> str | None:
    if value is None:
        if required:
            problems.append(FieldProblem(name, "is required"))
        return None
    if not isinstance(value, str):
        problems.append(FieldProblem(name, "must be a string"))
        return None
    if not value:
        problems.append(FieldProblem(name, "must not be empty"))
        return None
    return value


def _time_attribute(value: Any, problems: list[FieldProblem]) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        problems.append(FieldProblem("time", "must be a string"))
        return None
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        problems.append(FieldProblem("time", str(exc)))
        return None


def _extensions(values: Mapping[str, Any], problems: list[FieldProblem]) -> dict[str, str]:
    """Extension attributes as canonical strings (CloudEvents type system: string/int/bool)."""
    extensions: dict[str, str] = {}
    for name, value in values.items():
        if name in _CONTEXT:
            continue
        if not _NAME.fullmatch(name):
            problems.append(FieldProblem(name, "is not a valid attribute name (a-z and 0-9 only)"))
        elif isinstance(value, bool):
            extensions[name] = "true" if value else "false"
        elif isinstance(value, int | str):
            extensions[name] = str(value)
        else:
            problems.append(FieldProblem(name, "must be a string, an integer or a boolean"))
    return extensions


def _present(value: str | None) -> str:
    """A required attribute after validation found no problem with it."""
    if value is None:  # pragma: no cover - ruled out by the problems check
        raise AssertionError
    return value

"""CloudEvents 1.0 parsing: HTTP structured/binary/batch modes, NATS, attribute rules."""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.shared.cloudevents import (
    CloudEvent,
    is_json_media_type,
    parse_http,
    parse_nats,
)
from adapters.shared.timestamps import parse_rfc3339
from bot.domain.errors import (
    IntakeError,
    PayloadRejected,
    PayloadTooLarge,
    UnsupportedMediaType,
)

STRUCTURED = {"Content-Type": "application/cloudevents+json; charset=utf-8"}
BATCH = {"Content-Type": "application/cloudevents-batch+json"}
DATA = {"hello": "world", "n": [1, 2]}
ABSENT = object()


def event(**changes: Any) -> dict[str, Any]:
    """A valid structured event; a change to ``ABSENT`` removes the attribute."""
    document: dict[str, Any] = {
        "specversion": "1.0",
        "id": "evt-1",
        "source": "https://superpipeline.example.org/relay",
        "type": "com.example.thing.happened",
        "subject": "evt.acme.thing",
        "time": "2026-11-10T09:30:00.000Z",
        "datacontenttype": "application/json",
        "data": DATA,
    }
    for name, value in changes.items():
        if value is ABSENT:
            document.pop(name, None)
        else:
            document[name] = value
    return document


def binary_headers(**changes: str | None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "ce-specversion": "1.0",
        "ce-id": "evt-1",
        "ce-source": "/relay",
        "ce-type": "com.example.thing.happened",
    }
    for name, value in changes.items():
        key = name.replace("_", "-")
        if value is None:
            headers.pop(key, None)
        else:
            headers[key] = value
    return headers


def encode(document: Any) -> bytes:
    return json.dumps(document).encode()


def locs(exc: pytest.ExceptionInfo[PayloadRejected]) -> list[str]:
    return [p.loc for p in exc.value.problems]


def one_structured(document: Any) -> CloudEvent:
    events, is_batch = parse_http(STRUCTURED, encode(document))
    assert not is_batch
    assert len(events) == 1
    return events[0]


# --- structured mode ---------------------------------------------------------------------------


def test_structured_event_is_parsed() -> None:
    ce = one_structured(event(traceparent="00-abc-def-01", retries=3, sampled=True))
    assert ce.id == "evt-1"
    assert ce.source == "https://superpipeline.example.org/relay"
    assert ce.specversion == "1.0"
    assert ce.type == "com.example.thing.happened"
    assert ce.subject == "evt.acme.thing"
    assert ce.time == datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
    assert ce.datacontenttype == "application/json"
    assert ce.dataschema is None
    assert ce.data == DATA
    assert ce.extensions == {"traceparent": "00-abc-def-01", "retries": "3", "sampled": "true"}


def test_structured_mode_ignores_stray_ce_headers() -> None:
    headers = {**STRUCTURED, "ce-traceparent": "00-abc-def-01", "ce-id": "from-a-header"}
    events, _ = parse_http(headers, encode(event()))
    assert events[0].id == "evt-1"
    assert "traceparent" not in events[0].extensions


def test_header_names_are_case_insensitive() -> None:
    events, _ = parse_http({"CONTENT-TYPE": "Application/CloudEvents+JSON"}, encode(event()))
    assert events[0].id == "evt-1"


@pytest.mark.parametrize(
    ("changes", "loc", "message"),
    [
        pytest.param({"id": ABSENT}, "id", "is required", id="missing id"),
        pytest.param({"id": ""}, "id", "must not be empty", id="empty id"),
        pytest.param({"id": 42}, "id", "must be a string", id="integer id"),
        pytest.param({"id": None}, "id", "is required", id="null id"),
        pytest.param({"specversion": ABSENT}, "specversion", "is required", id="no specversion"),
        pytest.param({"specversion": "2.0"}, "specversion", 'must be "1.0"', id="specversion 2.0"),
        pytest.param({"specversion": 1.0}, "specversion", "must be a string", id="number 1.0"),
        pytest.param({"source": ABSENT}, "source", "is required", id="missing source"),
        pytest.param({"type": ABSENT}, "type", "is required", id="missing type"),
        pytest.param({"type": ""}, "type", "must not be empty", id="empty type"),
        pytest.param({"time": "yesterday"}, "time", "RFC 3339", id="time yesterday"),
        pytest.param({"time": "2026-11-10"}, "time", "RFC 3339", id="date only"),
        pytest.param({"time": 1700000000}, "time", "must be a string", id="epoch time"),
        pytest.param({"subject": 5}, "subject", "must be a string", id="subject number"),
        pytest.param({"subject": ""}, "subject", "must not be empty", id="empty subject"),
        pytest.param({"dataschema": []}, "dataschema", "must be a string", id="dataschema list"),
        pytest.param({"datacontenttype": 1}, "datacontenttype", "must be a string", id="dct"),
        pytest.param(
            {"datacontenttype": "text/plain"}, "datacontenttype", "JSON media type", id="dct text"
        ),
        pytest.param({"traceParent": "x"}, "traceParent", "attribute name", id="uppercase ext"),
        pytest.param({"trace_id": "x"}, "trace_id", "attribute name", id="underscore ext"),
        pytest.param({"nested": {"a": 1}}, "nested", "must be a string", id="object ext"),
        pytest.param({"ratio": 0.5}, "ratio", "must be a string", id="float ext"),
    ],
)
def test_structured_attribute_rules(changes: dict[str, Any], loc: str, message: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        one_structured(event(**changes))
    assert locs(exc) == [loc]
    assert message in exc.value.problems[0].message


def test_every_attribute_problem_is_reported_at_once() -> None:
    with pytest.raises(PayloadRejected) as exc:
        one_structured(event(id=ABSENT, source="", specversion="0.3", time="soon"))
    assert sorted(locs(exc)) == ["id", "source", "specversion", "time"]


def test_null_optional_attributes_are_absent() -> None:
    ce = one_structured(event(subject=None, time=None, data=None))
    assert ce.subject is None
    assert ce.time is None
    assert ce.data is None


def test_time_with_offset_is_normalised_to_utc() -> None:
    ce = one_structured(event(time="2026-11-10T11:30:00+02:00"))
    assert ce.time == datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
    assert ce.time is not None
    assert ce.time.utcoffset() == timedelta(0)


def test_data_base64_is_decoded_as_json() -> None:
    encoded = base64.b64encode(encode(DATA)).decode()
    ce = one_structured(event(data=ABSENT, data_base64=encoded))
    assert ce.data == DATA


@pytest.mark.parametrize(
    ("changes", "loc"),
    [
        ({"data_base64": "e30="}, "data_base64"),  # together with data
        ({"data": ABSENT, "data_base64": "!!!"}, "data_base64"),
        ({"data": ABSENT, "data_base64": 5}, "data_base64"),
        ({"data": ABSENT, "data_base64": base64.b64encode(b"{nope").decode()}, "data"),
    ],
)
def test_bad_data_base64_is_refused(changes: dict[str, Any], loc: str) -> None:
    with pytest.raises(PayloadRejected) as exc:
        one_structured(event(**changes))
    assert locs(exc) == [loc]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe{}",
        b'{"id": NaN}',
        b"[1, 2]",
        b'"event"',
        b"",
        b"[" * 100_000,
        b'{"id": "a\\ud800", "data": {}}',
    ],
    ids=["invalid", "not utf-8", "NaN", "array", "string", "empty", "deep", "lone surrogate"],
)
def test_structured_body_must_be_a_json_object(body: bytes) -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(STRUCTURED, body)
    assert locs(exc) == ["body"]


def test_other_structured_formats_are_unsupported() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_http({"Content-Type": "application/cloudevents+xml"}, b"<event/>")


def test_body_over_the_limit_is_too_large() -> None:
    with pytest.raises(PayloadTooLarge):
        parse_http(STRUCTURED, b" " * 1025, max_bytes=1024)
    with pytest.raises(PayloadTooLarge):
        parse_http(STRUCTURED, b" " * (1024 * 1024 + 1))


# --- binary mode -------------------------------------------------------------------------------


def test_binary_event_is_parsed() -> None:
    headers = binary_headers(**{"ce-time": "2026-11-10T09:30:00Z", "ce-traceparent": "00-a-b-01"})
    events, is_batch = parse_http(headers, encode(DATA))
    assert not is_batch
    ce = events[0]
    assert (ce.id, ce.source, ce.type, ce.specversion) == (
        "evt-1",
        "/relay",
        "com.example.thing.happened",
        "1.0",
    )
    assert ce.datacontenttype == "application/json"
    assert ce.time == datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
    assert ce.data == DATA
    assert ce.extensions == {"traceparent": "00-a-b-01"}


def test_binary_header_values_are_percent_decoded() -> None:
    headers = binary_headers(
        **{
            "CE-Source": "https%3A%2F%2Fexample.com%2Frelay",
            "Ce-Subject": "Euro%20%E2%82%AC%20%F0%9F%98%80",
            "ce-id": '"quoted \\"id\\""',
            "ce-note": "100%25%2b1",
        }
    )
    headers.pop("ce-source")  # replaced by CE-Source
    ce = parse_http(headers, encode(DATA))[0][0]
    assert ce.source == "https://example.com/relay"
    assert ce.subject == "Euro € 😀"
    assert ce.id == 'quoted "id"'
    assert ce.extensions == {"note": "100%+1"}


def test_binary_invalid_utf8_percent_encoding_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(binary_headers(ce_subject="%C0%A0"), encode(DATA))
    assert locs(exc) == ["subject"]


def test_binary_invalid_json_body_is_refused_as_data() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(binary_headers(), b"{not json")
    assert locs(exc) == ["data"]


def test_binary_problems_are_collected_with_the_data_problem() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(binary_headers(ce_id=None, ce_time="yesterday"), b"\xff")
    assert sorted(locs(exc)) == ["data", "id", "time"]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/xml", "application/octet-stream", "", "application/jsonx"],
)
def test_binary_non_json_data_is_unsupported(content_type: str) -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_http(binary_headers(Content_Type=content_type), b"hello")


def test_no_content_type_and_no_ce_headers_is_unsupported() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_http({}, encode(event()))


def test_binary_without_content_type_reads_json() -> None:
    ce = parse_http(binary_headers(Content_Type=None), encode(DATA))[0][0]
    assert ce.datacontenttype is None
    assert ce.data == DATA


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "application/vnd.superpipeline+json", "text/x+json"],
)
def test_binary_json_media_types(content_type: str) -> None:
    ce = parse_http(binary_headers(Content_Type=content_type), encode(DATA))[0][0]
    assert ce.datacontenttype == content_type
    assert ce.data == DATA


def test_binary_json_content_type_without_ce_headers_names_the_missing_attributes() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http({"Content-Type": "application/json"}, encode(DATA))
    assert sorted(locs(exc)) == ["id", "source", "specversion", "type"]


def test_surrogate_pairs_are_text() -> None:
    body = b'{"specversion": "1.0", "id": "\\ud83d\\ude00", "source": "s", "type": "t"}'
    assert one_structured(json.loads(body)).id == "\N{GRINNING FACE}"
    with pytest.raises(PayloadRejected) as exc:
        parse_http(binary_headers(), b'{"text": "\\udc00"}')
    assert locs(exc) == ["data"]


def test_binary_empty_body_has_no_data() -> None:
    assert parse_http(binary_headers(), b"")[0][0].data is None


def test_binary_ce_datacontenttype_header_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(binary_headers(ce_datacontenttype="application/json"), encode(DATA))
    assert locs(exc) == ["datacontenttype"]


def test_binary_conflicting_duplicate_headers_are_refused() -> None:
    class Pairs(dict[str, str]):
        """A mapping whose items() repeats a header, as Starlette's Headers does."""

        def items(self) -> Any:
            return [*super().items(), ("CE-ID", "evt-2")]

    with pytest.raises(PayloadRejected) as exc:
        parse_http(Pairs(binary_headers()), encode(DATA))
    assert locs(exc) == ["id"]


# --- batch mode --------------------------------------------------------------------------------


def test_batch_of_three_events() -> None:
    body = encode([event(id=f"evt-{n}") for n in range(3)])
    events, is_batch = parse_http(BATCH, body)
    assert is_batch
    assert [e.id for e in events] == ["evt-0", "evt-1", "evt-2"]


def test_batch_names_the_index_of_a_bad_event() -> None:
    body = encode([event(id="a"), event(id=ABSENT), event(id="c")])
    with pytest.raises(PayloadRejected) as exc:
        parse_http(BATCH, body)
    assert locs(exc) == ["[1].id"]


def test_batch_reports_every_bad_event() -> None:
    body = encode([event(specversion="2.0"), event(), event(source=ABSENT, time="x"), "event"])
    with pytest.raises(PayloadRejected) as exc:
        parse_http(BATCH, body)
    assert locs(exc) == ["[0].specversion", "[2].source", "[2].time", "[3]"]


@pytest.mark.parametrize("body", [b"[]", b"{}", b"[1", b'"x"'])
def test_batch_body_must_be_a_non_empty_array(body: bytes) -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_http(BATCH, body)
    assert locs(exc) == ["body"]


def test_bare_batch_media_type_is_a_batch() -> None:
    events, is_batch = parse_http(
        {"content-type": "application/cloudevents-batch; charset=utf-8"}, encode([event()])
    )
    assert is_batch
    assert len(events) == 1


# --- NATS --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        {"Nats-Msg-Id": "x"},
        {"Content-Type": "application/cloudevents+json"},
        {"content-type": "application/json"},
    ],
)
def test_nats_structured(headers: dict[str, str] | None) -> None:
    ce = parse_nats(headers, encode(event()))
    assert ce.id == "evt-1"
    assert ce.data == DATA


def test_nats_structured_content_type_wins_over_ce_headers() -> None:
    headers = {"content-type": "application/cloudevents+json", "ce-traceparent": "00-a-b-01"}
    assert parse_nats(headers, encode(event())).id == "evt-1"


def test_nats_binary() -> None:
    headers = {
        "Ce-Specversion": "1.0",
        "Ce-Id": "evt-9",
        "Ce-Source": "nats%3A%2F%2Frelay",
        "Ce-Type": "com.example.thing.happened",
        "Ce-Subject": "evt.acme.thing",
    }
    ce = parse_nats(headers, encode(DATA))
    assert (ce.id, ce.source, ce.subject) == ("evt-9", "nats://relay", "evt.acme.thing")
    assert ce.datacontenttype is None
    assert ce.data == DATA


def test_nats_binary_non_json_is_unsupported() -> None:
    headers = {"ce-id": "1", "content-type": "text/plain"}
    with pytest.raises(UnsupportedMediaType):
        parse_nats(headers, b"hi")


def test_nats_batch_is_unsupported() -> None:
    with pytest.raises(UnsupportedMediaType):
        parse_nats({"Content-Type": "application/cloudevents-batch+json"}, b"[]")


def test_nats_structured_missing_id_is_refused() -> None:
    with pytest.raises(PayloadRejected) as exc:
        parse_nats(None, encode(event(id=ABSENT)))
    assert locs(exc) == ["id"]


# --- RFC 3339 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-10T09:30:00Z", datetime(2026, 11, 10, 9, 30, tzinfo=UTC)),
        ("2026-11-10t09:30:00z", datetime(2026, 11, 10, 9, 30, tzinfo=UTC)),
        ("2026-11-10 09:30:00+00:00", datetime(2026, 11, 10, 9, 30, tzinfo=UTC)),
        ("2026-11-10T09:30:00-00:00", datetime(2026, 11, 10, 9, 30, tzinfo=UTC)),
        ("2026-11-10T04:00:00.5-05:30", datetime(2026, 11, 10, 9, 30, 0, 500000, tzinfo=UTC)),
        ("2026-11-10T09:30:00.123456789Z", datetime(2026, 11, 10, 9, 30, 0, 123456, tzinfo=UTC)),
    ],
)
def test_rfc3339_accepted(text: str, expected: datetime) -> None:
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "2026-11-10",
        "2026-11-10T09:30Z",
        "2026-11-10T09:30:00",
        "2026-11-10T09:30:00.Z",
        "2026-13-10T09:30:00Z",
        "2026-02-30T09:30:00Z",
        "2026-11-10T24:00:00Z",
        "2026-11-10T09:30:00+24:00",
        "2026-11-10T09:30:00+01:60",
        "2026-11-10T09:30:00+0100",
        "0001-01-01T00:00:00+01:00",
        "2026-11-10T09:30:00Z\n",
        "\u0662\u0660\u0662\u0666-11-10T09:30:00Z",
        "",
    ],
)
def test_rfc3339_refused(text: str) -> None:
    with pytest.raises(ValueError, match="date-time"):
        parse_rfc3339(text)


def test_json_media_types() -> None:
    assert is_json_media_type("application/json")
    assert is_json_media_type("Application/JSON ; charset=utf-8")
    assert is_json_media_type("application/cloudevents+json")
    assert not is_json_media_type("text/plain")
    assert not is_json_media_type("+json")


# --- property: only IntakeErrors escape --------------------------------------------------------

_CONTENT_TYPES = st.sampled_from(
    [
        "application/cloudevents+json",
        "application/cloudevents-batch+json",
        "application/cloudevents",
        "application/json",
        "text/plain",
        "application/cloudevents+xml",
        "",
    ]
)
_HEADER_NAMES = st.one_of(
    st.sampled_from(["content-type", "ce-id", "ce-source", "ce-type", "ce-specversion", "ce-time"]),
    st.text(max_size=12).map(lambda s: "ce-" + s),
    st.text(max_size=12),
)
_HEADERS = st.dictionaries(
    _HEADER_NAMES, st.one_of(_CONTENT_TYPES, st.text(max_size=30)), max_size=6
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_ATTRIBUTES = st.fixed_dictionaries(
    {},
    optional={
        name: st.one_of(_JSON, st.just("1.0"), st.just("2026-11-10T09:30:00Z"))
        for name in ("id", "source", "specversion", "type", "time", "subject", "data", "x")
    },
)


def _only_intake_errors(headers: dict[str, str], body: bytes) -> None:
    try:
        events, _ = parse_http(headers, body)
    except IntakeError:
        return
    assert events
    for ce in events:
        assert isinstance(ce.id, str)
        assert ce.id


@settings(max_examples=300, deadline=None)
@given(headers=_HEADERS, body=st.binary(max_size=200))
def test_parse_http_raises_only_intake_errors_on_any_bytes(
    headers: dict[str, str], body: bytes
) -> None:
    _only_intake_errors(headers, body)


@settings(max_examples=300, deadline=None)
@given(
    content_type=_CONTENT_TYPES,
    document=st.one_of(_ATTRIBUTES, st.lists(_ATTRIBUTES, max_size=3), _JSON),
)
def test_parse_http_raises_only_intake_errors_on_any_json(content_type: str, document: Any) -> None:
    _only_intake_errors({"Content-Type": content_type}, json.dumps(document).encode())


@settings(max_examples=200, deadline=None)
@given(headers=st.none() | _HEADERS, body=st.binary(max_size=100))
def test_parse_nats_raises_only_intake_errors(headers: dict[str, str] | None, body: bytes) -> None:
    with contextlib.suppress(IntakeError):
        parse_nats(headers, body)

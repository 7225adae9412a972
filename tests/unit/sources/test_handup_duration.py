"""handup ``timeout`` (spec 004): Rust humantime's duration grammar, at most one year.

The accepted table is humantime's own ``test_units`` / ``test_combo`` cases (``parse_duration``)
within a year, plus the forms handup users write.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.sources.handup import validation
from adapters.sources.handup.duration import (
    DURATION_HELP,
    MAX_TIMEOUT,
    DurationError,
    parse_nanos,
    parse_timeout,
)
from adapters.sources.handup.elicitation import to_elicitation
from bot.app.config import parse_config
from bot.domain.errors import ConfigError, PayloadRejected

ALLOW = ["https://handup.example.org/hooks"]
NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
YEAR = 31_557_600


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("7d", 604_800),
        ("1h 30m", 5400),
        ("1h30m", 5400),
        ("1 h 30 m", 5400),
        ("2days", 172_800),
        ("1day", 86_400),
        ("1w", 604_800),
        ("1week", 604_800),
        ("7weeks", 4_233_600),
        ("52w", 31_449_600),
        ("1y", YEAR),
        ("1year", YEAR),
        ("1M", 2_630_016),
        ("1month", 2_630_016),
        ("3months", 3 * 2_630_016),
        ("365d", 31_536_000),
        ("3000s", 3000),
        ("300sec", 300),
        ("300secs", 300),
        ("50seconds", 50),
        ("1second", 1),
        ("100m", 6000),
        ("12min", 720),
        ("12mins", 720),
        ("1minute", 60),
        ("7minutes", 420),
        ("15 minutes", 900),
        ("7hr", 25_200),
        ("7hrs", 25_200),
        ("1hour", 3600),
        ("24hours", 86_400),
        ("2h 15m", 8100),
        ("1d2h3m4s", 93_784),
        (" 15m ", 900),
        ("\t1h\n", 3600),
        ("\u00a015m", 900),  # Rust's is_whitespace: Unicode White_Space
        ("1 0s", 10),  # humantime lets spaces run inside a number
        ("0001h", 3600),
        ("0h 5m", 300),
        ("364d 23h 59m 59s", 31_535_999),
    ],
)
def test_accepted_forms_and_their_seconds(text: str, seconds: int) -> None:
    assert parse_timeout(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("17nsec", 17),
        ("17nanos", 17),
        ("33ns", 33),
        ("3usec", 3000),
        ("78us", 78_000),
        ("31msec", 31_000_000),
        ("31millis", 31_000_000),
        ("6ms", 6_000_000),
        ("20 min 17 nsec ", 1_200_000_000_017),
        ("17y", 17 * YEAR * 10**9),  # the grammar alone has no ceiling but u64
    ],
)
def test_the_grammar_reads_subsecond_units_exactly(text: str, nanos: int) -> None:
    assert parse_nanos(text) == nanos


def test_subsecond_timeouts_stay_positive() -> None:
    assert parse_timeout("500ms") == timedelta(milliseconds=500)
    assert parse_timeout("1ns") == timedelta(microseconds=1)


def test_at_most_one_year_is_humantimes_year() -> None:
    assert timedelta(days=365.25) == MAX_TIMEOUT
    assert parse_timeout("1y") == MAX_TIMEOUT
    assert parse_timeout("365d 6h") == MAX_TIMEOUT
    for over in ("1y 1ns", "365d 6h 1s", "366d", "12M", "53w", "2y"):
        with pytest.raises(ValueError, match="longer than a year"):
            parse_timeout(over)


@pytest.mark.parametrize("text", ["none", "None", "NONE", " none "])
def test_none_disables_the_timeout(text: str) -> None:
    assert parse_timeout(text) is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("0s", "is zero"),
        ("0h 0m", "is zero"),
        ("90", "needs a unit after 90, for example 90s or 90m"),
        ("1h 30", "needs a unit after 30"),
        ("m", "needs a number before 'm'"),
        ("2 hours min", "needs a number before 'min'"),
        ("-5m", "needs a number before '-5m'"),
        ("+5m", "needs a number before '+5m'"),
        ("1.5h", "has '.', which is not allowed"),
        ("1h,30m", "has ',', which is not allowed"),
        ("1:30", "has ':', which is not allowed"),
        ("5m\x1c", "has '\\x1c', which is not allowed"),  # isspace(), not White_Space
        ("\u0661\u0665m", "needs a number before"),  # ASCII digits only (Arabic-Indic 15)
        ("1H", "unknown unit 'H'"),
        ("15 Minutes", "unknown unit 'Minutes'"),
        ("2weekss", "unknown unit 'weekss'"),
        ("1fortnight", "unknown unit 'fortnight'"),
        ("1µs", "has 'µ', which is not allowed"),
        ("99999999999999999999d", "has a number too large"),
        ("1" * 5000 + "s", "has a number too large"),
        ("18446744073709551615s", "longer than a year"),
        ("18446744073709551616ns", "has a number too large"),
        ("nonesuch", "needs a number before 'nonesuch'"),
        ("none 1h", "needs a number before 'none 1h'"),
    ],
)
def test_refused_forms_say_why(text: str, reason: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_timeout(text)
    message = str(caught.value)
    assert message.startswith(DURATION_HELP + "; this one "), message
    assert reason in message, message


def _check(**fields: Any) -> validation.CheckedRequest:
    return validation.check({"title": "Deploy?", **fields}, ALLOW)


@pytest.mark.parametrize("text", ["1w", "1y", "1h 30m", "2days"])
def test_a_request_takes_the_forms_handup_users_write(text: str) -> None:
    checked = _check(timeout=text)
    e = to_elicitation(checked, request_id="r", now=NOW)
    assert e.deadlines.expires_at == NOW + parse_timeout(text)  # type: ignore[operator]
    assert e.extra["request"]["timeout"] == text


@pytest.mark.parametrize("text", ["1.5h", "99999999999999999999d", "366d", "0s", "90", "1H"])
def test_a_bad_timeout_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(PayloadRejected) as caught:
        _check(timeout=text)
    [problem] = caught.value.problems
    assert problem.loc == "timeout"
    assert problem.message.startswith("must be a positive duration"), problem.message


def test_the_default_applies_only_when_timeout_is_absent() -> None:
    two_hours = timedelta(hours=2)
    absent = to_elicitation(_check(), request_id="r", now=NOW, default_timeout=two_hours)
    assert absent.deadlines.expires_at == NOW + two_hours
    for disabled in (None, "none"):
        e = to_elicitation(
            _check(timeout=disabled), request_id="r", now=NOW, default_timeout=two_hours
        )
        assert e.deadlines.expires_at is None
        assert e.extra["request"]["expires_at"] is None
    named = to_elicitation(
        _check(timeout="15m"), request_id="r", now=NOW, default_timeout=two_hours
    )
    assert named.deadlines.expires_at == NOW + timedelta(minutes=15)


@pytest.mark.parametrize(("text", "seconds"), [("1h 30m", 5400), ("1w", 604_800), ("1y", YEAR)])
def test_the_config_default_takes_the_same_grammar(text: str, seconds: int) -> None:
    config = parse_config({"sources": {"handup": {"default_timeout": text}}})
    assert config.sources.handup.default_timeout == text
    assert parse_timeout(text) == timedelta(seconds=seconds)


def test_the_config_default_is_unset_or_none_for_never() -> None:
    assert parse_config({}).sources.handup.default_timeout is None
    none = parse_config({"sources": {"handup": {"default_timeout": "none"}}})
    assert none.sources.handup.default_timeout == "none"


@pytest.mark.parametrize("text", ["1.5h", "366d", "0s", "99999999999999999999d", "soon"])
def test_a_bad_config_default_names_its_key(text: str) -> None:
    with pytest.raises(ConfigError, match=r"sources\.handup\.default_timeout") as caught:
        parse_config({"sources": {"handup": {"default_timeout": text}}})
    assert "must be a positive duration" in str(caught.value)


def test_an_expires_at_is_held_to_dates_python_can_hold() -> None:
    last = validation.MAX_EXPIRES_AT
    e = to_elicitation(_check(expires_at=last), request_id="r", now=NOW)
    assert e.deadlines.expires_at == datetime(9999, 1, 1, tzinfo=UTC)
    with pytest.raises(PayloadRejected) as caught:
        _check(expires_at=last + 1)
    assert [p.loc for p in caught.value.problems] == ["expires_at"]

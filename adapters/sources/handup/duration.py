"""handup durations (``timeout``): exactly ``humantime::parse_duration``'s grammar, as handup's
daemon reads it. No Python library reads it exactly (pytimeparse2 takes fractions, ``4:13`` and a
365-day year), hence this port."""

from __future__ import annotations

from datetime import timedelta

NANOS_PER_SECOND = 1_000_000_000
YEAR_SECONDS = 31_557_600  # humantime's year: 365.25 days
MAX_TIMEOUT = timedelta(seconds=YEAR_SECONDS)  # the spec's "at most one year", as ``1y`` reads
_MAX_NANOS = YEAR_SECONDS * NANOS_PER_SECOND
_U64_MAX = 2**64 - 1

_UNIT_NANOS: dict[str, int] = {
    **dict.fromkeys(("nanos", "nsec", "ns"), 1),
    **dict.fromkeys(("usec", "us"), 1_000),
    **dict.fromkeys(("millis", "msec", "ms"), 1_000_000),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), NANOS_PER_SECOND),
    **dict.fromkeys(("minutes", "minute", "mins", "min", "m"), 60 * NANOS_PER_SECOND),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), 3_600 * NANOS_PER_SECOND),
    **dict.fromkeys(("days", "day", "d"), 86_400 * NANOS_PER_SECOND),
    **dict.fromkeys(("weeks", "week", "w"), 604_800 * NANOS_PER_SECOND),
    **dict.fromkeys(("months", "month", "M"), 2_630_016 * NANOS_PER_SECOND),
    **dict.fromkeys(("years", "year", "y"), YEAR_SECONDS * NANOS_PER_SECOND),
}
_DIGITS = frozenset("0123456789")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WHITESPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
"""Rust's ``char::is_whitespace`` (Unicode White_Space); ``str.isspace`` differs slightly."""


def _timeout_pattern() -> str:
    """:func:`parse_timeout`'s grammar as an ECMA 262 regular expression (for a JSON Schema),
    without its bounds (not zero, at most a year, no number past a Rust ``u64``)."""
    space = "[" + "".join(f"\\u{ord(c):04x}" for c in sorted(_WHITESPACE)) + "]"
    units = "|".join(sorted(_UNIT_NANOS, key=lambda u: (-len(u), u)))
    span = f"[0-9](?:[0-9]|{space})*(?:{units})"
    none = "[ \\t\\n\\r]*[Nn][Oo][Nn][Ee][ \\t\\n\\r]*"
    return f"^(?:{none}|{space}*{span}(?:{space}*{span})*{space}*)$"


TIMEOUT_PATTERN = _timeout_pattern()

DURATION_HELP = (
    'must be a positive duration such as "90s", "15m", "1h 30m", "2days", "1w" or "1y" '
    '(at most one year), or "none"'
)


_NOT_ALLOWED = "which is not allowed (whole numbers and units only)"
_SHOWN = 20  # at most this many characters of the text are echoed in a reason


class DurationError(ValueError):
    """The text is not a humantime duration; the message says why."""


def parse_nanos(text: str) -> int:
    """``text`` in nanoseconds, as ``humantime::parse_duration`` reads it (a ``u64`` at most)."""
    length = len(text)
    at = _skip_space(text, 0)
    if at == length:
        raise DurationError("is empty")
    total = 0
    while True:
        if text[at] not in _DIGITS:
            raise DurationError(f"needs a number before {_shown(text, at)}")
        number, at = _number(text, at)
        start = at
        while at < length and text[at] in _LETTERS:
            at += 1
        if at < length and text[at] not in _DIGITS and text[at] not in _WHITESPACE:
            raise DurationError(f"has {text[at]!r}, {_NOT_ALLOWED}")
        total += number * _unit(text[start:at], number)
        if total > _U64_MAX * NANOS_PER_SECOND:
            raise DurationError("is too large")
        if at < length and text[at] in _DIGITS:
            continue  # "1h30m": the next span starts right after the unit
        at = _skip_space(text, at)
        if at == length:
            return total


def _number(text: str, at: int) -> tuple[int, int]:
    """The whole number at ``at`` (humantime lets spaces run inside it) and where it ends."""
    number = 0
    while at < len(text):
        char = text[at]
        if char in _DIGITS:
            number = number * 10 + ord(char) - 48
            if number > _U64_MAX:
                raise DurationError("has a number too large")
        elif char in _LETTERS:
            break
        elif char not in _WHITESPACE:
            raise DurationError(f"has {char!r}, {_NOT_ALLOWED}")
        at += 1
    return number, at


def _unit(unit: str, number: int) -> int:
    if not unit:
        raise DurationError(f"needs a unit after {number}, for example {number}s or {number}m")
    try:
        return _UNIT_NANOS[unit]
    except KeyError:
        raise DurationError(
            f"has an unknown unit {_shown(unit, 0)} (units: ns, us, ms, s, m, h, d, w, M for "
            "months, y, and their long names)"
        ) from None


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _shown(text: str, at: int) -> str:
    rest = text[at:]
    return repr(rest if len(rest) <= _SHOWN else rest[:_SHOWN] + "…")


def parse_timeout(text: str) -> timedelta | None:
    """None for ``"none"``, else a positive duration of at most a year (DurationError: why not)."""
    if text.strip(" \t\n\r").lower() == "none":
        return None
    try:
        nanos = parse_nanos(text)
    except DurationError as exc:
        raise DurationError(f"{DURATION_HELP}; this one {exc}") from None
    if nanos == 0:
        raise DurationError(f"{DURATION_HELP}; this one is zero")
    if nanos > _MAX_NANOS:
        raise DurationError(f"{DURATION_HELP}; this one is longer than a year")
    return timedelta(microseconds=-(-nanos // 1_000))  # a positive nanosecond stays positive

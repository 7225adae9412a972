"""RFC 3339 date-times, read strictly (seconds and an offset or ``Z`` required). Pure."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_RFC3339 = re.compile(
    r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[Tt ]"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})(?:\.(?P<fraction>[0-9]+))?"
    r"(?:(?P<utc>[Zz])|(?P<sign>[+-])(?P<offset_hour>[0-9]{2}):(?P<offset_minute>[0-9]{2}))"
)


def parse_rfc3339(value: str) -> datetime:
    """An RFC 3339 date-time (seconds and an offset or Z required) as an aware UTC datetime."""
    match = _RFC3339.fullmatch(value)
    if match is None:
        msg = "must be an RFC 3339 date-time such as 2026-11-10T09:30:00Z"
        raise ValueError(msg)
    part = match.groupdict()
    try:
        if part["utc"]:
            tz = UTC
        else:
            hours, minutes = int(part["offset_hour"]), int(part["offset_minute"])
            if hours > 23 or minutes > 59:  # noqa: PLR2004 - RFC 3339 time-numoffset bounds
                raise ValueError  # noqa: TRY301 - one message for every out-of-range part
            sign = -1 if part["sign"] == "-" else 1
            tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
        fraction = (part["fraction"] or "")[:6].ljust(6, "0")
        return datetime(
            int(part["year"]),
            int(part["month"]),
            int(part["day"]),
            int(part["hour"]),
            int(part["minute"]),
            int(part["second"]),
            int(fraction),
            tzinfo=tz,
        ).astimezone(UTC)
    except (ValueError, OverflowError):
        msg = "is not a valid date-time (a part is out of range)"
        raise ValueError(msg) from None

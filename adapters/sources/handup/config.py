"""``[sources.handup]``: where terminal Requests may be POSTed, and a Request's default expiry."""

from __future__ import annotations

from pydantic import AnyHttpUrl, field_validator

from adapters.shared.config import Section
from adapters.sources.handup.duration import parse_timeout


class HandupConfig(Section):
    callback_allowlist: tuple[AnyHttpUrl, ...] = ()
    default_timeout: str | None = None
    """The expiry of a Request with no ``timeout``, in its grammar (``"1h 30m"``; at most a year);
    None or ``"none"``: it never expires."""

    @field_validator("default_timeout")
    @classmethod
    def _handup_duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_timeout(value)  # ValueError: pydantic names sources.handup.default_timeout
        return value

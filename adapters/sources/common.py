"""Helpers the sources share (each source package stays independent of the others)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Iterator
from datetime import datetime
from typing import Any

from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import Meaning, Option

APPROVE = "approve"
DENY = "deny"


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, non-ASCII kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    """``sha256:<hex>`` of ``value``'s canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical(value).encode()).hexdigest()


def loc_path(parts: Iterable[int | str]) -> str:
    """``('options', 2, 'scope')`` -> ``options[2].scope``."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def join_loc(prefix: str, loc: str) -> str:
    """``data`` and ``options[2]`` -> ``data.options[2]``; ``data`` and ``[0]`` -> ``data[0]``."""
    if not prefix or not loc:
        return prefix or loc
    return f"{prefix}{loc}" if loc.startswith("[") else f"{prefix}.{loc}"


def utc_text(when: datetime) -> str:
    """An aware UTC datetime as RFC 3339 with ``Z``: ``2026-12-01T16:00:00Z``."""
    return when.isoformat().replace("+00:00", "Z")


def repeats(values: Iterable[Hashable | None]) -> Iterator[tuple[int, int]]:
    """``(index, index of its first)`` for each value seen before; None is never compared."""
    first: dict[Hashable, int] = {}
    for index, value in enumerate(values):
        if value is not None and first.setdefault(value, index) != index:
            yield index, first[value]


def json_object(data: Any) -> dict[str, Any]:
    """``data`` if a JSON object, else the 400 saying the body must be one."""
    if not isinstance(data, dict):
        raise PayloadRejected([FieldProblem("body", "must be a JSON object")])
    return data


def approve_deny(approve: str = "Approve", deny: str = "Deny") -> tuple[Option, Option]:
    """The two buttons of an approval: ``approve`` (primary) and ``deny`` (danger)."""
    return (
        Option(id=APPROVE, label=approve, meaning=Meaning.APPROVE, style="primary"),
        Option(id=DENY, label=deny, meaning=Meaning.REJECT, style="danger"),
    )

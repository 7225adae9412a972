"""Payloads as the platforms send them, one file each, read by the translate tests.

``slack/``: Slack's payload shapes as its API reference documents them (see README.md), carrying the
message and modal our renderer really produces. ``matrix/``: events recorded from the real Synapse
the Matrix tests run (``python -m tests.responses.record_matrix`` records them again).
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def load(platform: str, name: str) -> dict[str, Any]:
    """A JSON fixture, or a form body (``*.urlencoded``) as the dict Bolt makes of it."""
    text = (HERE / platform / name).read_text(encoding="utf-8")
    if name.endswith(".urlencoded"):
        return dict(urllib.parse.parse_qsl(text.strip(), keep_blank_values=True))
    loaded: dict[str, Any] = json.loads(text)
    return loaded

"""The SuperPipeline corpus cases, kept in the repository under ``tests/fixtures/superpipeline``.

``valid.json`` holds the four valid examples of the ``elicitation.pending`` v1 document (its spec's
example and its corpus of valid cases); ``refused.json`` the four shapes the spec says must fail,
keyed by the reason. A missing or empty file is an error, never a skip: the corpus is part of the
contract.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "superpipeline"


def load(name: str) -> dict[str, Any]:
    """``valid.json`` or ``refused.json``: the corpus cases by name."""
    path = FIXTURES / name
    cases = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(cases, dict) or not cases:
        raise ValueError(f"{path} must be a non-empty JSON object of named cases")
    return cases


VALID = load("valid.json")
REFUSED = load("refused.json")

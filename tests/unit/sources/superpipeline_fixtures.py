"""The shared SuperPipeline fixtures (``../shared/fixtures/superpipeline`` beside the repo).

Missing fixtures are an error, never a skip: the corpus is part of the contract.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    raise FileNotFoundError(f"no pyproject.toml above {here}: cannot find the repository root")


FIXTURES = _repo_root().parent / "shared" / "fixtures" / "superpipeline"


def load(name: str) -> dict[str, Any]:
    """``valid.json`` or ``refused.json``: the corpus cases by name."""
    path = FIXTURES / name
    if not path.is_file():
        raise FileNotFoundError(
            f"SuperPipeline fixture {path} is missing (expected beside the repo)"
        )
    cases = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(cases, dict) or not cases:
        raise ValueError(f"{path} must be a non-empty JSON object of named cases")
    return cases


VALID = load("valid.json")
REFUSED = load("refused.json")

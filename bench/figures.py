"""What every benchmark shares: the event it sends, percentiles, and the machine it ran on."""

from __future__ import annotations

import math
import os
import platform
from typing import Any

CE_TYPE = "com.superjackfruit.superpipeline.elicitation.pending.v1"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in 0..1 (NaN for no values)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores, py{platform.python_version()}"


def pending_event(i: int, run: str, source: str) -> dict[str, Any]:
    """A distinct SuperPipeline ``elicitation.pending`` CloudEvent (structured mode)."""
    return {
        "specversion": "1.0",
        "id": f"{run}-{i}",
        "source": source,
        "type": CE_TYPE,
        "subject": "evt.acme.superpipeline.elicitation.pending",
        "data": {
            "event": "elicitation.pending",
            "boardId": "brd_134a0ddb6d434478",
            "boardName": "Developer Experience",
            "cardId": "crd_0f3c9a2b7d4e4a11",
            "cardTitle": "Research this",
            "elicitationId": f"eli_{run}_{i}",
            "runId": "run_0123456789abcdef",
            "stageKey": "research",
            "agentId": "agt_9e8d7c6b5a493827",
            "question": "May I run the migration?",
            "options": [
                {
                    "id": "allow_once",
                    "label": "Allow once",
                    "meaning": "approve",
                    "needsComment": False,
                    "scope": "once",
                },
                {"id": "deny", "label": "Deny", "meaning": "reject", "needsComment": False},
            ],
            "ts": "2026-11-10T09:30:00.000Z",
        },
    }

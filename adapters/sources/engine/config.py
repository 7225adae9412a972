"""``[sources.engine]``: where a closed engine ask is sent."""

from __future__ import annotations

from pydantic import AnyHttpUrl

from adapters.shared.config import Section


class EngineConfig(Section):
    answer_webhook: AnyHttpUrl | None = None
    """Where a closed engine ask is POSTed (the read-back document); None: only read back."""

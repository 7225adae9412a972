"""``[[sources.pinework]]``: one polled Pinework workspace."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from adapters.shared.config import EnvName, Section


class PineworkConfig(Section):
    base_url: AnyHttpUrl
    token_env: EnvName
    workspace: str
    poll_seconds: float = Field(default=5, gt=0)

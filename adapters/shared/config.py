"""What every config section shares: unknown keys refused, frozen; environment variable names."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
"""The name of an environment variable (a secret is read from it, never written in the file)."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

"""Pinework's question document, read liberally. Its field table lost its names: these are the
camelCase names its prose and API filters use, and a few near-misses are accepted.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

OPEN = "open"
ANSWER_MODES = ("free_text", "single_select", "multi_select", "secret_input")
SELECT_MODES = frozenset({"single_select", "multi_select"})


class _Liberal(BaseModel):
    model_config = ConfigDict(
        extra="ignore", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


class Principal(_Liberal):
    """``askedBy`` / ``answeredBy``: ``{type: agent | system | user, id}``."""

    type: str | None = None
    id: str | None = None


class QuestionOption(_Liberal):
    key: str
    label: str

    @model_validator(mode="before")
    @classmethod
    def _near_misses(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("key") is None:
            for other in ("id", "value"):
                if isinstance(data.get(other), str):
                    data["key"] = data[other]
                    break
        if data.get("label") is None and isinstance(data.get("key"), str):
            data["label"] = data["key"]
        return data


class SecretRequest(_Liberal):
    name: str | None = None
    provider: str | None = None
    env: str | None = None
    reason: str | None = None


class UpstreamAnswer(_Liberal):
    text: str | None = None
    selected: list[str] | None = None
    secret_id: str | None = None


class Question(_Liberal):
    id: str
    workspace_id: str | None = None
    task_id: str | None = None
    conversation_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    status: str = OPEN
    text: str | None = None
    question: str | None = None
    body: str | None = None
    answer_mode: str
    options: list[QuestionOption] | None = None
    secret_request: SecretRequest | None = None
    asked_by: Principal | None = None
    answer: UpstreamAnswer | None = None
    answered_by: Principal | None = None
    answered_at: str | None = None
    created_at: str | None = None
    updated_at: str | None = None

    @property
    def question_text(self) -> str:
        """The text: ``text``, else ``question``, else ``body`` (its prose uses all three)."""
        return next((v for v in (self.text, self.question, self.body) if v is not None), "")

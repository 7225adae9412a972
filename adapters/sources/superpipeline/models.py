"""SuperPipeline's ``elicitation.pending`` v1 body. Strict: no coercion; null only where the spec
says "or null"; unknown properties ignored. An integer is a JSON Schema integer (``5.0`` too).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from adapters.shared.timestamps import parse_rfc3339

PREVIEW_TYPES = ("text", "field", "link")
PREVIEW_TAG_ERROR = "preview_type"


def _refuse_null(value: object) -> object:
    if value is None:
        raise PydanticCustomError("null_forbidden", "must not be null")
    return value


def _exactly(*allowed: str | bool) -> BeforeValidator:
    """Accept only these JSON values, of the same JSON type (``false`` is not ``0``)."""
    if len(allowed) == 1:
        message = f"must be {json.dumps(allowed[0])}"
    else:
        message = "must be one of " + ", ".join(str(a) for a in allowed)

    types = frozenset(type(a) for a in allowed)
    values = frozenset(allowed)

    def check(value: object) -> object:
        # The type first: ``0 in {False}`` holds, and a list or dict is not hashable.
        if type(value) in types and value in values:
            return value
        raise PydanticCustomError("literal_error", message)

    return BeforeValidator(check)


def _date_time(value: object) -> datetime:
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "must be a string")
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise PydanticCustomError("date_time", str(exc)) from None


class _NotNull:
    """Refuses null (before every other check) and says so in the JSON schema: the null branch
    ``X | None`` puts there is taken out (the None is only the default of an absent field)."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(_refuse_null, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        branches = [b for b in json_schema.get("anyOf", []) if b != {"type": "null"}]
        if len(branches) == 1:
            del json_schema["anyOf"]
            json_schema.update(branches[0])
        elif branches:
            json_schema["anyOf"] = branches
        return json_schema


NotNull = _NotNull()
"""For optional fields that may be absent but not null (it must come last: it runs first)."""
DateTime = Annotated[datetime, BeforeValidator(_date_time)]


def _whole_number(value: object) -> object:
    """JSON Schema's integer: ``5.0`` is one (``5.5``, ``"5"`` and ``true`` are not)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


JsonInteger = Annotated[int, BeforeValidator(_whole_number)]


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, alias_generator=to_camel)


MeaningValue = Annotated[
    Literal["approve", "reject", "revise", "choose", "defer"],
    _exactly("approve", "reject", "revise", "choose", "defer"),
]
ScopeValue = Annotated[
    Literal["once", "run", "always"] | None, _exactly("once", "run", "always"), NotNull
]
RequiresValue = Annotated[Literal["workspace-admin"] | None, _exactly("workspace-admin"), NotNull]


class Option(_Body):
    id: str
    label: str
    meaning: MeaningValue
    needs_comment: Annotated[Literal[False], _exactly(False)]
    scope: ScopeValue = None
    requires: RequiresValue = None


class TextPreview(_Body):
    type: Literal["text"]
    label: Annotated[str | None, NotNull] = None
    text: str


class FieldPreview(_Body):
    type: Literal["field"]
    label: str
    value: str


class LinkPreview(_Body):
    type: Literal["link"]
    label: str
    url: str


def _preview_tag(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) and kind in PREVIEW_TYPES else None


Preview = Annotated[
    Annotated[TextPreview, Tag("text")]
    | Annotated[FieldPreview, Tag("field")]
    | Annotated[LinkPreview, Tag("link")],
    Discriminator(
        _preview_tag,
        custom_error_type=PREVIEW_TAG_ERROR,
        custom_error_message="must be a text, field or link preview",
    ),
]


class ApprovalSubject(_Body):
    id: str
    digest: str
    schema_: str = Field(alias="schema")
    revision: JsonInteger = Field(ge=0)
    expires_at: DateTime | None
    preview: list[Preview]
    preview_complete: bool


class FreeText(_Body):
    max_length: JsonInteger = Field(ge=1)


class Deadline(_Body):
    remind_at: Annotated[DateTime | None, NotNull] = None
    escalate_at: Annotated[DateTime | None, NotNull] = None


class ElicitationPending(_Body):
    event: Annotated[Literal["elicitation.pending"], _exactly("elicitation.pending")]
    board_id: str | None
    board_name: str
    card_id: str
    card_title: str
    elicitation_id: str
    run_id: str
    stage_key: str
    agent_id: str
    question: str
    options: list[Option]
    approval_subject: Annotated[ApprovalSubject | None, NotNull] = None
    free_text: Annotated[FreeText | None, NotNull] = None
    approval_request_id: Annotated[str | None, NotNull] = None
    deadline: Annotated[Deadline | None, NotNull] = None
    ts: DateTime

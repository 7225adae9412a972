"""An MCP ``requestedSchema`` (form mode's flat subset) as a form people answer, and back.

A property not required gets :data:`LEAVE_EMPTY` (the domain's forms need every question
answered); :func:`content_of` checks the whole schema as the last line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from bot.domain.errors import FieldProblem
from bot.domain.model import FormQuestion, Option, TypedAnswer

LEAVE_EMPTY = "(leave empty)"  # the extra option of a property the schema does not require
YES = "Yes"
NO = "No"
FORMATS = ("email", "uri", "date", "date-time")
_STRING_KEYS = {"minLength", "maxLength", "pattern", "format"}
_NUMBER_KEYS = {"minimum", "maximum"}
_ARRAY_KEYS = {"minItems", "maxItems"}
_COMMON_KEYS = {"type", "title", "description", "default"}
MAX_PROPERTIES = 50


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # string, number, integer, boolean, enum or multi (a multi-select array)
    required: bool
    choices: tuple[tuple[str, Any], ...] = ()  # option label -> value


@dataclass(frozen=True)
class Form:
    schema: dict[str, Any]
    fields: tuple[Field, ...]
    questions: tuple[FormQuestion, ...]


class SchemaError(ValueError):
    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def _choices_of(loc: str, prop: Mapping[str, Any], problems: list[FieldProblem]) -> list[Any]:
    """``(title, const)`` pairs of an enum: ``enum`` (+ ``enumNames``), or ``oneOf``/``anyOf``."""
    pairs: list[tuple[str, Any]] = []
    if "enum" in prop:
        values = prop["enum"]
        names = prop.get("enumNames")
        if not isinstance(values, list) or not values:
            problems.append(FieldProblem(f"{loc}.enum", "must be a non-empty list"))
            return []
        if names is not None and (not isinstance(names, list) or len(names) != len(values)):
            problems.append(FieldProblem(f"{loc}.enumNames", "must name every enum value"))
            return []
        for index, value in enumerate(values):
            if not isinstance(value, str):
                problems.append(FieldProblem(f"{loc}.enum[{index}]", "must be a string"))
                return []
            title = names[index] if names is not None else value
            pairs.append((str(title), value))
    else:
        key = "oneOf" if "oneOf" in prop else "anyOf"
        items = prop.get(key)
        if not isinstance(items, list) or not items:
            problems.append(FieldProblem(f"{loc}.{key}", "must be a non-empty list"))
            return []
        for index, item in enumerate(items):
            const = item.get("const") if isinstance(item, Mapping) else None
            if not isinstance(const, str):
                problems.append(FieldProblem(f"{loc}.{key}[{index}].const", "must be a string"))
                return []
            pairs.append((str(item.get("title") or const), const))
    labels = [" ".join(t.split()).casefold() for t, _ in pairs]
    if len(set(labels)) != len(labels) or LEAVE_EMPTY.casefold() in labels:
        problems.append(FieldProblem(loc, "the choices' titles must be distinct"))
        return []
    return pairs


def _field(
    name: str, prop: Any, required: bool, problems: list[FieldProblem]
) -> tuple[Field, FormQuestion] | None:
    loc = f"form.properties.{name}"
    if not isinstance(prop, Mapping):
        problems.append(FieldProblem(loc, "must be an object"))
        return None
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        if not isinstance(items, Mapping) or not ({"enum", "anyOf", "oneOf"} & set(items)):
            problems.append(FieldProblem(f"{loc}.items", "must be an enum (items.enum or anyOf)"))
            return None
        pairs = _choices_of(f"{loc}.items", items, problems)
        allowed, field_type = _COMMON_KEYS | _ARRAY_KEYS | {"items"}, "multi"
    elif kind == "string" and ({"enum", "oneOf", "anyOf"} & set(prop)):
        pairs = _choices_of(loc, prop, problems)
        allowed, field_type = _COMMON_KEYS | {"enum", "enumNames", "oneOf", "anyOf"}, "enum"
    elif kind == "boolean":
        pairs, allowed, field_type = [(YES, True), (NO, False)], _COMMON_KEYS, "boolean"
    elif kind in ("string", "number", "integer"):
        pairs, field_type = [], str(kind)
        allowed = _COMMON_KEYS | (_STRING_KEYS if kind == "string" else _NUMBER_KEYS)
    else:
        problems.append(
            FieldProblem(f"{loc}.type", "must be string, number, integer, boolean or array")
        )
        return None
    if unknown := sorted(set(prop) - allowed):
        problems.append(FieldProblem(f"{loc}.{unknown[0]}", f"is not allowed for type {kind}"))
        return None
    if kind == "string" and "format" in prop and prop["format"] not in FORMATS:
        problems.append(FieldProblem(f"{loc}.format", f"must be one of {', '.join(FORMATS)}"))
        return None
    if "pattern" in prop:
        try:
            re.compile(str(prop["pattern"]))
        except re.error:
            problems.append(FieldProblem(f"{loc}.pattern", "is not a regular expression"))
            return None
    if field_type in ("enum", "multi") and not pairs:
        return None
    title = str(prop.get("title") or name)
    description = prop.get("description")
    text = f"{title}: {description}" if isinstance(description, str) and description else title
    options = [Option(id=label, label=label) for label, _ in pairs]
    if not required:
        options.append(Option(id=LEAVE_EMPTY, label=LEAVE_EMPTY))
    typed = field_type in ("string", "number", "integer")
    question = FormQuestion(
        id=name,
        question=text,
        header=title,
        options=tuple(options),
        multi=field_type == "multi",
        allow_free_text=typed,
        typed=_typed(field_type, prop) if typed else None,
    )
    return Field(name, field_type, required, tuple(pairs)), question


def _typed(kind: str, prop: Mapping[str, Any]) -> TypedAnswer:

    def number(key: str) -> float | None:
        value = prop.get(key)
        return float(value) if isinstance(value, int | float) else None

    def count(key: str) -> int | None:
        value = prop.get(key)
        return value if isinstance(value, int) else None

    pattern, format_ = prop.get("pattern"), prop.get("format")
    return TypedAnswer(
        kind="integer" if kind == "integer" else "number" if kind == "number" else "string",
        min_length=count("minLength"),
        max_length=count("maxLength"),
        pattern=str(pattern) if pattern is not None else None,
        format=format_ if format_ in FORMATS else None,
        minimum=number("minimum"),
        maximum=number("maximum"),
    )


def parse_form(schema: Any) -> Form:
    problems: list[FieldProblem] = []
    if not isinstance(schema, Mapping):
        raise SchemaError([FieldProblem("form", "must be an object (a requestedSchema)")])
    if schema.get("type", "object") != "object":
        problems.append(FieldProblem("form.type", 'must be "object"'))
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        problems.append(FieldProblem("form.properties", "must be a non-empty object"))
        raise SchemaError(problems)
    if len(properties) > MAX_PROPERTIES:
        problems.append(FieldProblem("form.properties", f"at most {MAX_PROPERTIES} properties"))
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in properties for r in required):
        problems.append(FieldProblem("form.required", "must list properties of the form"))
        required = []
    if unknown := sorted(set(schema) - {"type", "properties", "required", "$schema", "title"}):
        problems.append(FieldProblem(f"form.{unknown[0]}", "is not allowed in a requestedSchema"))
    made = [
        pair
        for name, prop in properties.items()
        if (pair := _field(str(name), prop, name in required, problems)) is not None
    ]
    if problems:
        raise SchemaError(problems)
    return Form(dict(schema), tuple(f for f, _ in made), tuple(q for _, q in made))


def _value(f: Field, answer: Mapping[str, Any]) -> tuple[bool, Any]:
    """``(present, value)``; a value that cannot be read is returned as typed, for the schema
    check to name."""
    selected = [s for s in answer.get("selected") or [] if isinstance(s, str)]
    text = answer.get("text")
    if LEAVE_EMPTY in selected:
        return False, None
    by_label = dict(f.choices)
    if f.type == "multi":
        return True, [by_label[s] for s in selected if s in by_label]
    if f.type in ("enum", "boolean"):
        return (
            (True, by_label[selected[0]]) if selected and selected[0] in by_label else (False, None)
        )
    if not isinstance(text, str):
        return False, None
    if f.type == "string":
        return True, text
    return True, _number(text.strip(), integer=f.type == "integer")


def _number(text: str, *, integer: bool) -> Any:
    try:
        value = float(text.replace(",", "")) if not integer else int(text.replace(",", ""))
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text
    return value


def content_of(form: Form, answers: Mapping[str, Any]) -> dict[str, Any] | list[FieldProblem]:
    """What an MCP client returns for ``Answer.fields["answers"]``, or the schema's problems."""
    content: dict[str, Any] = {}
    for f in form.fields:
        given = answers.get(f.name)
        present, value = _value(f, given if isinstance(given, Mapping) else {})
        if present:
            content[f.name] = value
    validator = Draft202012Validator(form.schema, format_checker=FormatChecker())
    problems = [
        FieldProblem(".".join(str(p) for p in error.absolute_path) or "form", error.message)
        for error in sorted(validator.iter_errors(content), key=lambda e: list(e.absolute_path))
    ]
    return problems or content

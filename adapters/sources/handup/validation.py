"""handup Request validation: handup's JSON Schema and the rules it cannot say, every problem at
once, each naming its field."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from adapters.sources.common import join_loc, loc_path, repeats
from adapters.sources.handup.duration import parse_timeout
from bot.domain.errors import FieldProblem, PayloadRejected

MAX_QUESTIONS = 10
MAX_EXPIRES_AT = 253_370_764_800_000
"""9999-01-01T00:00:00Z in Unix milliseconds: a later ``expires_at`` is no date Python holds."""
MAX_ID_LENGTH = 200
ID_RE = re.compile(r"[A-Za-z0-9._:@+~-]{1,200}")
FEEDBACK_VALUES = (None, "optional", "required_on_deny")


@cache
def schema() -> dict[str, Any]:
    path = resources.files("adapters.sources.handup").joinpath("schema/request.schema.json")
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


@dataclass(frozen=True)
class CheckedRequest:
    """A valid Request with every default filled in; ``id`` may still be empty."""

    document: dict[str, Any]
    has_timeout: bool  # present (even null); absent, ``expires_at`` is used as given

    @property
    def id(self) -> str:
        return str(self.document["id"])

    @property
    def dedupe_key(self) -> str | None:
        key = self.document.get("dedupe_key")
        return key if isinstance(key, str) and key else None


def check(data: Any, allowlist: Sequence[str]) -> CheckedRequest:
    if problems := schema_problems(data):
        raise PayloadRejected(problems)
    document = with_defaults(data)
    if problems := _rule_problems(document, allowlist):
        raise PayloadRejected(problems)
    return CheckedRequest(document, has_timeout="timeout" in data)


def schema_problems(data: Any) -> list[FieldProblem]:
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.path)))
    return list(dict.fromkeys(p for error in errors for p in _problems(error)))  # each once


def _problems(error: ValidationError) -> list[FieldProblem]:
    loc = loc_path(error.absolute_path)
    instance = error.instance
    value: Any = error.validator_value
    rule_schema: Any = error.schema
    if error.validator == "required" and isinstance(instance, dict):
        return [
            FieldProblem(join_loc(loc, name), "is required")
            for name in value
            if name not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set((rule_schema.get("properties") or {}).keys())
        return [
            FieldProblem(join_loc(loc, name), "is not a field of a handup Request")
            for name in instance
            if name not in known
        ]
    if error.validator == "anyOf" and error.context:
        if instance is not None and not isinstance(instance, dict):
            return [FieldProblem(loc or "(body)", "must be an object or null")]
        # An object that fails the object branch: report that branch's problems, not "null".
        inner = [e for e in error.context if e.validator != "type" or e.relative_path]
        if not inner:
            return _problems(best_match(error.context))
        return [problem for e in inner for problem in _problems(e)]
    if error.validator == "type":
        names = value if isinstance(value, list) else [value]
        wanted = " or ".join("null" if n == "null" else f"{_article(str(n))} {n}" for n in names)
        return [FieldProblem(loc or "(body)", f"must be {wanted}")]
    if error.validator == "enum":
        choices = ", ".join(json.dumps(v) for v in value)
        return [FieldProblem(loc, f"must be one of {choices}")]
    if error.validator == "minimum":
        return [FieldProblem(loc, f"must be at least {value}")]
    return [FieldProblem(loc or "(body)", error.message)]


def _article(name: str) -> str:
    return "an" if name[:1] in "aeiou" else "a"


def with_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """The Request with the schema's top-level defaults filled in; absent optionals are null."""
    return {
        name: data[name] if name in data else json.loads(json.dumps(spec.get("default")))
        for name, spec in schema()["properties"].items()
    }


def _rule_problems(document: dict[str, Any], allowlist: Sequence[str]) -> list[FieldProblem]:
    problems: list[FieldProblem] = []

    def fail(loc: str, message: str) -> None:
        problems.append(FieldProblem(loc, message))

    request_id = document["id"]
    if request_id and not ID_RE.fullmatch(request_id):
        fail("id", f"must be 1 to {MAX_ID_LENGTH} of A-Z a-z 0-9 . _ : @ + ~ -")
    if document["status"] != "pending":
        fail("status", 'must be "pending" (or absent) for a new request')
    problems += [
        FieldProblem(managed, "is set by the daemon: send null or leave it out")
        for managed in ("decision", "run")
        if document[managed] is not None
    ]
    if (timeout := document["timeout"]) is not None:
        try:
            parse_timeout(timeout)
        except ValueError as exc:  # the reason too: "…; this one has an unknown unit 'H'"
            fail("timeout", str(exc))
    expires_at = document["expires_at"]
    if expires_at is not None and expires_at > MAX_EXPIRES_AT:
        fail("expires_at", "must be Unix milliseconds no later than 9999-01-01T00:00:00Z")
    problems.extend(_option_problems(document))
    request_input = document["input"] or {}
    if request_input.get("feedback") not in FEEDBACK_VALUES:
        fail("input.feedback", 'must be "optional", "required_on_deny" or null')
    if document["kind"] == "question":
        problems.extend(_question_problems(request_input.get("questions")))
    callback = document["callback_url"]
    if callback is not None and not callback_allowed(callback, allowlist):
        fail("callback_url", "is not on the callback allowlist (sources.handup.callback_allowlist)")
    return problems


def _option_problems(document: dict[str, Any]) -> list[FieldProblem]:
    options = document["options"]
    if document["kind"] != "question" and not options:
        return [FieldProblem("options", "a request needs at least one option to choose")]
    return [
        FieldProblem(f"options[{index}].id", "duplicates another option id")
        for index, _ in repeats(option["id"] for option in options)
    ]


def _question_problems(questions: Any) -> list[FieldProblem]:
    if not questions or len(questions) > MAX_QUESTIONS:
        needs = f"a question request needs 1 to {MAX_QUESTIONS} questions"
        return [FieldProblem("input.questions", needs)]
    problems = []
    repeated = {index for index, _ in repeats(question["id"] for question in questions)}
    for index, question in enumerate(questions):
        where = f"input.questions[{index}]"
        if index in repeated:
            problems.append(FieldProblem(f"{where}.id", "duplicates another question id"))
        options = question.get("options") or []
        problems += [
            FieldProblem(f"{where}.options[{position}].label", "duplicates another label")
            for position, _ in repeats(option["label"] for option in options)
        ]
        recommended = question.get("recommended")
        if recommended is not None and recommended >= len(options):
            problems.append(FieldProblem(f"{where}.recommended", "must index one of its options"))
    return problems


def callback_allowed(url: str, allowlist: Iterable[str]) -> bool:
    """Whether ``url`` is under an allowlist entry: same scheme, host and port, and a path at or
    below the entry's (whole segments: ``/hooks`` allows ``/hooks/x``, not ``/hooksx``)."""
    if (target := _url_parts(url)) is None:
        return False
    for entry in allowlist:
        allowed = _url_parts(entry)
        if allowed is None or allowed[:3] != target[:3]:
            continue
        prefix = allowed[3].rstrip("/")
        path = target[3]
        if not prefix or path == prefix or path.startswith(prefix + "/"):
            return True
    return False


def _url_parts(url: str) -> tuple[str, str, int, str] | None:
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or parts.username is not None:
        return None
    default = 443 if scheme == "https" else 80
    return scheme, parts.hostname.lower(), port or default, parts.path or "/"

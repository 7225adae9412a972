"""One set of bounds at intake, for every source: what an identifier or a text may hold.

:func:`check_elicitation` checks an :class:`~bot.domain.model.Elicitation` against :data:`BOUNDS`
before any store sees it, naming each field as the source calls it (:data:`FIELD_NAMES`). Nothing
is trimmed: out of bounds is refused (400), so what is accepted is exactly what can be read back.
An identifier has no control or separator character, lone surrogate or outer whitespace; a text no
NUL or lone surrogate. Lengths are in code points; identifier maxima fit the narrowest columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.domain.errors import FieldProblem
from bot.domain.model import Elicitation

ID_MAX = 200
"""An identifier: an elicitation / question / request / delivery id, a CloudEvent ``id``, a board,
card, run, stage, task or conversation id, a workspace, an asker, an option id, a subject id."""
SOURCE_NAME_MAX = 40
"""elicitbot's own name of a source (``superpipeline``, ``engine``...)."""
KEY_MAX = SOURCE_NAME_MAX + 1 + ID_MAX
"""The longest ``<source>:<source id>`` key."""
CE_SOURCE_MAX = 255
"""A CloudEvent ``source`` (a URI-reference)."""
CE_TYPE_MAX = 255
CE_SUBJECT_MAX = 255
TEXT_MAX = 1_048_576
"""A free text (a question, a title, a label, a preview's text...): no source's spec bounds it,
so the request body's 1 MiB is the bound (no more characters than bytes). A source whose spec
bounds a field checks it in its parser."""


class Rule(StrEnum):
    ID = "identifier"
    TEXT = "text"


@dataclass(frozen=True)
class Bound:
    rule: Rule
    max_length: int
    required: bool = False
    """The value must not be empty (absent/None stays allowed where the model allows it)."""


_ID = Bound(Rule.ID, ID_MAX)
_TEXT = Bound(Rule.TEXT, TEXT_MAX)

BOUNDS: Mapping[str, Bound] = {
    "source": Bound(Rule.ID, SOURCE_NAME_MAX, required=True),
    "source_id": Bound(Rule.ID, ID_MAX, required=True),
    "workspace": _ID,
    "context.board_id": _ID,
    "context.board_name": _TEXT,
    "context.card_id": _ID,
    "context.card_title": _TEXT,
    "context.run_id": _ID,
    "context.stage_key": _ID,
    "context.task_id": _ID,
    "context.conversation_id": _ID,
    "asker": _ID,
    "title": _TEXT,
    "question": _TEXT,
    "approval_request_id": _ID,
    "options[].id": _ID,
    "options[].label": _TEXT,
    "options[].description": _TEXT,
    "options[].style": _ID,
    "options[].outcome": _ID,
    "subject.id": _ID,
    "subject.digest": _ID,
    "subject.schema": _ID,
    "subject.preview[].type": _ID,
    "subject.preview[].label": _TEXT,
    "subject.preview[].text": _TEXT,
    "subject.preview[].value": _TEXT,
    "subject.preview[].url": _TEXT,
    "subject.preview[].language": _ID,
    "deadlines.on_timeout": _ID,
}
"""Every identifier and text field of the normalised elicitation (``[]``: any index), and its
bound. ``extra`` (values a write-back needs) is checked for the text rule only: no NUL, no lone
surrogate, in keys and values alike; its size is bounded by the intake body."""

ENVELOPE_BOUNDS: Mapping[str, Bound] = {
    "id": Bound(Rule.ID, ID_MAX, required=True),
    "source": Bound(Rule.ID, CE_SOURCE_MAX, required=True),
    "type": Bound(Rule.ID, CE_TYPE_MAX, required=True),
    "subject": Bound(Rule.ID, CE_SUBJECT_MAX),
}
"""A CloudEvent's context attributes that elicitbot stores or matches on."""

Name = str | tuple[str, str]
"""A field's name in a source's document; ``(name, what)`` when the value is made from that field
(``what`` opens the message, e.g. ``the workspace in it``)."""

FIELD_NAMES: Mapping[str, Mapping[str, Name]] = {
    # CloudEvents ``elicitation.pending``: locations relative to the event (as its parser names
    # them); the workspace is read from the event's ``subject``.
    "superpipeline": {
        "source_id": "data.elicitationId",
        "workspace": ("subject", "the workspace in it"),
        "context.board_id": "data.boardId",
        "context.board_name": "data.boardName",
        "context.card_id": "data.cardId",
        "context.card_title": "data.cardTitle",
        "context.run_id": "data.runId",
        "context.stage_key": "data.stageKey",
        "asker": "data.agentId",
        "question": "data.question",
        "approval_request_id": "data.approvalRequestId",
        "options": "data.options",
        "subject": "data.approvalSubject",
        "extra": "data",
    },
    # POST /v1/deliveries: {"id", "ask": {...}, "destinations", "followup_seconds"}.
    "engine": {
        "source_id": "id",
        "subject.id": "id",
        "asker": "ask.sender_id",
        "title": "ask.title",
        "question": "ask.body",
        "context.conversation_id": "ask.conversation_id",
        "options[].id": "ask.choices[]",
        "options[].label": "ask.choices[]",
        "subject.preview[].text": ("ask.action", "its JSON"),
        "extra": "ask",
        "extra.id": "id",
        "extra.destinations": "destinations",
        "extra.followup_seconds": "followup_seconds",
    },
    # POST /api/elicitation: {"executionId", "toolPath", "message", "args", "type"}.
    "toolshed": {
        "source_id": "executionId",
        "subject.id": "executionId",
        "title": ("toolPath", 'the title made from it ("Run <toolPath>?")'),
        "question": "message",
        "subject.preview[].value": "toolPath",
        "subject.preview[].text": ("args", "their JSON"),
        "extra": "",
    },
    # A Pinework question, as its API lists it.
    "pinework": {
        "source_id": "id",
        "workspace": "workspaceId",
        "context.task_id": "taskId",
        "context.conversation_id": "conversationId",
        "context.run_id": "runId",
        "asker": "askedBy.id",
        "question": "text",
        "options[].id": "options[].key",
        "options[].label": "options[].label",
        "extra.questionId": "id",
        "extra.sessionId": "sessionId",
        "extra.answerMode": "answerMode",
    },
    # POST /v1/handup/requests: a handup Request.
    "handup": {
        "source_id": "id",
        "subject.id": "id",
        "title": "title",
        "question": "summary",
        "asker": "source.agent",
        "context.conversation_id": "source.session",
        "extra.request": "",
        "extra.form": "input.questions",
    },
}
"""Per source: a normalised field (or a prefix of one: ``options`` covers ``options[].id``) ->
its name in the source's document. Unnamed fields keep their normalised name."""

_ID_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_TEXT_BAD = re.compile("[\x00\ud800-\udfff]")
_INDEX = re.compile(r"\[(\d+)\]")
_HOLE = re.compile(r"\[\]")


# --- one value ---------------------------------------------------------------------------------


def _bad_character(value: str, pattern: re.Pattern[str]) -> str | None:
    found = pattern.search(value)
    if found is None:
        return None
    char = found.group()
    code = ord(char)
    if code == 0:
        what = "NUL"
    elif 0xD800 <= code <= 0xDFFF:  # noqa: PLR2004 - the surrogate block
        what = "a lone surrogate (not valid Unicode)"
    elif code in (0x2028, 0x2029):  # line and paragraph separators
        what = "a line separator"
    else:
        what = "a control character"
    return f"must not contain {what} (U+{code:04X} at position {found.start()})"


def id_problem(value: str, *, max_length: int = ID_MAX, required: bool = False) -> str | None:
    """Why ``value`` is no acceptable identifier, or None."""
    found = _problem(value, max_length, required, _ID_BAD)
    if found is None and value and (value[0].isspace() or value[-1].isspace()):
        return "must not begin or end with whitespace"
    return found


def text_problem(value: str, *, max_length: int = TEXT_MAX, required: bool = False) -> str | None:
    """Why ``value`` is no acceptable text, or None."""
    return _problem(value, max_length, required, _TEXT_BAD)


def _problem(value: str, max_length: int, required: bool, bad: re.Pattern[str]) -> str | None:
    if not value:
        return "must not be empty" if required else None
    if len(value) > max_length:
        return f"must be at most {max_length} characters (has {len(value)})"
    return _bad_character(value, bad)


def problem(value: str, bound: Bound) -> str | None:
    """Why ``value`` breaks ``bound``, or None."""
    check = id_problem if bound.rule is Rule.ID else text_problem
    return check(value, max_length=bound.max_length, required=bound.required)


def lookup_problem(value: str) -> str | None:
    """Why ``value`` can name no elicitation (a source id or ``<source>:<source id>``), or None:
    read routes refuse an id never acceptable (400) without asking a store."""
    return id_problem(value, max_length=KEY_MAX, required=True)


# --- a CloudEvent's envelope -------------------------------------------------------------------


def check_cloudevent(
    event_id: str, source: str, type_: str | None = None, subject: str | None = None
) -> list[FieldProblem]:
    """The envelope's ``id``, ``source``, ``type`` and ``subject`` (locations as CloudEvents names
    them; a batch prefixes the event's index)."""
    values = {"id": event_id, "source": source, "type": type_, "subject": subject}
    return [
        FieldProblem(name, found)
        for name, value in values.items()
        if value is not None and (found := problem(value, ENVELOPE_BOUNDS[name])) is not None
    ]


# --- a whole elicitation -----------------------------------------------------------------------


def check_elicitation(
    e: Elicitation, *, names: Mapping[str, Name] | None = None
) -> list[FieldProblem]:
    """Every field of ``e`` out of bounds, each named as its source's document calls it
    (``names``, default :data:`FIELD_NAMES` of ``e.source``); ``[]`` when all are in bounds."""
    if _in_bounds(e):  # the usual case, told without naming a field
        return []
    table = FIELD_NAMES.get(e.source, {}) if names is None else names
    problems: list[FieldProblem] = []
    seen: set[tuple[str, str]] = set()
    for loc, value, bound in _fields(e):
        found = _bad_character(value, _TEXT_BAD) if bound is None else problem(value, bound)
        if found is None:
            continue
        named = _rename(loc, found, table)
        if (named.loc, named.message) not in seen:
            seen.add((named.loc, named.message))
            problems.append(named)
    return problems


def _in_bounds(e: Elicitation) -> bool:
    """Every field of ``e`` in bounds: :func:`problem` of each is None (and no value in ``extra``
    breaks the text rule), checked without building a location for any."""
    id_bad, text_bad = _ID_BAD.search, _TEXT_BAD.search
    for _, _, value, bound in _located(e):
        if not value:
            if bound.required:
                return False
            continue
        if len(value) > bound.max_length:
            return False
        if bound.rule is Rule.ID:
            if id_bad(value) or value[0].isspace() or value[-1].isspace():
                return False
        elif text_bad(value):
            return False
    return not any(text_bad(value) for value in _string_values(e.extra))


_OPTION_FIELDS = tuple(
    (name, f"options[].{name}", BOUNDS[f"options[].{name}"])
    for name in ("id", "label", "description", "style", "outcome")
)
_PREVIEW_FIELDS = tuple(
    (name, f"subject.preview[].{name}", BOUNDS[f"subject.preview[].{name}"])
    for name in ("type", "label", "text", "value", "url", "language")
)


def _fields(e: Elicitation) -> Iterator[tuple[str, str, Bound | None]]:
    """(normalised location, value, bound) of every identifier and text field that is set; the
    bound None: a value in ``extra`` (the text rule, no maximum)."""
    for template, index, value, bound in _located(e):
        loc = template if index is None else template.replace("[]", f"[{index}]", 1)
        yield loc, value, bound
    for loc, value in _strings(e.extra, "extra"):
        yield loc, value, None


def _located(e: Elicitation) -> Iterator[tuple[str, int | None, str, Bound]]:
    """(location template, its index, value, bound) of every identifier and text field that is
    set, ``extra`` aside: the template is a key of :data:`BOUNDS`, its ``[]`` that index."""
    c = e.context
    plain: list[tuple[str, str | None]] = [
        ("source", e.source),
        ("source_id", e.source_id),
        ("workspace", e.workspace),
        ("context.board_id", c.board_id),
        ("context.board_name", c.board_name),
        ("context.card_id", c.card_id),
        ("context.card_title", c.card_title),
        ("context.run_id", c.run_id),
        ("context.stage_key", c.stage_key),
        ("context.task_id", c.task_id),
        ("context.conversation_id", c.conversation_id),
        ("asker", e.asker),
        ("question", e.question),
        ("approval_request_id", e.approval_request_id),
        ("deadlines.on_timeout", e.deadlines.on_timeout),
    ]
    if e.title not in (c.card_title, c.board_name):
        plain.append(("title", e.title))  # else it is checked (and named) as that field
    for template, value in plain:
        if value is not None:
            yield template, None, value, BOUNDS[template]
    for i, o in enumerate(e.options):
        for name, template, bound in _OPTION_FIELDS:
            if (value := getattr(o, name)) is not None:
                yield template, i, value, bound
    if e.subject is not None:
        s = e.subject
        for template, value in (
            ("subject.id", s.id),
            ("subject.digest", s.digest),
            ("subject.schema", s.schema_),
        ):
            if value is not None:
                yield template, None, value, BOUNDS[template]
        for i, p in enumerate(s.preview):
            for name, template, bound in _PREVIEW_FIELDS:
                if (value := getattr(p, name)) is not None:
                    yield template, i, value, bound


def _strings(value: Any, loc: str) -> Iterator[tuple[str, str]]:
    """Every string in a JSON-like value, keys included, with its location."""
    stack: list[tuple[str, Any]] = [(loc, value)]
    while stack:
        here, item = stack.pop()
        if isinstance(item, str):
            yield here, item
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str):
                    yield f"{here}.{key}", key
                stack.append((f"{here}.{key}", inner))
        elif isinstance(item, list | tuple):
            stack.extend((f"{here}[{i}]", inner) for i, inner in enumerate(item))


def _string_values(value: Any) -> Iterator[str]:
    """The strings :func:`_strings` finds, without their locations."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for key, inner in item.items():
                if isinstance(key, str):
                    yield key
                stack.append(inner)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _template(loc: str) -> str:
    return _INDEX.sub("[]", loc)


def _rename(loc: str, message: str, names: Mapping[str, Name]) -> FieldProblem:
    """``loc`` as the source names it: the longest entry of ``names`` that is ``loc``'s template
    or a prefix of it (ending at a ``.`` or ``[``), its indexes filled in order."""
    template = _template(loc)
    best = ""
    for key in names:
        if len(key) > len(best) and (
            template == key or template.startswith((f"{key}.", f"{key}["))
        ):
            best = key
    if not best:
        return FieldProblem(loc, message)
    name = names[best]
    target, what = (name, None) if isinstance(name, str) else name
    renamed = (target + template[len(best) :]).removeprefix(".")
    indexes = iter(_INDEX.findall(loc))
    renamed = _HOLE.sub(lambda _: f"[{next(indexes, '')}]", renamed)
    return FieldProblem(renamed or loc, f"{what} {message}" if what else message)

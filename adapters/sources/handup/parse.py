"""handup approval requests (spec 004): a Request in, a normalised Elicitation out, and back.

Pure (no I/O). :func:`check` validates a Request against the spec's JSON Schema (shipped as
``schema/request.schema.json``, checked with ``jsonschema``) and the rules the schema cannot say,
reporting every problem at once; :func:`to_elicitation` maps the checked Request;
:func:`request_document` is the Request as it stands (status and decision), for the intake
response, ``GET /v1/handup/requests/{id}`` and the callback.

Times in a Request are Unix milliseconds. elicitbot stands in for the handup daemon: it assigns
``id`` (when absent), ``created_at``, ``expires_at`` (from ``timeout``), ``content_hash`` and
``status``; ``source.integration`` is server-verified, so a caller's value is dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Context,
    Deadlines,
    Elicitation,
    Kind,
    Meaning,
    Option,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView

SOURCE = "handup"
SUBJECT_SCHEMA = "handup.request"
TIMEOUT_ACTOR = "timeout"
"""``decision.decided_by`` of a decision taken at timeout (``on_timeout``)."""
MAX_TIMEOUT = timedelta(days=365)
MAX_QUESTIONS = 10
MAX_ID_LENGTH = 200
ID_RE = re.compile(r"[A-Za-z0-9._:@+~-]{1,200}")
_DURATION_RE = re.compile(r"(?:[0-9]+[smhd])+")
_DURATION_PART = re.compile(r"([0-9]+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_HELP = (
    'must be a positive duration such as "90s", "15m", "2h" or "7d" (at most one year), or "none"'
)
FEEDBACK_VALUES = (None, "optional", "required_on_deny")
CONTENT_FIELDS = (
    "kind",
    "title",
    "summary",
    "tool",
    "risk",
    "source",
    "previews",
    "options",
    "input",
)
"""What a person decides on: ``content_hash`` is the SHA-256 of these, canonical JSON."""
LINK_PREVIEWS = frozenset({"image", "video", "audio", "file", "pdf"})


@cache
def schema() -> dict[str, Any]:
    """The Request JSON Schema (draft 2020-12) as spec 004 publishes it."""
    text = (
        resources.files("adapters.sources.handup")
        .joinpath("schema/request.schema.json")
        .read_text(encoding="utf-8")
    )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


# --- checking ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedRequest:
    """A valid Request with every default filled in; ``id`` may still be empty."""

    document: dict[str, Any]
    has_timeout: bool
    """``timeout`` was present (a string or null); absent, ``expires_at`` is used as given."""

    @property
    def id(self) -> str:
        return str(self.document["id"])

    @property
    def dedupe_key(self) -> str | None:
        key = self.document.get("dedupe_key")
        return key if isinstance(key, str) and key else None


def check(data: Any, allowlist: Sequence[str]) -> CheckedRequest:
    """The Request, validated against the schema and the spec's rules; PayloadRejected names
    every bad field (``options[1].outcome``, ``input.questions[0].recommended``…)."""
    problems = schema_problems(data)
    if problems:
        raise PayloadRejected(problems)
    document = with_defaults(data)
    problems = _rule_problems(document, allowlist)
    if problems:
        raise PayloadRejected(problems)
    return CheckedRequest(document, has_timeout="timeout" in data)


def schema_problems(data: Any) -> list[FieldProblem]:
    """Each way ``data`` breaks the Request schema, one problem per field."""
    problems: list[FieldProblem] = []
    for error in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.path))):
        problems.extend(_problems(error))
    return _unique(problems)


def _unique(problems: Iterable[FieldProblem]) -> list[FieldProblem]:
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        if (p.loc, p.message) not in seen:
            seen.add((p.loc, p.message))
            out.append(p)
    return out


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _join(base: str, name: str) -> str:
    return f"{base}.{name}" if base else name


def _problems(error: ValidationError) -> list[FieldProblem]:
    loc = _path(error.absolute_path)
    instance = error.instance
    value: Any = error.validator_value
    rule_schema: Any = error.schema
    if error.validator == "required" and isinstance(instance, dict):
        return [
            FieldProblem(_join(loc, name), "is required") for name in value if name not in instance
        ]
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = set((rule_schema.get("properties") or {}).keys())
        return [
            FieldProblem(_join(loc, name), "is not a field of a handup Request")
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
    document: dict[str, Any] = {}
    for name, spec in schema()["properties"].items():
        if name in data:
            document[name] = data[name]
        else:
            document[name] = json.loads(json.dumps(spec.get("default")))
    return document


def _rule_problems(document: dict[str, Any], allowlist: Sequence[str]) -> list[FieldProblem]:
    """What the schema cannot say: daemon-managed fields, ids, options, questions, the timeout,
    the feedback mode and the callback allowlist."""
    problems: list[FieldProblem] = []
    request_id = document["id"]
    if request_id and not ID_RE.fullmatch(request_id):
        problems.append(
            FieldProblem("id", f"must be 1 to {MAX_ID_LENGTH} of A-Z a-z 0-9 . _ : @ + ~ -")
        )
    if document["status"] != "pending":
        problems.append(FieldProblem("status", 'must be "pending" (or absent) for a new request'))
    for managed in ("decision", "run"):
        if document[managed] is not None:
            problems.append(
                FieldProblem(managed, "is set by the daemon: send null or leave it out")
            )
    timeout = document["timeout"]
    if timeout is not None:
        try:
            parse_timeout(timeout)
        except ValueError:
            problems.append(FieldProblem("timeout", DURATION_HELP))
    problems.extend(_option_problems(document))
    request_input = document["input"] or {}
    if request_input.get("feedback") not in FEEDBACK_VALUES:
        problems.append(
            FieldProblem("input.feedback", 'must be "optional", "required_on_deny" or null')
        )
    if document["kind"] == "question":
        problems.extend(_question_problems(request_input.get("questions")))
    callback = document["callback_url"]
    if callback is not None and not callback_allowed(callback, allowlist):
        problems.append(
            FieldProblem(
                "callback_url",
                "is not on the callback allowlist (sources.handup.callback_allowlist)",
            )
        )
    return problems


def _option_problems(document: dict[str, Any]) -> list[FieldProblem]:
    options = document["options"]
    if document["kind"] != "question" and not options:
        return [FieldProblem("options", "a request needs at least one option to choose")]
    problems = []
    seen: set[str] = set()
    for index, option in enumerate(options):
        if option["id"] in seen:
            problems.append(FieldProblem(f"options[{index}].id", "duplicates another option id"))
        seen.add(option["id"])
    return problems


def _question_problems(questions: Any) -> list[FieldProblem]:
    if not questions or len(questions) > MAX_QUESTIONS:
        return [
            FieldProblem(
                "input.questions", f"a question request needs 1 to {MAX_QUESTIONS} questions"
            )
        ]
    problems = []
    ids: set[str] = set()
    for index, question in enumerate(questions):
        where = f"input.questions[{index}]"
        if question["id"] in ids:
            problems.append(FieldProblem(f"{where}.id", "duplicates another question id"))
        ids.add(question["id"])
        labels: set[str] = set()
        options = question.get("options") or []
        for position, option in enumerate(options):
            if option["label"] in labels:
                problems.append(
                    FieldProblem(f"{where}.options[{position}].label", "duplicates another label")
                )
            labels.add(option["label"])
        recommended = question.get("recommended")
        if recommended is not None and recommended >= len(options):
            problems.append(FieldProblem(f"{where}.recommended", "must index one of its options"))
    return problems


def parse_timeout(text: str) -> timedelta | None:
    """``"90s"``, ``"15m"``, ``"2h"``, ``"7d"`` (or a sum like ``"1h30m"``); ``"none"``: None.
    ValueError unless positive and at most a year."""
    value = text.strip().lower()
    if value == "none":
        return None
    if not _DURATION_RE.fullmatch(value):
        raise ValueError(DURATION_HELP)
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(value))
    if seconds <= 0 or timedelta(seconds=seconds) > MAX_TIMEOUT:
        raise ValueError(DURATION_HELP)
    return timedelta(seconds=seconds)


def callback_allowed(url: str, allowlist: Iterable[str]) -> bool:
    """Whether ``url`` is under an allowlist entry: same scheme, host and port, and a path at or
    below the entry's (whole segments: ``/hooks`` allows ``/hooks/x``, not ``/hooksx``)."""
    target = _url_parts(url)
    if target is None:
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


# --- ids ---------------------------------------------------------------------------------------


def new_request_id() -> str:
    return f"hr_{uuid.uuid4().hex}"


def dedupe_request_id(dedupe_key: str, generation: int) -> str:
    """The id of the ``generation``-th request of a ``dedupe_key`` sent without an id: retries
    of a pending request land on its id; once it is decided, the next generation is new."""
    digest = hashlib.sha256(f"{generation}:{dedupe_key}".encode()).hexdigest()
    return f"hr_{digest[:32]}"


def key_of(request_id: str) -> str:
    return f"{SOURCE}:{request_id}"


# --- mapping -----------------------------------------------------------------------------------


def to_elicitation(
    checked: CheckedRequest,
    *,
    request_id: str,
    now: datetime,
    default_timeout: timedelta | None = None,
) -> Elicitation:
    """The elicitation of a checked Request under ``request_id``, taken in at ``now``.

    Expiry: ``timeout`` when present (``none``/null: never); else ``expires_at`` as given; else
    ``default_timeout`` (the config's, "absent uses config"), if any."""
    document = dict(checked.document)
    source = dict(document["source"] or {})
    source["integration"] = None  # server-verified in handup; elicitbot verifies none
    document["source"] = source
    document["id"] = request_id
    document["status"] = "pending"
    document["created_at"] = to_millis(now)
    expires = _expiry(checked, now, default_timeout)
    document["expires_at"] = to_millis(expires) if expires is not None else None
    document["content_hash"] = content_hash(document)
    kind = document["kind"]
    questions = _questions(document)
    mode, options = _answers_offered(document, questions)
    summary = document["summary"] or ""
    return Elicitation(
        source=SOURCE,
        source_id=request_id,
        context=Context(conversation_id=source.get("session")),
        asker=source.get("agent") or f"{SOURCE}:agent",
        kind=Kind.QUESTION if kind == "question" else Kind.APPROVAL,
        title=document["title"],
        question=_question_text(summary, questions),
        answer_mode=mode,
        options=options,
        subject=ApprovalSubject(
            id=request_id,
            digest=document["content_hash"],
            schema_=SUBJECT_SCHEMA,
            revision=0,
            preview=tuple(_context_items(document))
            + tuple(item for p in document["previews"] for item in preview_items(p)),
        ),
        deadlines=Deadlines(
            expires_at=expires, on_timeout=document["on_timeout"] if expires else None
        ),
        created_at=now,
        extra={"request": document, **({"form": questions} if questions is not None else {})},
    )


def to_millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def from_millis(millis: int) -> datetime:
    return datetime.fromtimestamp(millis / 1000, UTC)


def _expiry(
    checked: CheckedRequest, now: datetime, default_timeout: timedelta | None
) -> datetime | None:
    document = checked.document
    if checked.has_timeout:
        timeout = document["timeout"]
        duration = parse_timeout(timeout) if timeout is not None else None
        return now + duration if duration is not None else None
    given = document["expires_at"]
    if given:
        return from_millis(given)
    return now + default_timeout if default_timeout is not None else None


def content_hash(document: Mapping[str, Any]) -> str:
    canonical = json.dumps(
        {name: document.get(name) for name in CONTENT_FIELDS},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _questions(document: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A question request's questions, each with its defaults; None for other kinds."""
    if document["kind"] != "question":
        return None
    out = []
    for question in (document["input"] or {}).get("questions") or []:
        out.append(
            {
                "id": question["id"],
                "header": question.get("header"),
                "question": question["question"],
                "multi": bool(question.get("multi", False)),
                "allow_free_text": bool(question.get("allow_free_text", False)),
                "recommended": question.get("recommended"),
                "options": [
                    {
                        "label": o["label"],
                        "description": o.get("description"),
                        "preview": o.get("preview"),
                    }
                    for o in question.get("options") or []
                ],
            }
        )
    return out


def _answers_offered(
    document: Mapping[str, Any], questions: list[dict[str, Any]] | None
) -> tuple[AnswerMode, tuple[Option, ...]]:
    """How a person answers. An approval: one of its options (a deny option needs a comment
    under ``feedback: required_on_deny``). One question: its options (ids are the labels), or
    a text. Several questions: a form (``extra["form"]``); in chat, a written answer."""
    if questions is None:
        required = ((document["input"] or {}).get("feedback")) == "required_on_deny"
        return AnswerMode.SINGLE_CHOICE, tuple(
            Option(
                id=o["id"],
                label=o["label"],
                meaning=Meaning.APPROVE if o["outcome"] == "approve" else Meaning.REJECT,
                outcome=o["outcome"],
                style=o.get("style"),
                requires_text=required and o["outcome"] == "deny",
            )
            for o in document["options"]
        )
    if len(questions) != 1 or not questions[0]["options"]:
        return AnswerMode.FREE_TEXT, ()
    only = questions[0]
    options = tuple(
        Option(
            id=o["label"],
            label=o["label"],
            description=o["description"],
            recommended=index == only["recommended"],
        )
        for index, o in enumerate(only["options"])
    )
    if only["multi"]:
        return AnswerMode.MULTI_CHOICE, options
    if only["allow_free_text"]:
        return AnswerMode.CHOICE_OR_TEXT, options
    return AnswerMode.SINGLE_CHOICE, options


def _question_text(summary: str, questions: list[dict[str, Any]] | None) -> str:
    parts = [summary.strip()] if summary.strip() else []
    if questions is None:
        return "\n\n".join(parts)
    if len(questions) == 1:
        only = questions[0]
        head = f"**{only['header']}** — " if only["header"] else ""
        parts.append(head + only["question"])
        return "\n\n".join(parts)
    for number, q in enumerate(questions, start=1):
        head = f"{number}. **{q['header']}** — " if q["header"] else f"{number}. "
        lines = [head + q["question"]]
        for index, o in enumerate(q["options"]):
            line = f"   - {o['label']}"
            if index == q["recommended"]:
                line += " (recommended)"
            if o["description"]:
                line += f" — {o['description']}"
            lines.append(line)
        if q["multi"]:
            lines.append("   (choose one or more)")
        if q["allow_free_text"] or not q["options"]:
            lines.append("   (a written answer works)")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _context_items(document: Mapping[str, Any]) -> list[PreviewItem]:
    source = document["source"] or {}
    fields = [
        ("Risk", document["risk"]),
        ("Tool", document["tool"]),
        ("Agent", source.get("agent")),
        ("Session", source.get("session_title") or source.get("session")),
        ("Host", source.get("host")),
        ("Repository", source.get("repo")),
        ("Branch", source.get("branch")),
        ("Working directory", source.get("cwd")),
    ]
    return [PreviewItem(type="field", label=name, value=str(v)) for name, v in fields if v]


def _is_web_link(value: str | None) -> bool:
    if not value:
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _size(size: int | None) -> str:
    return f"{size:,} bytes" if size is not None else ""


def _about(*parts: str | None) -> str:
    return ", ".join(p for p in parts if p)


def preview_items(preview: Mapping[str, Any]) -> list[PreviewItem]:
    """One handup preview as what every surface can show: text kinds as text (HTML as its source,
    never rendered), files and email composed as text, media as links (or named when they are
    only a blob)."""
    kind = preview["type"]
    label = preview.get("title") or preview.get("name")
    inline = preview.get("inline")
    if kind in ("text", "markdown", "diff", "json", "code"):
        text = inline
        if (
            text is None
            and kind == "diff"
            and (preview.get("before_blob") or preview.get("after_blob"))
        ):
            text = f"(diff of blob {preview.get('before_blob')} → blob {preview.get('after_blob')})"
        language = "json" if kind == "json" else preview.get("lang")
        return [PreviewItem(type=kind, label=label, text=text or "", language=language)]
    if kind == "html":
        return [
            PreviewItem(type="text", label=label or "HTML (shown as source)", text=inline or "")
        ]
    if kind == "files":
        lines = [
            f"{f['path']} ({_about(f.get('mime'), _size(f.get('size')))})"
            for f in preview.get("files") or []
        ]
        return [PreviewItem(type="files", label=label or "Files", text="\n".join(lines))]
    if kind == "command":
        return _command_items(preview, label)
    if kind == "email":
        return [PreviewItem(type="email", label=label or "Email draft", text=_email_text(preview))]
    if kind in LINK_PREVIEWS:
        url = inline if _is_web_link(inline) else None
        name = preview.get("name") or preview.get("entry")
        blob = preview.get("blob")
        about = _about(
            kind, name, preview.get("mime"), _size(preview.get("size")), blob and f"blob {blob}"
        )
        return [PreviewItem(type="link", label=label or kind, url=url, text=about)]
    return [PreviewItem(type="text", label=label, text=inline or "")]


def _command_items(preview: Mapping[str, Any], label: str | None) -> list[PreviewItem]:
    command = preview.get("command") or {}
    argv = command.get("argv")
    text = command.get("shell") or (shlex.join(argv) if argv else None) or preview.get("inline")
    items = [PreviewItem(type="command", label=label or "Command", text=text or "")]
    if command.get("cwd"):
        items.append(PreviewItem(type="field", label="Runs in", value=command["cwd"]))
    if command.get("env_keys"):
        items.append(
            PreviewItem(type="field", label="Environment", value=", ".join(command["env_keys"]))
        )
    return items


def _email_text(preview: Mapping[str, Any]) -> str:
    """The draft as a person reads it: headers, the Markdown body, attachments, the quote.
    ``body_html`` is never shown (HTML only as text)."""
    email = preview.get("email") or {}
    lines = [
        f"{name}: {value}"
        for name, value in (
            ("From", email.get("from")),
            ("To", ", ".join(email.get("to") or [])),
            ("Cc", ", ".join(email.get("cc") or [])),
            ("Bcc", ", ".join(email.get("bcc") or [])),
            ("Reply-To", email.get("reply_to")),
            ("Date", email.get("date")),
            ("Subject", email.get("subject")),
        )
        if value
    ]
    body = email.get("body") or preview.get("inline") or ""
    if body:
        lines += ["", body]
    attachments = [_attachment(a) for a in email.get("attachments") or []]
    if attachments:
        lines += ["", "Attachments: " + "; ".join(attachments)]
    quoted = email.get("in_reply_to")
    if quoted:
        who = _about(quoted.get("from"), quoted.get("date"))
        lines += ["", f"In reply to ({who}):" if who else "In reply to:"]
        lines += [f"> {line}" for line in (quoted.get("body") or "").splitlines()]
    return "\n".join(lines)


def _attachment(attachment: Mapping[str, Any]) -> str:
    about = _about(attachment.get("mime"), _size(attachment.get("size")))
    return f"{attachment['name']} ({about})" if about else str(attachment["name"])


# --- the Request as it stands ------------------------------------------------------------------


def request_document(view: PromptView) -> dict[str, Any]:
    """The stored Request with its current ``status`` and ``decision``."""
    document = dict(view.elicitation.extra["request"])
    status, decision = _decision(view, document)
    document["status"] = status
    document["decision"] = decision
    return document


def _option_of(document: Mapping[str, Any], option_id: str) -> Mapping[str, Any] | None:
    return next((o for o in document["options"] if o["id"] == option_id), None)


def _decision(view: PromptView, document: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    answer = view.answer
    if view.status is Status.PENDING:
        return "pending", None
    if view.status is Status.CANCELLED:
        return "cancelled", None
    content = (answer.subject_digest if answer else None) or document["content_hash"]
    if view.status is Status.EXPIRED:
        return _timeout_decision(view, document, content)
    if answer is None:
        return "cancelled", None
    decided_by = (
        TIMEOUT_ACTOR if answer.respondent == "system" else answer.principal or answer.respondent
    )
    decision: dict[str, Any] = {
        "content_hash": content,
        "decided_at": to_millis(answer.at),
        "decided_by": decided_by,
        "feedback": None,
        "fields": None,
        "option": "",
        "outcome": None,
        "rule_id": None,
        "scope": None,
    }
    questions = view.elicitation.extra.get("form")
    if questions is not None:
        answers, feedback = form_answers(questions, answer.option_ids, answer.text, answer.fields)
        submit = next((o for o in document["options"] if o["outcome"] == "approve"), None)
        decision.update(
            option=submit["id"] if submit else "answer",
            outcome="approve" if submit else None,
            feedback=feedback,
            fields={"answers": answers},
        )
        return "answered", decision
    option = _option_of(document, answer.option_ids[0]) if answer.option_ids else None
    if option is None:
        return "cancelled", None
    decision.update(
        option=option["id"],
        outcome=option["outcome"],
        feedback=answer.text,
        fields=dict(answer.fields) or None,
    )
    return ("approved" if option["outcome"] == "approve" else "denied"), decision


def _timeout_decision(
    view: PromptView, document: Mapping[str, Any], content: str
) -> tuple[str, dict[str, Any] | None]:
    """Expired: ``on_timeout`` decides (deny / approve), or it simply expired (``expire``)."""
    answer = view.answer
    chosen = _option_of(document, answer.option_ids[0]) if answer and answer.option_ids else None
    outcome = chosen["outcome"] if chosen else document["on_timeout"]
    if outcome not in ("approve", "deny"):
        return "expired", None
    option = chosen or next((o for o in document["options"] if o["outcome"] == outcome), None)
    expired_at = view.elicitation.deadlines.expires_at
    at = answer.at if answer else expired_at
    decision = {
        "content_hash": content,
        "decided_at": to_millis(at) if at else None,
        "decided_by": TIMEOUT_ACTOR,
        "feedback": None,
        "fields": None,
        "option": option["id"] if option else outcome,
        "outcome": outcome,
        "rule_id": None,
        "scope": None,
    }
    return ("approved" if outcome == "approve" else "denied"), decision


def form_answers(
    questions: Sequence[Mapping[str, Any]],
    option_ids: Sequence[str],
    text: str | None,
    fields: Mapping[str, Any],
) -> tuple[dict[str, Any], str | None]:
    """``decision.fields.answers`` (by question id) and ``decision.feedback`` of an answer.

    A form's own answers (``fields["answers"]``) are taken as given. Otherwise, for one
    question, the chosen option labels are its ``selected`` and the text its ``text`` when it
    takes free text (else the text is feedback); for several, a written answer is feedback.
    """
    given = fields.get("answers")
    if isinstance(given, Mapping):
        return dict(given), text
    if len(questions) != 1:
        return {}, text
    only = questions[0]
    takes_text = bool(only["allow_free_text"]) or not only["options"]
    answer = {"selected": list(option_ids), "text": text if takes_text else None}
    return {str(only["id"]): answer}, None if takes_text else text

"""The engine's ask delivery (spec 001): request in, Elicitation out; every bad field in one 400.
A ``shared_key`` is kept, not acted on: reuse needs "current authority", which elicitbot cannot
vouch for."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from adapters.shared.timestamps import parse_rfc3339
from adapters.sources.common import approve_deny, digest, json_object, repeats, utc_text
from bot.domain.bounds import check_elicitation, id_problem
from bot.domain.errors import FieldProblem, PayloadRejected
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Context,
    Deadlines,
    Destination,
    Elicitation,
    ElicitationKey,
    Kind,
    Option,
    PreviewItem,
    Route,
    RouteMatch,
    check_destinations,
)

SOURCE = "engine"
DEFAULT_ASKER = "engine"  # when the delivery names no ``sender_id``
MAX_BODY_BYTES = 32 * 1024
NO_DEADLINE = datetime(9999, 1, 1, tzinfo=UTC)
NO_DEADLINE_TEXT = "9999-01-01T00:00:00Z"
_T = TypeVar("_T")
BOUND_ACTION_TTL = timedelta(days=7)
MAX_EXPIRY = timedelta(days=90)
MAX_ATTACHMENTS = 5
KINDS = ("question", "approval", "task")
ACTION_SCHEMA = "engine.action"
WEB = "web"
CHAT_PREFIXES = ("slack:", "matrix:")
DESTINATION_MAX = 300
"""A destination is stored as one delivery's ``destination`` (300 characters on both databases);
``matrix:`` and a Matrix room id (at most 255 bytes) fit."""


@dataclass(frozen=True)
class DeliveryRequest:
    id: str
    elicitation: Elicitation
    route: Route
    destinations: tuple[Destination, ...]  # as given (before ``[]`` became the web inbox)


def key_of(delivery_id: str) -> ElicitationKey:
    return ElicitationKey(f"{SOURCE}:{delivery_id}")


def destination_problem(destination: str) -> str | None:
    """Why ``destination`` is no ``web``, ``slack:<id>`` or ``matrix:<id>`` in bounds, or None."""
    if (bad := id_problem(destination, max_length=DESTINATION_MAX, required=True)) is not None:
        return bad
    try:
        check_destinations((destination,))
    except ValueError as exc:
        return str(exc)
    return None


def mention_identity(mention: Any) -> str | None:
    """The chat identity a mention names (``"slack:U…"``, or an object's ``id``), else None."""
    value = mention.get("id") if isinstance(mention, dict) else mention
    if isinstance(value, str) and value.startswith(CHAT_PREFIXES) and value.split(":", 1)[1]:
        return value
    return None


def delivery_route(
    destinations: Sequence[str], followup_seconds: int, mentions: Sequence[str] = ()
) -> Route:
    """The ask's route: the request's own destinations (as ``Inbound.route``), not the config's
    routes; raises ValueError for a destination or delay the contract refuses."""
    return Route(
        match=RouteMatch(source="engine"),
        destinations=tuple(destinations) or (WEB,),
        followup_seconds=followup_seconds,
        mention=tuple(dict.fromkeys(mentions)),
        origin="request",
    )


class _Checker:
    """Collects every problem, so that one 400 names them all."""

    def __init__(self, data: dict[str, Any], prefix: str) -> None:
        self.data = data
        self.prefix = prefix
        self.problems: list[FieldProblem] = []

    def loc(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def fail(self, name: str, message: str) -> None:
        self.problems.append(FieldProblem(self.loc(name), message))

    def present(self, name: str) -> bool:
        """Given and not null: an optional field sent as null counts as absent."""
        return self.data.get(name) is not None

    def text(self, name: str, *, required: bool = False) -> str | None:
        if not self.present(name):
            if required:
                self.fail(name, "is required")
            return None
        value: object = self.data[name]
        if not isinstance(value, str):
            self.fail(name, "must be a string")
            return None
        if required and not value:
            self.fail(name, "must not be empty")
        return value

    def _typed(self, name: str, kind: type[_T], what: str) -> _T | None:
        if not self.present(name):
            return None
        value: object = self.data[name]
        if not isinstance(value, kind):
            self.fail(name, f"must be {what}")
            return None
        return value

    def flag(self, name: str) -> bool | None:
        return self._typed(name, bool, "a boolean")

    def obj(self, name: str) -> dict[str, Any] | None:
        return self._typed(name, dict, "an object")

    def array(self, name: str) -> list[Any] | None:
        return self._typed(name, list, "an array")

    def strings(self, name: str) -> list[str] | None:
        if (items := self.array(name)) is None:
            return None
        good: list[str] = []
        for index, item in enumerate(items):
            if not isinstance(item, str):
                self.fail(f"{name}[{index}]", "must be a string")
            elif not item:
                self.fail(f"{name}[{index}]", "must not be empty")
            else:
                good.append(item)
        return good


def parse_delivery(data: Any, *, now: datetime) -> DeliveryRequest:
    top = _Checker(json_object(data), "")
    delivery_id = top.text("id", required=True)
    ask_data = top.obj("ask")
    if not top.present("ask"):
        top.fail("ask", "is required")
    destinations = _destinations(top)
    followup = _followup(top)
    sender = top.text("sender_id")
    ask = _Checker(ask_data or {}, "ask.")
    fields = _ask_fields(ask, now) if ask_data is not None else None
    ask_sender = ask.text("sender_id")
    if sender is not None and ask_sender is not None and sender != ask_sender:
        ask.fail("sender_id", "differs from sender_id beside the ask")
    if problems := top.problems + ask.problems:
        raise PayloadRejected(problems)
    if delivery_id is None or fields is None or destinations is None:  # pragma: no cover
        raise PayloadRejected([FieldProblem("body", "is incomplete")])
    route = delivery_route(
        destinations,
        followup if followup is not None else 0,
        [m for m in map(mention_identity, fields.mentions) if m is not None],
    )
    e = _elicitation(delivery_id, fields, sender or ask_sender, destinations, route, now)
    if problems := check_elicitation(e):  # the intake bounds, named as the request names them
        raise PayloadRejected(problems)
    return DeliveryRequest(
        id=delivery_id,
        elicitation=e,
        route=route,
        destinations=tuple(map(Destination, destinations)),
    )


def _destinations(top: _Checker) -> list[str] | None:
    if "destinations" not in top.data or top.data["destinations"] is None:
        top.fail("destinations", "is required (an empty list keeps the ask in the web inbox)")
        return None
    if (items := top.strings("destinations")) is None:
        return None
    before = len(top.problems)
    for index, item in enumerate(items):
        if (message := destination_problem(item)) is not None:
            top.fail(f"destinations[{index}]", message)
    return items if len(top.problems) == before else None


def _followup(top: _Checker) -> int | None:
    if not top.present("followup_seconds"):
        top.fail("followup_seconds", "is required: 0 (no follow-up) or 5 to 900")
        return None
    value: object = top.data["followup_seconds"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        top.fail("followup_seconds", "must be a number")
        return None
    if value != int(value) or (value != 0 and not 5 <= value <= 900):  # noqa: PLR2004
        top.fail("followup_seconds", "must be 0 (no follow-up) or whole seconds from 5 to 900")
        return None
    return int(value)


@dataclass(frozen=True)
class _Ask:
    title: str
    body: str
    kind: Kind
    choices: tuple[str, ...]
    action: dict[str, Any] | None
    expires_at: datetime | None  # None: no deadline (the engine's 9999-01-01T00:00:00Z)
    conversation_id: str | None
    mentions: tuple[Any, ...]
    metadata: dict[str, Any]


def _ask_fields(ask: _Checker, now: datetime) -> _Ask:
    title = ask.text("title") or ""
    body = ask.text("body") or ""
    size = len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        ask.fail(
            "body", f"is {size:,} bytes of UTF-8; the limit is {MAX_BODY_BYTES:,} bytes (32 KiB)"
        )
    action = ask.obj("action")
    kind = _kind(ask, action)
    choices = _choices(ask)
    malformed = any(p.loc in (ask.loc("title"), ask.loc("body")) for p in ask.problems)
    if not title and not body and action is None and not malformed:
        ask.fail("body", "is required when the ask has no title and no action (nothing to show)")
    expires_at = _expiry(ask, now, bound=kind is Kind.APPROVAL and action is not None)
    attachments = ask.strings("attachment_ids")
    if attachments is not None and len(attachments) > MAX_ATTACHMENTS:
        ask.fail("attachment_ids", f"holds {len(attachments)} ids; at most {MAX_ATTACHMENTS}")
    mentions = _mentions(ask)
    metadata = {
        "shared_key": ask.text("shared_key"),
        "blocking": ask.flag("blocking"),
        "reuse_direct": ask.flag("reuse_direct"),
        "attachment_ids": attachments,
        "target": ask.obj("target"),
    }
    ask.text("preview_token")  # checked, never kept: it only matters to the engine's dispatch
    return _Ask(
        title=title,
        body=body,
        kind=kind,
        choices=choices,
        action=action,
        expires_at=expires_at,
        conversation_id=ask.text("conversation_id"),
        mentions=mentions,
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


def _kind(ask: _Checker, action: dict[str, Any] | None) -> Kind:
    if not ask.present("kind"):
        return Kind.APPROVAL if action is not None else Kind.QUESTION
    value = ask.data["kind"]
    if value not in KINDS:
        ask.fail("kind", "must be question, approval or task")
        return Kind.QUESTION
    kind = Kind(value)
    if action is not None and kind is not Kind.APPROVAL:
        ask.fail("action", f"binds an approval: kind must be approval (or omitted), not {value}")
    return kind


def _choices(ask: _Checker) -> tuple[str, ...]:
    choices = ask.strings("choices") or []
    given = [c if isinstance(c, str) and c else None for c in ask.data.get("choices") or []]
    for index, first in repeats(given):
        ask.fail(
            f"choices[{index}]", f"repeats choices[{first}]: each answer string is offered once"
        )
    return tuple(dict.fromkeys(choices))


def _expiry(ask: _Checker, now: datetime, *, bound: bool) -> datetime | None:
    """None is "no deadline"; a bound action approval always has one."""
    if (text := ask.text("expires_at")) is None:
        return now + BOUND_ACTION_TTL if bound else None
    try:
        when = parse_rfc3339(text)
    except ValueError as exc:
        ask.fail("expires_at", str(exc))
        return None
    if when == NO_DEADLINE and not bound:
        return None
    if when > now + MAX_EXPIRY:
        what = "a bound action approval" if bound else "an explicit expiry"
        ask.fail("expires_at", f"is more than 90 days ahead; {what} must be within 90 days")
        return None
    return when


def _mentions(ask: _Checker) -> tuple[Any, ...]:
    if (items := ask.array("mentions")) is None:
        return ()
    for index, item in enumerate(items):
        if not isinstance(item, str | dict):
            ask.fail(f"mentions[{index}]", "must be an identity string or an object")
            continue
        identity = mention_identity(item)  # a chat identity is notified: an outbox target
        bad = None if identity is None else id_problem(identity, max_length=DESTINATION_MAX)
        if bad is not None:
            where = f"mentions[{index}]" if isinstance(item, str) else f"mentions[{index}].id"
            ask.fail(where, bad)
    return tuple(items)


def _options(ask: _Ask) -> tuple[Option, ...]:
    if ask.choices:
        return tuple(Option(id=choice, label=choice) for choice in ask.choices)
    if ask.kind is Kind.APPROVAL:
        return approve_deny()
    return ()


def _elicitation(
    delivery_id: str,
    ask: _Ask,
    sender: str | None,
    destinations: list[str],
    route: Route,
    now: datetime,
) -> Elicitation:
    options = _options(ask)
    subject = None
    if ask.action is not None:
        shown = json.dumps(ask.action, indent=2, ensure_ascii=False)
        subject = ApprovalSubject(
            id=delivery_id,
            digest=digest(ask.action),
            schema_=ACTION_SCHEMA,
            revision=0,
            expires_at=ask.expires_at,
            preview=(PreviewItem(type="json", label="Action", text=shown),),
        )
    expires_text = NO_DEADLINE_TEXT if ask.expires_at is None else utc_text(ask.expires_at)
    extra: dict[str, Any] = {
        "id": delivery_id,
        "kind": ask.kind.value,
        "expires_at": expires_text,
        "destinations": destinations,
        "followup_seconds": route.followup_seconds,
        **ask.metadata,
        "choices": list(ask.choices) or None,
        "mentions": list(ask.mentions) or None,
        "conversation_id": ask.conversation_id,
        "sender_id": sender,
    }
    return Elicitation(
        source=SOURCE,
        source_id=delivery_id,
        context=Context(conversation_id=ask.conversation_id),
        asker=sender or DEFAULT_ASKER,
        kind=ask.kind,
        title=ask.title,
        question=ask.body,
        answer_mode=AnswerMode.SINGLE_CHOICE if options else AnswerMode.FREE_TEXT,
        options=options,
        subject=subject,
        deadlines=Deadlines(expires_at=ask.expires_at),
        created_at=now,
        extra={k: v for k, v in extra.items() if v is not None},
    )

"""An outbox row's payload: one frozen type per effect kind, and the JSON the row stores (as rows
have always held it, so older rows read the same; a field missing takes its default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from bot.domain.records import EffectKind, NoticeKind, Purpose
from bot.domain.refs import MessageRef, ref_from_json


@dataclass(frozen=True)
class PostPayload:
    """A post: which copy it makes (an escalation copy mentions people, links the original)."""

    purpose: Purpose = Purpose.PRIMARY

    def to_json(self) -> dict[str, Any] | None:
        return {"purpose": self.purpose.value} if self.purpose is Purpose.ESCALATION else None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PostPayload:
        escalation = data.get("purpose") == Purpose.ESCALATION.value
        return cls(Purpose.ESCALATION if escalation else Purpose.PRIMARY)


@dataclass(frozen=True)
class _Nothing:
    def to_json(self) -> dict[str, Any] | None:
        return None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        return cls()


@dataclass(frozen=True)
class UpdatePayload(_Nothing):
    """An update rewrites its copy from the elicitation as it stands: nothing to carry."""


@dataclass(frozen=True)
class SeedPayload(_Nothing):
    """A seed adds a posted copy's reactions: nothing to carry."""


@dataclass(frozen=True)
class NotifyPayload:
    """A ``notify`` row: a private or thread notice (a refusal, a reminder, a note)."""

    kind: NoticeKind
    user: str
    """The person's identity key; empty for a reminder in a thread."""
    text: str
    thread: MessageRef | None = None
    mentions: tuple[str, ...] = ()
    mention: bool = True
    """Mention ``user``; stored only when not."""
    reply_to: str | None = None
    """The platform event it answers; stored only when there is one."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": self.kind.value,
            "user": self.user,
            "thread": None if self.thread is None else self.thread.to_json(),
            "text": self.text,
            "mentions": list(self.mentions),
        }
        if not self.mention:
            data["mention"] = False
        if self.reply_to is not None:
            data["reply_to"] = self.reply_to
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotifyPayload:
        raw_kind = data.get("kind")
        kind = NoticeKind(raw_kind) if raw_kind in set(NoticeKind) else NoticeKind.NOTE
        thread = data.get("thread")
        reply_to = data.get("reply_to")
        return cls(
            kind=kind,
            user=str(data.get("user") or ""),
            text=str(data.get("text") or ""),
            thread=ref_from_json(thread) if isinstance(thread, Mapping) else None,
            mentions=tuple(str(m) for m in data.get("mentions") or ()),
            mention=bool(data.get("mention", True)),
            reply_to=reply_to if isinstance(reply_to, str) else None,
        )


@dataclass(frozen=True)
class WritebackPayload:
    """A write-back: which round of answers it sends (a reopened question's next answer is 2)."""

    round: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WritebackPayload:
        return cls(int(data.get("round") or 1))


Payload = PostPayload | UpdatePayload | SeedPayload | NotifyPayload | WritebackPayload

PAYLOADS: Mapping[EffectKind, type[Payload]] = {
    EffectKind.POST: PostPayload,
    EffectKind.UPDATE: UpdatePayload,
    EffectKind.SEED: SeedPayload,
    EffectKind.NOTIFY: NotifyPayload,
    EffectKind.WRITEBACK: WritebackPayload,
}
"""Each effect kind's payload type."""


def payload_of(kind: EffectKind, data: Mapping[str, Any] | None) -> Payload:
    """The typed payload of a row of ``kind`` from its stored JSON (None: the kind's default)."""
    return PAYLOADS[kind].from_json(data or {})


def to_json(kind: EffectKind, payload: Payload | None) -> dict[str, Any] | None:
    """The JSON a row of ``kind`` stores for ``payload`` (None: the kind's default)."""
    if payload is None:
        return None
    if not isinstance(payload, PAYLOADS[kind]):
        raise TypeError(f"a {kind.value} row carries a {PAYLOADS[kind].__name__}, not {payload!r}")
    return payload.to_json()

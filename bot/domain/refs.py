"""Where a posted copy lives on its platform: typed message refs, stored as :meth:`to_json` writes
them and read with :func:`ref_from_json`. The indexed :attr:`key` finds the elicitation of a
message reacted or replied to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SlackRef:
    channel: str
    ts: str

    @property
    def key(self) -> str:
        return f"{self.channel}/{self.ts}"

    def to_json(self) -> dict[str, Any]:
        return {"channel": self.channel, "ts": self.ts, "key": self.key}

    @property
    def place(self) -> str:
        """Where the message is, as an answer's ``via`` names it (a DM's ``D…`` channel)."""
        return f"slack:{self.channel}"


@dataclass(frozen=True)
class MatrixRef:
    room_id: str
    event_id: str
    full_in_thread: bool = False
    """The message was too long to hold the whole request, and all of it was posted in its
    thread before approving was offered on it (answer rule 2); its updates keep offering
    approve on that ground. Written only when true, so refs stored before it read as False."""

    @property
    def key(self) -> str:
        return self.event_id

    @property
    def place(self) -> str:
        """Where the message is, as an answer's ``via`` names it (a DM's room, not its person)."""
        return f"matrix:{self.room_id}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"room_id": self.room_id, "event_id": self.event_id}
        if self.full_in_thread:
            data["full_in_thread"] = True
        data["key"] = self.key
        return data


@dataclass(frozen=True)
class InboxRef:
    """The web inbox's copy: it renders the stored state, so its ref is the elicitation key."""

    elicitation_key: str

    @property
    def key(self) -> None:
        return None

    def to_json(self) -> dict[str, Any]:
        return {"inbox": self.elicitation_key}

    @property
    def place(self) -> str:
        return "web"


MessageRef = SlackRef | MatrixRef | InboxRef


def ref_from_json(data: Mapping[str, Any] | None) -> MessageRef | None:
    """The typed ref of a stored one; None for nothing (or a shape no platform writes)."""
    if not data:
        return None
    if isinstance(data.get("channel"), str) and isinstance(data.get("ts"), str):
        return SlackRef(data["channel"], data["ts"])
    if isinstance(data.get("room_id"), str) and isinstance(data.get("event_id"), str):
        return MatrixRef(
            data["room_id"], data["event_id"], full_in_thread=data.get("full_in_thread") is True
        )
    if isinstance(data.get("inbox"), str):
        return InboxRef(data["inbox"])
    url = data.get("url")
    if isinstance(url, str) and "#" in url:  # an inbox copy written by earlier versions
        return InboxRef(url.rsplit("#", 1)[1])
    return None


def ref_json(ref: MessageRef | None) -> dict[str, Any] | None:
    return None if ref is None else ref.to_json()

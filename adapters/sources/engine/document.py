"""The engine ask as it stands (spec 001): the read-back, and (spec 001 defines no webhook
document) the answer webhook's body too; ``decision`` is absent while pending or closed unanswered.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from adapters.sources.common import utc_text
from adapters.sources.engine.parse import NO_DEADLINE_TEXT
from bot.domain.model import Answer, Elicitation, Meaning
from bot.domain.ports import PromptView

ASK_FIELDS = (  # kept in ``extra`` at intake, read back when they were given
    *("choices", "conversation_id", "shared_key", "blocking", "reuse_direct"),
    *("attachment_ids", "target", "mentions", "sender_id"),
)


def rfc3339(when: datetime) -> str:
    """``2026-12-01T16:00:00Z``: UTC, ``Z``, fractions only when there are any."""
    return utc_text(when.astimezone(UTC))


def expires_text(e: Elicitation) -> str:
    """``expires_at`` as spec 001 writes it: the deadline, or 9999-01-01T00:00:00Z for none."""
    stored = e.extra.get("expires_at")
    if isinstance(stored, str) and stored:
        return stored
    expires_at = e.deadlines.expires_at
    return NO_DEADLINE_TEXT if expires_at is None else rfc3339(expires_at)


def _action(e: Elicitation) -> Any:
    """The bound action, back from its preview (its JSON, kept whole at intake)."""
    if e.subject is None:
        return None
    for item in e.subject.preview:
        if item.label == "Action" and item.text:
            return json.loads(item.text)  # intake wrote it from json.dumps
    return None


def decision(e: Elicitation, answer: Answer) -> dict[str, Any]:
    """The typed decision: which offered string (or approve/deny), or the written answer."""
    base: dict[str, Any]
    if answer.option_ids:
        option_id = answer.option_ids[0]
        option = e.option(option_id)
        if option is not None and option.meaning in (Meaning.APPROVE, Meaning.REJECT):
            base = {
                "type": "approval",
                "answer": option_id,
                "approved": option.meaning is Meaning.APPROVE,
            }
        else:
            base = {"type": "choice", "answer": option_id}
        base["comment"] = None if answer.secret else answer.text
    else:
        base = {"type": "text", "answer": None if answer.secret else answer.text}
    return {
        **base,
        "responder_id": answer.principal or answer.respondent,
        "responder_name": answer.display_name,
        "via": answer.via,
        "decided_at": rfc3339(answer.at),
    }


def ask_document(view: PromptView) -> dict[str, Any]:
    e = view.elicitation
    extra = e.extra
    document: dict[str, Any] = {
        "id": e.source_id,
        "elicitation": e.key,
        "status": view.status.value,
        "kind": extra.get("kind", e.kind.value),
    }
    if e.title:
        document["title"] = e.title
    if e.question:
        document["body"] = e.question
    for name in ASK_FIELDS:
        if extra.get(name) is not None:
            document[name] = extra[name]
    if (action := _action(e)) is not None:
        document["action"] = action
    document["expires_at"] = expires_text(e)
    document["destinations"] = list(extra.get("destinations", ()))
    document["followup_seconds"] = extra.get("followup_seconds", 0)
    if view.answer is not None:
        document["decision"] = decision(e, view.answer)
    return document

"""The JSON shapes of an elicitation, its deliveries and its deadlines: what the read API answers
and what ``elicitbot show`` prints, one definition for both."""

from __future__ import annotations

from typing import Any

from bot.domain.model import ElicitationKey
from bot.domain.records import DeadlineView, DeliveryView, StoredElicitation
from bot.domain.refs import ref_json
from bot.domain.store import Store


def answer_json(stored: StoredElicitation) -> dict[str, Any] | None:
    a = stored.answer
    if a is None:
        return None
    return {
        "by": a.respondent,
        "principal": a.principal,
        "displayName": a.display_name,
        "optionIds": list(a.option_ids),
        "text": a.text,
        "secret": a.secret,
        "via": a.via,
        "at": a.at.isoformat(),
    }


def summary_json(stored: StoredElicitation) -> dict[str, Any]:
    e = stored.elicitation
    return {
        "id": e.key,
        "source": e.source,
        "sourceId": e.source_id,
        "status": stored.status.value,
        "workspace": e.workspace,
        "kind": e.kind.value,
        "title": e.title,
        "question": e.question,
        "answer": answer_json(stored),
        "version": stored.version,
        "createdAt": stored.created_at.isoformat(),
        "updatedAt": stored.updated_at.isoformat(),
    }


def delivery_json(d: DeliveryView) -> dict[str, Any]:
    return {
        "destination": d.destination,
        "position": d.position,
        "purpose": str(d.purpose),
        "state": str(d.state),
        "ref": ref_json(d.ref),
        "postedAt": d.posted_at.isoformat() if d.posted_at else None,
        "error": d.error,
    }


def deadline_json(d: DeadlineView) -> dict[str, Any]:
    return {
        "kind": str(d.kind),
        "dueAt": d.due_at.isoformat(),
        "state": str(d.state),
        "firedAt": d.fired_at.isoformat() if d.fired_at else None,
    }


async def detail_json(
    store: Store, key: ElicitationKey, stored: StoredElicitation
) -> dict[str, Any]:
    """:func:`summary_json` with the elicitation's deliveries and deadlines."""
    body = summary_json(stored)
    body["deliveries"] = [delivery_json(d) for d in await store.deliveries(key)]
    body["deadlines"] = [deadline_json(d) for d in await store.deadlines(key)]
    return body

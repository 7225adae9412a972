"""The handup Request as it stands (the intake response, the read-back and the callback). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.sources.handup.elicitation import to_millis
from bot.domain.model import Status
from bot.domain.ports import PromptView

TIMEOUT_ACTOR = "timeout"  # ``decision.decided_by`` of a decision taken at timeout
_DECISION = dict.fromkeys(("content_hash", "decided_at", "decided_by", "feedback", "fields"))
_DECISION |= dict.fromkeys(("option", "outcome", "rule_id", "scope"))  # a decision's, in order


def request_document(view: PromptView) -> dict[str, Any]:
    document = dict(view.elicitation.extra["request"])
    document["status"], document["decision"] = _decision(view, document)
    return document


def _decided(content: str, at: int | None, by: str, **given: Any) -> dict[str, Any]:
    return {**_DECISION, "content_hash": content, "decided_at": at, "decided_by": by, **given}


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
    decision = _decided(content, to_millis(answer.at), decided_by)
    if (questions := view.elicitation.extra.get("form")) is not None:
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
    decided_at = to_millis(at) if at else None
    option_id = option["id"] if option else outcome
    decision = _decided(content, decided_at, TIMEOUT_ACTOR, option=option_id, outcome=outcome)
    return ("approved" if outcome == "approve" else "denied"), decision


def form_answers(
    questions: Sequence[Mapping[str, Any]],
    option_ids: Sequence[str],
    text: str | None,
    fields: Mapping[str, Any],
) -> tuple[dict[str, Any], str | None]:
    """``decision.fields.answers`` and ``decision.feedback``: a form's own answers as given; for
    one question the chosen labels and (if it takes free text, else feedback) the text."""
    given = fields.get("answers")
    if isinstance(given, Mapping):
        return dict(given), text
    if len(questions) != 1:
        return {}, text
    only = questions[0]
    takes_text = bool(only["allow_free_text"]) or not only["options"]
    answer = {"selected": list(option_ids), "text": text if takes_text else None}
    return {str(only["id"]): answer}, None if takes_text else text

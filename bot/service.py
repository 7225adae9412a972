"""The shell around the domain: intake and answers, each committed in one transaction.

load -> decide (pure rules) -> store (conditional writes + outbox rows) -> wake the dispatcher.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from bot.domain import rules
from bot.domain.model import (
    Answer,
    Attempt,
    Elicitation,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.planning import display_hash, plan
from bot.domain.ports import Clock
from bot.domain.routing import resolve_route
from store.sql import IntakeItem, IntakeOutcome, SqlStore

log = structlog.get_logger("elicitbot.service")

CHAT_ROUTES_TTL_SECONDS = 5.0


@dataclass(frozen=True)
class Inbound:
    """An elicitation as it arrived: the inbound id dedupes redelivery of the same message."""

    channel: str
    inbound_id: str
    elicitation: Elicitation
    audit: dict[str, Any]


@dataclass(frozen=True)
class AnswerOutcome:
    key: str
    result: Answer | Refusal
    won: bool


class Service:
    def __init__(
        self,
        store: SqlStore,
        clock: Clock,
        people: People,
        routes: Sequence[Route],
        *,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.people = people
        self.config_routes = tuple(routes)
        self.on_change = on_change
        self._chat_routes: tuple[Route, ...] = ()
        self._chat_routes_at = float("-inf")

    async def routes(self) -> tuple[Route, ...]:
        """Config routes first (first match wins), then routes admins made from chat."""
        if time.monotonic() - self._chat_routes_at > CHAT_ROUTES_TTL_SECONDS:
            rows = await self.store.chat_routes()
            self._chat_routes = tuple(
                Route.model_validate(
                    {
                        "match": {"workspace": r["workspace"], "board": r["board"]},
                        "destinations": [r["destination"]],
                        "origin": "chat",
                    }
                )
                for r in rows
            )
            self._chat_routes_at = time.monotonic()
        return self.config_routes + self._chat_routes

    def forget_chat_routes(self) -> None:
        self._chat_routes_at = float("-inf")

    async def intake(self, batch: Sequence[Inbound]) -> list[IntakeOutcome]:
        """Store a batch (all or nothing) with its deliveries, deadlines and outbox rows."""
        routes = await self.routes()
        items = []
        for inbound in batch:
            e = inbound.elicitation
            route = resolve_route(routes, e)
            items.append(
                IntakeItem(
                    channel=inbound.channel,
                    inbound_id=inbound.inbound_id,
                    elicitation=e,
                    route=route,
                    plan=plan(e, route),
                    display_hash=display_hash(e),
                    audit=inbound.audit,
                )
            )
        outcomes = await self.store.intake(items, self.clock.now())
        if any(o.result in ("accepted", "updated") for o in outcomes):
            self.on_change()
        return outcomes

    async def answer(self, key: str, attempt: Attempt) -> AnswerOutcome:
        """Apply the answer rules; the first valid answer wins atomically in the store."""
        stored = await self.store.get(key)
        if stored is None:
            msg = f"no elicitation {key}"
            raise KeyError(msg)
        now = self.clock.now()
        state = rules.AnswerState(stored.status, stored.answer)
        decision = rules.decide(stored.elicitation, state, attempt, self.people, now)
        result = decision.result
        if isinstance(result, Answer):
            approving = any(
                (o := stored.elicitation.option(i)) is not None and o.approving
                for i in result.option_ids
            )
            recorded = await self.store.record_answer(
                key, result, now, approving=approving, audit=_attempt_audit(attempt)
            )
            if recorded.won:
                log.info("answer.recorded", key=key, respondent=result.respondent, via=result.via)
                self.on_change()
                return AnswerOutcome(key, result, won=True)
            result = _lost(stored.elicitation, recorded.status, recorded.answer, now)
        await self._refused(key, attempt, result)
        return AnswerOutcome(key, result, won=False)

    async def _refused(self, key: str, attempt: Attempt, refusal: Refusal) -> None:
        log.info(
            "answer.refused", key=key, respondent=attempt.respondent.key, code=refusal.code.value
        )
        await self.store.record_refusal(
            key,
            attempt.respondent.key,
            refusal.code.value,
            self.clock.now(),
            {**_attempt_audit(attempt), "message": refusal.message},
            None,
        )


def _lost(e: Elicitation, status: Status, answer: Answer | None, now: datetime) -> Refusal:
    """The refusal for a valid attempt the store turned down: someone else won, or time ran out."""
    if status is Status.PENDING:
        if e.deadlines.expires_at is not None and e.deadlines.expires_at <= now:
            return Refusal(code=RefusalCode.EXPIRED, message="This question has expired.")
        return Refusal(
            code=RefusalCode.SUBJECT_EXPIRED,
            message="The approval subject has expired, so it can no longer be approved.",
        )
    probe = Attempt(respondent=Identity(platform="system", user="system"), via="system")
    decision = rules.decide(e, rules.AnswerState(status, answer), probe, People(), now)
    if isinstance(decision.result, Refusal):
        return decision.result
    return Refusal(code=RefusalCode.CLOSED, message="This question can no longer be answered.")


def _attempt_audit(attempt: Attempt) -> dict[str, Any]:
    """What the audit log keeps of an attempt: never a secret's text."""
    return {
        "via": attempt.via,
        "options": list(attempt.option_ids),
        "text_length": len(attempt.text) if attempt.text is not None else None,
        "secret": attempt.secret,
    }

"""The shell around the domain: intake and what people do, each committed in one transaction.

load -> decide (pure rules) -> store (conditional writes + outbox rows) -> wake the dispatcher.
The service depends on the store port only (:class:`bot.domain.store.Store`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from bot.domain import actions, deadlines, rules
from bot.domain.actions import Action, Choose, ClaimIt, Command, CommandResult, Outcome, OutcomeKind
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
from bot.domain.planning import display_hash
from bot.domain.ports import (
    AnswerOutcome,
    ClaimOutcome,
    Clock,
    Inbound,
    IntakeOutcome,
    PromptView,
    SecretSink,
)
from bot.domain.records import DeliveryView, IntakeItem, IntakeResult
from bot.domain.replies import HelpReply, reply_attempt
from bot.domain.routing import resolve_route
from bot.domain.store import Store
from bot.domain.views import prompt_view

__all__ = ["AnswerOutcome", "Inbound", "Service"]

log = structlog.get_logger("elicitbot.service")

CHAT_ROUTES_TTL_SECONDS = 5.0


class Service:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        people: People,
        routes: Sequence[Route],
        *,
        on_change: Callable[[], None] = lambda: None,
        link_for: Callable[[str], str] = lambda key: f"/#{key}",
        secret_sinks: Mapping[str, SecretSink] | None = None,
        claim_minutes: float = deadlines.DEFAULT_CLAIM_MINUTES,
    ) -> None:
        self.store = store
        self.claim_minutes = claim_minutes
        self.clock = clock
        self.people = people
        self.config_routes = tuple(routes)
        self.on_change = on_change
        self.link_for = link_for
        self.secret_sinks = dict(secret_sinks or {})
        self._chat_routes: tuple[Route, ...] = ()
        self._chat_routes_at = float("-inf")

    async def routes(self) -> tuple[Route, ...]:
        """Config routes first (first match wins), then routes admins made from chat."""
        if time.monotonic() - self._chat_routes_at > CHAT_ROUTES_TTL_SECONDS:
            rows = await self.store.chat_routes()
            self._chat_routes = tuple(
                Route.model_validate(
                    {
                        "match": {"workspace": r.workspace, "board": r.board},
                        "destinations": [r.destination],
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
            route = inbound.route or resolve_route(routes, e)
            items.append(
                IntakeItem(
                    channel=inbound.channel,
                    inbound_id=inbound.inbound_id,
                    elicitation=e,
                    route=route,
                    display_hash=display_hash(e),
                    audit=inbound.audit,
                )
            )
        now = self.clock.now()
        outcomes = await self.store.intake(items, now)
        if any(_dispatches(item, o, now) for item, o in zip(items, outcomes, strict=True)):
            self.on_change()
        return outcomes

    async def view(self, key: str) -> PromptView | None:
        stored = await self.store.get(key)
        if stored is None:
            return None
        timeline = (await self.store.timelines([key])).get(key)
        return prompt_view(stored, timeline, link=self.link_for(key), now=self.clock.now())

    # -- what people do ------------------------------------------------------------------------

    async def act(self, action: Action) -> Outcome:
        """The one entry for what a person did on a surface; returns what to show them."""
        if isinstance(action, Command):
            return Outcome(OutcomeKind.COMMAND, command=await self._command(action))
        stored = await self.store.get(action.key)
        if stored is None:
            return Outcome(OutcomeKind.NOT_FOUND, action.key, actions.NOT_FOUND_TEXT)
        if isinstance(action, ClaimIt):
            claimed = await self.claim(action.key, action.who)
            if claimed.claim is not None:
                return Outcome(OutcomeKind.CLAIMED, action.key, claim=claimed.claim)
            refusal = claimed.refusal or Refusal(
                code=RefusalCode.CLOSED, message="Nothing to claim."
            )
            return Outcome(OutcomeKind.REFUSED, action.key, refusal.message, refusal=refusal)
        if isinstance(action, Choose):
            attempt = Attempt(
                respondent=action.who,
                option_ids=action.option_ids,
                via=action.via,
                revision=action.revision,
                shown=action.shown,
            )
        elif isinstance(action, actions.Reply):
            parsed = reply_attempt(stored.elicitation, action.text, action.who, action.via)
            pending = stored.status is Status.PENDING
            refused_who = rules.refused_for_who(stored.elicitation, action.who, self.people)
            if isinstance(parsed, HelpReply):
                if not pending:
                    return Outcome(OutcomeKind.IGNORED, action.key)  # talk after the answer
                if refused_who is None:
                    return Outcome(OutcomeKind.HELP, action.key, parsed.message)
                attempt = Attempt(respondent=action.who, via=action.via)
            elif parsed.text is not None and not pending:
                return Outcome(OutcomeKind.IGNORED, action.key)
            else:
                attempt = parsed.model_copy(update={"shown": action.shown})
        else:
            attempt = Attempt(
                respondent=action.who,
                option_ids=action.option_ids,
                text=action.text,
                secret=action.secret,
                via=action.via,
                fields=action.fields,
                revision=action.revision,
                shown=action.shown,
            )
        answered = await self.answer(action.key, attempt)
        if isinstance(answered.result, Refusal):
            return Outcome(
                OutcomeKind.REFUSED,
                action.key,
                answered.result.message,
                refusal=answered.result,
                identity_refused=rules.refused_for_who(
                    stored.elicitation, attempt.respondent, self.people
                )
                is not None,
            )
        return Outcome(OutcomeKind.ANSWERED, action.key, answer=answered.result)

    async def _command(self, command: Command) -> CommandResult:
        parsed = actions.parse_command(command.text)
        if parsed.problem is not None or parsed.verb == "help":
            return parsed
        if not actions.may_command(command.who, self.people, elevated=command.elevated):
            log.info("command.refused", by=command.who.key, verb=parsed.verb)
            return CommandResult(parsed.verb, parsed.workspace, parsed.board, refused=True)
        log.info("command", by=command.who.key, verb=parsed.verb, where=command.destination)
        workspace = parsed.workspace or ""
        if parsed.verb == "subscribe":
            added = await self.subscribe(
                workspace, parsed.board, command.destination, command.who.key
            )
            return CommandResult("subscribe", workspace, parsed.board, changed=int(added))
        if parsed.verb == "unsubscribe":
            removed = await self.unsubscribe(workspace, parsed.board, command.destination)
            return CommandResult("unsubscribe", workspace, parsed.board, changed=removed)
        return CommandResult("routes", routes=tuple(await self.routes_text()))

    async def claim(self, key: str, who: Identity) -> ClaimOutcome:
        """Someone is on it: escalation and follow-ups wait ``claim_minutes`` (reminders and
        expiry do not); every copy shows who. Again renews it; another person takes it over."""
        stored = await self.store.get(key)
        if stored is None:
            msg = f"no elicitation {key}"
            raise KeyError(msg)
        now = self.clock.now()
        refusal = deadlines.claim_refusal(stored.elicitation, stored.status, who, self.people)
        if refusal is None:
            until = deadlines.claim_until(now, self.claim_minutes)
            if await self.store.claim(key, who.key, who.display_name, until, now):
                log.info("claim.recorded", key=key, by=who.key, until=until.isoformat())
                self.on_change()
                return ClaimOutcome(key, deadlines.Claim(who.key, until, who.display_name))
            refusal = Refusal(
                code=RefusalCode.CLOSED,
                message="This request is no longer waiting for an answer: nothing to claim.",
            )
        log.info("claim.refused", key=key, by=who.key, code=refusal.code.value)
        await self.store.record_refusal(
            key, who.key, refusal.code.value, now, {"claim": True, "message": refusal.message}
        )
        return ClaimOutcome(key, None, refusal)

    async def key_for_message(self, ref_key: str) -> str | None:
        return await self.store.key_for_message(ref_key)

    async def first_time(self, channel: str, inbound_id: str) -> bool:
        return await self.store.first_time(channel, inbound_id, self.clock.now())

    async def deliveries(self, key: str) -> list[DeliveryView]:
        return await self.store.deliveries(key)

    async def subscribe(self, workspace: str, board: str | None, destination: str, by: str) -> bool:
        added = await self.store.add_chat_route(workspace, board, destination, by, self.clock.now())
        self.forget_chat_routes()
        return added

    async def unsubscribe(self, workspace: str, board: str | None, destination: str) -> int:
        removed = await self.store.remove_chat_route(workspace, board, destination)
        self.forget_chat_routes()
        return removed

    async def routes_text(self) -> list[str]:
        lines = []
        for route in await self.routes():
            m = route.match
            where = (
                " ".join(
                    f"{name}={value}"
                    for name, value in (
                        ("source", m.source),
                        ("workspace", m.workspace),
                        ("board", m.board),
                    )
                    if value
                )
                or "everything"
            )
            lines.append(f"{where} -> {', '.join(route.destinations)} ({route.origin})")
        return lines

    async def answer(self, key: str, attempt: Attempt) -> AnswerOutcome:
        """Apply the answer rules; the first valid answer wins atomically in the store.

        A secret answer goes straight upstream first (never stored); only then is the fact that
        it was given recorded. Upstream problems reach the caller as DeliveryError.
        """
        stored = await self.store.get(key)
        if stored is None:
            msg = f"no elicitation {key}"
            raise KeyError(msg)
        now = self.clock.now()
        state = rules.AnswerState(stored.status, stored.answer)
        decision = rules.decide(stored.elicitation, state, attempt, self.people, now)
        result = decision.result
        if isinstance(result, Answer) and result.secret:
            refusal = await self._deliver_secret(key, stored.elicitation.source, attempt)
            if refusal is not None:
                result = refusal
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

    async def close(self, key: str, status: Status, *, answer: Answer | None, reason: str) -> bool:
        """Close a pending elicitation from its source's side; every copy is updated."""
        done = await self.store.close_elicitation(
            key, status, self.clock.now(), answer=answer, audit={"reason": reason}
        )
        if done:
            self.on_change()
        return done

    async def _deliver_secret(self, key: str, source: str, attempt: Attempt) -> Refusal | None:
        sink = self.secret_sinks.get(source)
        view = await self.view(key)
        if sink is None or view is None or attempt.text is None:
            return Refusal(
                code=RefusalCode.NOT_OFFERED, message="This question takes no secret answers."
            )
        # One key per attempt: a retry of this call repeats it; another value is another answer.
        attempt_key = f"elicitbot:{key}:secret:{uuid.uuid4().hex}"
        await sink.deliver_secret(view, attempt.text, idempotency_key=attempt_key)
        return None

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
        )


def _dispatches(item: IntakeItem, outcome: IntakeOutcome, now: datetime) -> bool:
    """Whether this intake may have queued an effect, so the dispatcher is worth waking.

    A new elicitation bound for the web inbox alone queues none (its copy is posted in the intake
    transaction), and waking the dispatcher for it costs a claim and a next-due query per wake:
    about a quarter of the server's CPU at a few hundred events/s. Anything else wakes it (a spare
    wake is harmless; a missed one would wait for the dispatcher's idle poll).
    """
    if outcome.result is IntakeResult.UPDATED:
        return True
    if outcome.result is not IntakeResult.ACCEPTED:
        return False
    e = item.elicitation
    return deadlines.expired_at_intake(e, now) or any(
        destination != deadlines.WEB for destination in item.route.destinations
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

"""The shell around the domain: intake and what people do, each committed in one transaction.

load -> decide (pure rules) -> store (conditional writes + outbox rows) -> wake the dispatcher.
The service depends on the store port only (:class:`bot.domain.store.Store`).
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import structlog

from bot.domain import deadlines, deciders
from bot.domain.actions import (
    Action,
    ClaimIt,
    Command,
    CommandResult,
    OnView,
    Outcome,
    OutcomeKind,
)
from bot.domain.commands import channel_policies
from bot.domain.judge import (
    CANNOT_ANSWER,
    Judged,
    Judgement,
    RecordAnswer,
    RecordClaim,
    RecordRefusal,
    after_lost,
    judge,
    judge_attempt,
    judge_command,
    lost_for_good,
    not_found,
    refuse_write,
    told_before,
)
from bot.domain.model import (
    Answer,
    Attempt,
    Elicitation,
    ElicitationKey,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.planning import display_hash
from bot.domain.policy import RoutePolicy
from bot.domain.ports import (
    AnswerOutcome,
    ClaimOutcome,
    Clock,
    CopyPolicy,
    Inbound,
    IntakeOutcome,
    PromptView,
    SecretSink,
)
from bot.domain.records import (
    DeliveryView,
    IntakeItem,
    IntakeResult,
    StoredElicitation,
    Subscribed,
    Timeline,
)
from bot.domain.redraw import redrawn
from bot.domain.routing import chat_route, policy_of, resolve_route, route_name
from bot.domain.store import Store
from bot.domain.views import prompt_view
from bot.domain.votes import RecordVote
from bot.redraws import last_served, remember_served, waiting

__all__ = ["AnswerOutcome", "Inbound", "Service"]

log = structlog.get_logger("elicitbot.service")

CHAT_ROUTES_TTL_SECONDS = 5.0
FENCE_ROUNDS = 3
"""Judgements of one action whose conditional write lost before it is refused as closed (a
lost write is judged again on the state the store reports, which normally refuses at once)."""


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
        web_groups: bool = True,
    ) -> None:
        self.store = store
        self.claim_minutes = claim_minutes
        self.clock = clock
        self.people = people
        self.config_routes = tuple(routes)
        self.on_change = on_change
        self.link_for = link_for
        self.secret_sinks = dict(secret_sinks or {})
        self.web_groups = web_groups
        """The web inbox reads groups (``[web] groups_header``): chat may name web-group:."""
        self._chat_routes: tuple[Route, ...] = ()
        self._chat_routes_at = float("-inf")

    async def routes(self) -> tuple[Route, ...]:
        """Config routes first (first match wins), then routes admins made from chat."""
        return self.config_routes + await self.chat_routes()

    async def chat_routes(self) -> tuple[Route, ...]:
        """The routes admins made from chat, read again after :data:`CHAT_ROUTES_TTL_SECONDS`."""
        if time.monotonic() - self._chat_routes_at > CHAT_ROUTES_TTL_SECONDS:
            rows = await self.store.chat_routes()
            self._chat_routes = tuple(
                chat_route(r.workspace, r.board, r.destination, r.policy) for r in rows
            )
            self._chat_routes_at = time.monotonic()
        return self._chat_routes

    async def policy_route(self, stored: StoredElicitation) -> Route:
        """The route whose policy says who may decide (rule 9): the one the elicitation resolves
        to among today's routes, so a changed ``approvers`` applies to questions already asked,
        and a source naming its own destinations still meets the matching route's approvers."""
        return resolve_route(await self.routes(), stored.elicitation)

    async def copy_policy(self, e: Elicitation) -> CopyPolicy:
        """``e``'s policy route (the one :meth:`policy_route` judges by) as its views carry it:
        ``approve_on``, so copies elsewhere withhold approving options and link to the web
        inbox, and ``approvers``, so the tally line names who may still approve."""
        return self._copy_policy(resolve_route(await self.routes(), e))

    def _copy_policy(self, route: Route) -> CopyPolicy:
        principals = {
            a: p for a in route.approvers or () if (p := self.people.principal_of(a)) is not None
        }
        return CopyPolicy(policy_of(route), principals)

    async def _view(
        self,
        stored: StoredElicitation,
        timeline: Timeline | None = None,
        route: Route | None = None,
    ) -> PromptView:
        """The view of ``stored`` with where approving counts (``route``: its policy route,
        when already resolved)."""
        key = stored.elicitation.key
        route = route or await self.policy_route(stored)
        return prompt_view(
            stored,
            timeline,
            link=self.link_for(key),
            now=self.clock.now(),
            policy=self._copy_policy(route),
        )

    def forget_chat_routes(self) -> None:
        self._chat_routes_at = float("-inf")

    async def intake(self, batch: Sequence[Inbound]) -> list[IntakeOutcome]:
        routes = await self.routes()
        items = [
            IntakeItem(
                channel=inbound.channel,
                inbound_id=inbound.inbound_id,
                elicitation=inbound.elicitation,
                route=inbound.route or resolve_route(routes, inbound.elicitation),
                display_hash=display_hash(inbound.elicitation),
                audit=inbound.audit,
            )
            for inbound in batch
        ]
        now = self.clock.now()
        outcomes = await self.store.intake(items, now)
        if any(_dispatches(item, o, now) for item, o in zip(items, outcomes, strict=True)):
            self.on_change()
        return outcomes

    async def view(self, key: ElicitationKey) -> PromptView | None:
        stored = await self.store.get(key)
        if stored is None:
            return None
        timeline = (await self.store.timelines([key])).get(key)
        return await self._view(stored, timeline)

    # -- what people do ------------------------------------------------------------------------

    async def act(self, action: Action) -> Outcome:
        """The one entry for what a person did on a surface: one read, one judgement, one
        conditional write, judged again on the state the store reports when the write loses. An
        :class:`~bot.domain.actions.OnView` is translated by its surface against that read first."""
        if isinstance(action, Command):
            return Outcome(OutcomeKind.COMMAND, command=await self._command(action))
        stored = await self.store.get(action.key)
        if stored is None:
            return not_found(action.key)
        route = await self.policy_route(stored)
        view = None
        if isinstance(action, OnView):  # the surface translates against the state just read
            view = await self._view(stored, route=route)
            translated = action.translate(view)
            if inspect.isawaitable(translated):
                translated = await translated
            if translated is None:
                return Outcome(OutcomeKind.IGNORED, action.key, view=view)
            action = translated
        attempted: Judged = action  # (the closure below sees the narrowed type)

        def judged(state: StoredElicitation, now: datetime) -> Judgement:
            return judge(
                state, attempted, self.people, now, claim_minutes=self.claim_minutes, route=route
            )

        judgement, _ = await self._carry_out(stored, judged)
        outcome = self._linked(judgement.outcome, route)
        return outcome if view is None else replace(outcome, view=view)

    def _linked(self, outcome: Outcome, route: Route) -> Outcome:
        """An approve refused because it counts only in the web inbox (``approve_on``) names
        the inbox page, so the person can go there and approve."""
        refusal = outcome.refusal
        if refusal is None or outcome.key is None:
            return outcome
        linked = deciders.linked_refusal(refusal, route, self.link_for(outcome.key))
        if linked is refusal:
            return outcome
        return replace(outcome, message=linked.message, refusal=linked)

    async def _command(self, command: Command) -> CommandResult:
        parsed = judge_command(command, self.people, web_groups=self.web_groups)
        if parsed.refused:
            log.info("command.refused", by=command.who.key, verb=parsed.verb)
        if parsed.refused or parsed.problem is not None or parsed.verb == "help":
            return parsed
        log.info("command", by=command.who.key, verb=parsed.verb, where=command.destination)
        workspace = parsed.workspace or ""
        if parsed.verb == "subscribe":
            done = await self.subscribe(
                workspace, parsed.board, command.destination, command.who.key, policy=parsed.policy
            )
            return replace(
                parsed, changed=int(done.changed), policy=done.policy, previous=done.previous
            )
        if parsed.verb == "unsubscribe":
            removed = await self.unsubscribe(workspace, parsed.board, command.destination)
            return CommandResult("unsubscribe", workspace, parsed.board, changed=removed)
        if parsed.verb == "policy":
            lines = channel_policies(await self.routes(), command.destination)
            return replace(parsed, routes=lines)
        return CommandResult("routes", routes=tuple(await self.routes_text()))

    async def claim(self, key: ElicitationKey, who: Identity) -> ClaimOutcome:
        outcome = await self.act(ClaimIt(key, who, who.platform))
        if outcome.kind is OutcomeKind.NOT_FOUND:
            msg = f"no elicitation {key}"
            raise KeyError(msg)
        return ClaimOutcome(key, outcome.claim, outcome.refusal)

    async def key_for_message(self, ref_key: str) -> ElicitationKey | None:
        return await self.store.key_for_message(ref_key)

    async def first_time(self, channel: str, inbound_id: str) -> bool:
        return await self.store.first_time(channel, inbound_id, self.clock.now())

    async def deliveries(self, key: ElicitationKey) -> list[DeliveryView]:
        return await self.store.deliveries(key)

    async def subscribe(
        self,
        workspace: str,
        board: str | None,
        destination: str,
        by: str,
        *,
        policy: RoutePolicy | None = None,
    ) -> Subscribed:
        """Add the chat route or replace its policy; the copies of the questions whose policy
        that changes are redrawn right after (:meth:`redraw`)."""
        self.forget_chat_routes()
        before = await self.routes()
        done = await self.store.add_chat_route(
            workspace, board, destination, by, self.clock.now(), policy
        )
        self.forget_chat_routes()
        if done.changed:
            await self.redraw(before, by, f"subscribe {destination}")
        return done

    async def unsubscribe(self, workspace: str, board: str | None, destination: str) -> int:
        self.forget_chat_routes()
        before = await self.routes()
        removed = await self.store.remove_chat_route(workspace, board, destination)
        self.forget_chat_routes()
        if removed:
            await self.redraw(before, by=None, why=f"unsubscribe {destination}")
        return removed

    async def redraw(self, before: Sequence[Route], by: str | None, why: str) -> int:
        """Redraw the copies of every pending elicitation whose policy route's policy differs
        between ``before`` and today's routes (:func:`bot.domain.redraw.redrawn`); how many."""
        after = await self.routes()
        keys = redrawn(before, after, await waiting(self.store))
        if not keys:
            return 0
        done = await self.store.redraw(keys, by or "elicitbot", self.clock.now(), {"why": why})
        log.info("copies.redrawn", why=why, elicitations=done)
        if done:
            self.on_change()
        return done

    async def redraw_at_start(self) -> int:
        """At ``serve`` start: the config routes as last served
        (:func:`bot.redraws.last_served`) against today's; the questions whose policy that
        changes are redrawn."""
        last = await last_served(self.store, self.config_routes)
        self.forget_chat_routes()
        done = await self.redraw(last + await self.chat_routes(), None, "config routes changed")
        await remember_served(self.store, self.config_routes)
        return done

    async def routes_text(self) -> list[str]:
        return [
            f"{route_name(route)} -> {', '.join(route.destinations)} ({route.origin})"
            for route in await self.routes()
        ]

    async def answer(self, key: ElicitationKey, attempt: Attempt) -> AnswerOutcome:
        """Apply the answer rules; the first valid answer wins atomically in the store.

        A secret answer goes straight upstream first (never stored); only then is the fact that
        it was given recorded. Upstream problems reach the caller as DeliveryError.
        """
        stored = await self.store.get(key)
        if stored is None:
            msg = f"no elicitation {key}"
            raise KeyError(msg)

        route = await self.policy_route(stored)

        def judged(state: StoredElicitation, now: datetime) -> Judgement:
            return judge_attempt(state, attempt, self.people, now, route=route)

        judgement, won = await self._carry_out(stored, judged)
        outcome = self._linked(judgement.outcome, route)
        if outcome.answer is not None and won:
            return AnswerOutcome(key, outcome.answer, won=True)
        if outcome.kind is OutcomeKind.VOTED and won:
            waiting = Refusal(code=RefusalCode.AWAITING_APPROVERS, message=outcome.message)
            return AnswerOutcome(key, waiting, won=False)
        refusal = outcome.refusal or Refusal(code=RefusalCode.CLOSED, message=CANNOT_ANSWER)
        return AnswerOutcome(key, refusal, won=False)

    async def _carry_out(
        self,
        stored: StoredElicitation,
        judged: Callable[[StoredElicitation, datetime], Judgement],
    ) -> tuple[Judgement, bool]:
        """Judge on ``stored`` and write what the judgement says: (the judgement carried out,
        whether its conditional write won). A write that loses is judged again on the state the
        store reports (read again while it still says pending), at most ``FENCE_ROUNDS`` times."""
        key = stored.elicitation.key
        now = self.clock.now()
        secret_sent = False
        judgement = judged(stored, now)
        for _ in range(FENCE_ROUNDS):
            write = judgement.write
            if isinstance(write, RecordAnswer):
                if write.secret is not None and not secret_sent:
                    refusal = await self._deliver_secret(stored, write.secret, now)
                    if refusal is not None:
                        judgement = refuse_write(judgement, refusal)
                        break
                    secret_sent = True
                recorded = await self.store.record_answer(
                    key,
                    write.answer,
                    now,
                    approving=write.approving,
                    audit=dict(write.audit),
                    version=write.version,
                )
                if recorded.won:
                    answer = write.answer
                    log.info(
                        "answer.recorded", key=key, respondent=answer.respondent, via=answer.via
                    )
                    self.on_change()
                    return judgement, True
                stored = after_lost(stored, recorded)
                if stored.status is Status.PENDING:
                    stored = await self.store.get(key) or stored
            elif isinstance(write, RecordVote):
                vote = write.vote
                audit = dict(write.audit)
                if await self.store.record_vote(key, vote, now, version=write.version, audit=audit):
                    log.info("vote.recorded", key=key, respondent=vote.respondent, via=vote.via)
                    self.on_change()
                    return judgement, True
                stored = await self.store.get(key) or stored
            elif isinstance(write, RecordClaim):
                if await self.store.claim(key, write.by, write.name, write.until, now):
                    log.info("claim.recorded", key=key, by=write.by, until=write.until.isoformat())
                    self.on_change()
                    return judgement, True
                stored = await self.store.get(key) or stored
            else:
                break
            judgement = judged(stored, now)
        else:
            judgement = lost_for_good(judgement)
        write = judgement.write
        if isinstance(write, RecordRefusal):
            if write.detail.get("claim"):
                log.info("claim.refused", key=key, by=write.actor, code=write.code.value)
            else:
                log.info("answer.refused", key=key, respondent=write.actor, code=write.code.value)
            told = await self.store.record_refusal(
                key, write.actor, write.code.value, now, dict(write.detail), once=write.once
            )
            if not told:  # told before on this question: not again (rule 9, told once)
                judgement = told_before(judgement)
        return judgement, False

    async def close(
        self, key: ElicitationKey, status: Status, *, answer: Answer | None, reason: str
    ) -> bool:
        done = await self.store.close_elicitation(
            key, status, self.clock.now(), answer=answer, audit={"reason": reason}
        )
        if done:
            self.on_change()
        return done

    async def _deliver_secret(
        self, stored: StoredElicitation, secret: str, now: datetime
    ) -> Refusal | None:
        """Pass a secret answer upstream (never stored); a refusal when nothing takes it."""
        key = stored.elicitation.key
        sink = self.secret_sinks.get(stored.elicitation.source)
        if sink is None:
            return Refusal(
                code=RefusalCode.NOT_OFFERED, message="This question takes no secret answers."
            )
        view = prompt_view(stored, None, link=self.link_for(key), now=now)
        # One key per attempt: a retry of this call repeats it; another value is another answer.
        attempt_key = f"elicitbot:{key}:secret:{uuid.uuid4().hex}"
        await sink.deliver_secret(view, secret, idempotency_key=attempt_key)
        return None


def _dispatches(item: IntakeItem, outcome: IntakeOutcome, now: datetime) -> bool:
    """Whether this intake may have queued an effect, so the dispatcher is worth waking: one bound
    for the web inbox alone queues none, and a needless wake (a claim and a next-due query) was
    about a quarter of the server's CPU at a few hundred events/s. A spare wake is harmless."""
    if outcome.result is IntakeResult.UPDATED:
        return True
    if outcome.result is not IntakeResult.ACCEPTED:
        return False
    e = item.elicitation
    return deadlines.expired_at_intake(e, now) or any(
        destination != deadlines.WEB for destination in item.route.destinations
    )

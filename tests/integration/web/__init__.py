"""The web inbox against a real Service, SqlStore and Dispatcher; shared by its tests.

:func:`make_rig` wires what ``bot.app.wiring`` will: the inbox router on a FastAPI app beside the
intake routes, a :class:`~tests.fakes.FakeChat` registered as ``slack`` (so a test sees the Slack
copy rewritten) and an answer sink for ``superpipeline`` (the write-back).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from adapters.sources.superpipeline import superpipeline_router
from adapters.sources.superpipeline.parse import parse_body
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from bot.app.http import Runtime, create_app
from bot.domain.model import Elicitation, ElicitationKey, People, Route
from bot.domain.ports import AnswerSink, PromptView, SecretSink
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat
from tests.unit.sources.superpipeline_fixtures import VALID

AGENT = "agt_9e8d7c6b5a493827"
SLACK = "slack:C0APPROVALS"
ROUTE = Route(destinations=(SLACK, "web"))
PEOPLE = People(
    admins=frozenset({"web:local", "web:alice", "slack:U0ADMIN"}),
    principals={"slack:U0ALICE": "usr_alice"},
)
EXAMPLES = ("options", "free-text", "no-options-no-question", "approval-request")


class FakeSecretSink:
    """Records each secret passed upstream (only the test sees it)."""

    def __init__(self) -> None:
        self.secrets: list[tuple[str, str]] = []

    async def deliver_secret(self, view: PromptView, secret: str, *, idempotency_key: str) -> None:
        self.secrets.append((view.elicitation.key, secret))


@dataclass
class Rig:
    store: SqlStore
    clock: FakeClock
    chat: FakeChat
    service: Service
    dispatcher: Dispatcher
    app: FastAPI
    secrets: FakeSecretSink = field(default_factory=FakeSecretSink)


def make_rig(
    store: SqlStore,
    clock: FakeClock,
    sink: AnswerSink,
    *,
    identity: IdentityPolicy | None = None,
    routes: Sequence[Route] = (ROUTE,),
) -> Rig:
    chat = FakeChat("slack")
    dispatcher = Dispatcher(
        store, clock, {"slack": chat}, {"superpipeline": sink}, lambda key: f"/#{key}"
    )
    secrets = FakeSecretSink()
    sinks: dict[str, SecretSink] = {"vault": secrets}
    service = Service(store, clock, PEOPLE, routes, on_change=dispatcher.wake, secret_sinks=sinks)
    dispatcher.effects.policy = service.copy_policy  # the root passes it
    router = inbox_router(service, store, identity or IdentityPolicy(), clock=clock)
    runtime = Runtime(store=store, elicitations=service)
    runtime.routers += [router, superpipeline_router(service, lambda request: None)]
    app = create_app(runtime)
    return Rig(store, clock, chat, service, dispatcher, app, secrets)


def example(case: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(VALID[case])
    data.update(changes)
    return data


async def intake(
    rig: Rig, case: str = "options", *, workspace: str | None = "acme", **changes: Any
) -> ElicitationKey:
    e = parse_body(example(case, **changes), workspace=workspace)
    return await intake_elicitation(rig, e)


async def intake_elicitation(
    rig: Rig, e: Elicitation, inbound_id: str | None = None
) -> ElicitationKey:
    inbound = Inbound("ce:/test", inbound_id or f"{e.key}:{e.created_at}", e, {})
    [outcome] = await rig.service.intake([inbound])
    assert outcome.result in ("accepted", "updated"), outcome
    return outcome.key

"""The service resolves the route an elicitation takes and its policy decides who may answer
(answer rule 9), whatever route the intake gave it."""

from __future__ import annotations

from bot.domain.actions import Choose, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Identity, People, RefusalCode, Route, RouteMatch, Status
from bot.domain.store import Store
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.contract.test_store import make

BOB = Identity(platform="slack", user="U0BOB")
CAROL = Identity(platform="slack", user="U0CAROL")
DEPLOYS = Route(match=RouteMatch(workspace="acme"), approvers=("slack:U0BOB",))


async def test_only_the_routes_approvers_answer_through_the_service(sqlite_store: Store) -> None:
    clock = FakeClock()
    service = Service(sqlite_store, clock, People(), [DEPLOYS])
    e = make(clock.now(), "eli_1")
    # The source named its own destinations: the matching route's approvers still decide.
    await service.intake([Inbound("ce:/test", "ev-1", e, {}, Route())])

    def choose(who: Identity) -> Choose:
        return Choose(e.key, who, "slack:C0APPROVALS", ("yes",), shown=SHOWN_WHOLE)

    refused = await service.act(choose(CAROL))
    assert refused.kind is OutcomeKind.REFUSED
    assert refused.refusal is not None
    assert refused.refusal.code is RefusalCode.NOT_APPROVER
    stored = await sqlite_store.get(e.key)
    assert stored is not None
    assert stored.status is Status.PENDING
    audit = await sqlite_store.audit(e.key)
    assert [a.code for a in audit if a.action == "refusal"] == ["not_approver"]

    answered = await service.act(choose(BOB))
    assert answered.kind is OutcomeKind.ANSWERED

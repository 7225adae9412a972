"""An action its surface translates against the elicitation as it stands
(:class:`~bot.domain.actions.OnView`, a Slack click): :meth:`Service.act` reads once, hands the
surface that view, judges what it returns and gives the view back with the outcome."""

from __future__ import annotations

from bot.domain.actions import Choose, OnView, Open, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import ElicitationKey, Identity, People, Route, Status
from bot.domain.ports import PromptView
from bot.domain.store import Store
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.contract.test_store import SLACK, make

ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


async def asked(store: Store, clock: FakeClock) -> tuple[Service, ElicitationKey]:
    svc = Service(store, clock, People(), [Route(destinations=(SLACK,))])
    e = make(clock.now(), "eli_view")
    await svc.intake([Inbound("ce:/test", "ev-1", e, {})])
    return svc, e.key


async def test_the_surface_translates_against_the_one_read_and_gets_it_back(store: Store) -> None:
    clock = FakeClock()
    svc, key = await asked(store, clock)
    seen: list[PromptView] = []

    def translate(view: PromptView) -> Choose | Open | None:
        seen.append(view)
        return Choose(key, ALICE, SLACK, (view.elicitation.options[1].id,), shown=SHOWN_WHOLE)

    outcome = await svc.act(OnView(key, ALICE, SLACK, translate))

    assert outcome.kind is OutcomeKind.ANSWERED
    assert outcome.answer is not None
    assert outcome.answer.option_ids == ("no",)
    [view] = seen
    assert (view.elicitation.key, view.status, view.version) == (key, Status.PENDING, 1)
    assert outcome.view is view  # as read, before the answer (the thread note adds it)


async def test_a_click_that_answers_nothing_writes_nothing(store: Store) -> None:
    clock = FakeClock()
    svc, key = await asked(store, clock)

    outcome = await svc.act(OnView(key, ALICE, SLACK, lambda view: None))

    assert outcome.kind is OutcomeKind.IGNORED
    assert outcome.view is not None
    assert outcome.view.status is Status.PENDING
    assert [a.action for a in await store.audit(key)] == ["intake"]


async def test_an_unknown_elicitation_is_not_found_without_translating(store: Store) -> None:
    svc, _ = await asked(store, FakeClock())
    translated: list[PromptView] = []

    def translate(view: PromptView) -> None:
        translated.append(view)

    outcome = await svc.act(OnView(ElicitationKey("superpipeline:nope"), ALICE, SLACK, translate))

    assert outcome.kind is OutcomeKind.NOT_FOUND
    assert outcome.view is None
    assert translated == []

"""The service resolves the route an elicitation takes and its policy decides who may answer
(answer rule 9), whatever route the intake gave it."""

from __future__ import annotations

from bot.app.config import AppConfig, RouteConfig, StoreConfig
from bot.app.wiring import Elicitbot
from bot.domain.actions import Choose, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Identity, People, RefusalCode, Route, RouteMatch, Status
from bot.domain.policy import RoutePolicy
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


WEB_ONLY = Route(match=RouteMatch(workspace="acme"), approve_on=("web",))
LINK = "https://inbox.example/#"


async def test_views_carry_the_policy_routes_approve_on_from_config_and_chat_routes(
    sqlite_store: Store,
) -> None:
    """The view every surface renders says where approving counts, from the route the service
    judges by: a config route, or (none matching) a route an admin made from chat; and the chat
    refusal of an approve names the inbox page."""
    clock = FakeClock()
    config = Service(sqlite_store, clock, People(), [WEB_ONLY], link_for=lambda k: LINK + k)
    e = make(clock.now(), "eli_cfg")
    await config.intake([Inbound("ce:/test", "ev-cfg", e, {}, Route())])
    view = await config.view(e.key)
    assert view is not None
    assert view.approve_on == ("web",)
    assert (await config.copy_policy(e)).policy.approve_on == ("web",)

    refused = await config.act(Choose(e.key, BOB, "slack:C0APPROVALS", ("yes",), shown=SHOWN_WHOLE))
    assert refused.refusal is not None
    assert refused.refusal.code is RefusalCode.APPROVE_ELSEWHERE
    expected = (
        "Approving this request counts only in the web inbox: “Yes” is not taken here. "
        f"Approve in the web inbox: {LINK}{e.key}"
    )
    assert (refused.message, refused.refusal.message) == (expected, expected)
    stored = await sqlite_store.get(e.key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.votes) == (Status.PENDING, None, ())
    # Rejecting from chat still counts.
    rejected = await config.act(Choose(e.key, BOB, "slack:C0APPROVALS", ("no",), shown=SHOWN_WHOLE))
    assert rejected.kind is OutcomeKind.ANSWERED

    chat = Service(sqlite_store, clock, People(), [], link_for=lambda k: LINK + k)
    await chat.subscribe(
        "acme", None, "slack:C0APPROVALS", "slack:U0ADMIN", policy=RoutePolicy(approve_on=("web",))
    )
    other = make(clock.now(), "eli_chat")
    await chat.intake([Inbound("ce:/test", "ev-chat", other, {})])
    chat_view = await chat.view(other.key)
    assert chat_view is not None
    assert chat_view.approve_on == ("web",)

    everywhere = Service(sqlite_store, clock, People(), [DEPLOYS])
    plain = await everywhere.view(other.key)
    assert plain is not None
    assert plain.approve_on is None


async def test_the_wired_dispatcher_renders_copies_with_the_services_approve_on(
    sqlite_url: str,
) -> None:
    """bot.app.wiring hands the outbox the service's answer (so config and chat routes both
    reach the copies), not a route of its own."""
    config = AppConfig(
        store=StoreConfig(url=sqlite_url),
        routes=(RouteConfig(match=RouteMatch(workspace="acme"), approve_on=("web",)),),
    )
    bot = Elicitbot(config, environ={})
    try:
        effects_policy = bot.dispatcher.effects.policy
        assert effects_policy is not None
        e = make(FakeClock().now(), "eli_wired")
        assert (await effects_policy(e)).policy.approve_on == ("web",)
        elsewhere = e.model_copy(update={"workspace": "globex"})
        assert (await effects_policy(elsewhere)).policy.approve_on is None
    finally:
        await bot.http_client.aclose()
        await bot.store.close()

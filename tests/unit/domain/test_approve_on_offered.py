"""``approve_on`` in what a copy offers (:func:`bot.domain.rules.offered_options`): on a surface
the route does not name, approving options are withheld (``elsewhere``) with the same words the
refusal of one chosen there uses; the view carries the policy route's ``approve_on``."""

from __future__ import annotations

import pytest

from bot.domain import deciders
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Disclosure, Refusal, RefusalCode, Route, Status
from bot.domain.policy import RoutePolicy
from bot.domain.ports import CopyPolicy
from bot.domain.records import StoredElicitation
from bot.domain.rules import judge, offered_options
from bot.domain.views import prompt_view
from tests.unit.domain.builders import (
    ALICE,
    CREATED,
    NOW,
    PEOPLE,
    SUBJECT_EXPIRES,
    attempt,
    sp_approval,
)

WEB_ONLY = "Approving this request counts only in the web inbox."
CUT = Disclosure(whole=False, review="Use Review… to see all of it and decide there.")


@pytest.mark.parametrize("surface", ["slack", "matrix"])
def test_a_surface_approve_on_does_not_name_withholds_approving_options(surface: str) -> None:
    shown = offered_options(
        sp_approval(), NOW, shown=SHOWN_WHOLE, surface=surface, approve_on=("web",)
    )
    assert [o.option.id for o in shown] == ["allow_once", "allow_always", "deny"]
    assert [o.offered for o in shown] == [False, False, True]
    assert [o.elsewhere for o in shown] == [True, True, False]
    assert [o.withheld_reason for o in shown] == [WEB_ONLY, WEB_ONLY, None]


def test_the_named_surface_and_routes_without_approve_on_offer_approving_as_before() -> None:
    before = offered_options(sp_approval(), NOW, shown=SHOWN_WHOLE)
    for surface, approve_on in (("web", ("web",)), ("slack", None), ("slack", ("slack", "web"))):
        shown = offered_options(
            sp_approval(), NOW, shown=SHOWN_WHOLE, surface=surface, approve_on=approve_on
        )
        assert shown == before, (surface, approve_on)
        assert all(o.offered and not o.elsewhere for o in shown)
    # No surface given: nothing is withheld for approve_on (the judgement still refuses).
    unknown = offered_options(sp_approval(), NOW, shown=SHOWN_WHOLE, approve_on=("web",))
    assert unknown == before


def test_the_withheld_reason_and_the_refusal_name_the_same_surfaces() -> None:
    for approve_on in (("web",), ("matrix", "web")):
        [first, *_] = offered_options(
            sp_approval(), NOW, shown=SHOWN_WHOLE, surface="slack", approve_on=approve_on
        )
        refusal = deciders.approve_here(Route(approve_on=approve_on), first.option, "slack:C0X")
        assert isinstance(refusal, Refusal)
        assert refusal.code is RefusalCode.APPROVE_ELSEWHERE
        assert first.withheld_reason is not None
        assert refusal.message.startswith(first.withheld_reason.removesuffix("."))
    two = offered_options(
        sp_approval(), NOW, shown=SHOWN_WHOLE, surface="slack", approve_on=("matrix", "web")
    )
    assert (
        two[0].withheld_reason == "Approving this request counts only in Matrix or the web inbox."
    )


def test_expiry_is_said_before_elsewhere_and_elsewhere_before_a_cut() -> None:
    expired = offered_options(
        sp_approval(), SUBJECT_EXPIRES, shown=SHOWN_WHOLE, surface="slack", approve_on=("web",)
    )
    assert expired[0].withheld_reason == "The approval subject expired at 2026-11-11 09:30 UTC."
    assert not expired[0].elsewhere  # no link: approving is not possible anywhere now
    cut = offered_options(sp_approval(), NOW, shown=CUT, surface="slack", approve_on=("web",))
    assert (cut[0].withheld_reason, cut[0].elsewhere) == (WEB_ONLY, True)


def test_a_crafted_approve_from_chat_is_refused_with_the_reason() -> None:
    route = Route(approve_on=("web",))
    refusal = judge(sp_approval(), attempt(ALICE, "allow_once"), PEOPLE, NOW, route=route)
    assert isinstance(refusal, Refusal)
    assert refusal.code is RefusalCode.APPROVE_ELSEWHERE
    assert refusal.message == (
        "Approving this request counts only in the web inbox: “Allow once” is not taken here."
    )
    linked = deciders.linked_refusal(refusal, route, "https://inbox.example/#k")
    assert linked.message == (
        "Approving this request counts only in the web inbox: “Allow once” is not taken here. "
        "Approve in the web inbox: https://inbox.example/#k"
    )
    # Only where the web inbox counts it, and only that refusal.
    assert deciders.linked_refusal(refusal, Route(approve_on=("slack",)), "https://x/") == refusal
    other = Refusal(code=RefusalCode.NOT_APPROVER, message="Only the approvers …")
    assert deciders.linked_refusal(other, route, "https://x/") == other
    web = judge(sp_approval(), attempt(ALICE, "allow_once", via="web"), PEOPLE, NOW, route=route)
    assert not isinstance(web, Refusal)


def test_the_view_carries_approve_on() -> None:
    stored = StoredElicitation(
        elicitation=sp_approval(),
        status=Status.PENDING,
        answer=None,
        version=1,
        route=Route(),
        created_at=CREATED,
        updated_at=CREATED,
    )
    web_only = CopyPolicy(RoutePolicy(approve_on=("web",)))
    view = prompt_view(stored, None, link="https://inbox.example/#k", now=NOW, policy=web_only)
    assert view.approve_on == ("web",)
    assert prompt_view(stored, None, link="", now=NOW).approve_on is None

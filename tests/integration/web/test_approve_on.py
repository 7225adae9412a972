"""``approve_on`` in the web inbox (over HTTP, behind a sign-in proxy on this machine): with
``["web"]`` the card offers approving and a signed-in approve counts, while the Slack copy is
rendered from a view that withholds it there and a forged proxy header from elsewhere is refused;
with ``["slack"]`` the card withholds approving, says where it counts, and refuses one posted."""

from __future__ import annotations

import re

import httpx

from adapters.web.identity import IdentityPolicy
from bot.domain.model import Route, Status
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.web import SLACK, Rig, intake, make_rig
from tests.integration.web.test_inbox import HEADER, PROXY, card, post_answer


def proxied(store: SqlStore, clock: FakeClock, approve_on: tuple[str, ...]) -> Rig:
    policy = IdentityPolicy(user_header=HEADER, trusts=PROXY.trusts)
    route = Route(destinations=(SLACK, "web"), approve_on=approve_on)
    return make_rig(store, clock, FakeSink(), identity=policy, routes=(route,))


def signed_in(rig: Rig, user: str, address: str = "127.0.0.1") -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=rig.app, client=(address, 50123)),
        base_url="http://127.0.0.1:8787",
        headers={HEADER: user},
    )


async def test_a_web_only_route_counts_the_signed_in_approve_and_refuses_a_forged_header(
    sqlite_store: SqlStore, clock: FakeClock
) -> None:
    rig = proxied(sqlite_store, clock, ("web",))
    key = await intake(rig, "approval-request")
    await rig.dispatcher.run_once()
    [posted] = rig.chat.posted
    assert posted.view.approve_on == ("web",)  # the Slack copy withholds Approve and links here

    async with signed_in(rig, "bob", address="10.0.0.7") as forged:
        assert (await forged.get("/")).status_code == 401
        refused = await forged.post(
            "/inbox/answer", data={"key": key, "option": "allow_once", "revision": "1"}
        )
    assert refused.status_code == 401
    assert await sqlite_store.count("answer") == 0

    async with signed_in(rig, "bob") as bob:
        page = card((await bob.get("/")).text, key)
        assert re.search(r'value="allow_once" class="opt approve">', page)
        assert "counts only" not in page
        assert (await post_answer(bob, key, option="allow_once", revision="1")).status_code == 303
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.status, view.answer.respondent, view.answer.via) == (
        Status.ANSWERED,
        "web:bob",
        "web",
    )


async def test_a_slack_only_route_withholds_approving_in_the_inbox_and_says_where(
    sqlite_store: SqlStore, clock: FakeClock
) -> None:
    rig = proxied(sqlite_store, clock, ("slack",))
    key = await intake(rig, "approval-request")
    async with signed_in(rig, "bob") as bob:
        page = card((await bob.get("/")).text, key)
        assert re.search(r'value="allow_once" class="opt approve" disabled', page)
        assert "Approving this request counts only in Slack. Other options work." in page
        assert re.search(r'value="deny" class="opt reject">', page)
        crafted = await post_answer(bob, key, as_json=True, option="allow_once", revision="1")
    assert crafted.status_code == 403
    assert crafted.json()["code"] == "approve_elsewhere"
    assert "Approve in the web inbox" not in crafted.json()["message"]
    assert await sqlite_store.count("answer") == 0

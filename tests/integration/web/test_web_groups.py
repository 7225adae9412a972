"""``web-group:<name>`` approvers (rule 9) in the web inbox: the sign-in proxy names the user's
groups in ``[web] groups_header``, believed only from a trusted proxy.

- an ops member's approval counts; a dev member's is refused with who may decide, and nothing is
  recorded;
- the groups header from a peer that is not a trusted proxy makes nobody anybody (401), and a
  trusted proxy's groups header without a user names no group either.
"""

from __future__ import annotations

import httpx

from adapters.web.identity import IdentityPolicy
from bot.app.config import ServerConfig
from bot.domain.deciders import TOLD_BEFORE
from bot.domain.model import Route, Status
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.web import ROUTE, intake, make_rig
from tests.integration.web.test_inbox import post_answer

USER, GROUPS = "X-Forwarded-User", "X-Forwarded-Groups"
PROXY = ServerConfig.model_validate({"trusted_proxies": ["127.0.0.1"]})


def client(app: object, address: str, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=(address, 50123)),  # type: ignore[arg-type]
        base_url="http://127.0.0.1:8787",
        headers=headers,
    )


async def test_only_the_proxys_named_group_may_approve(
    sqlite_store: SqlStore, clock: FakeClock
) -> None:
    policy = IdentityPolicy(user_header=USER, groups_header=GROUPS, trusts=PROXY.trusts)
    route = Route(destinations=ROUTE.destinations, approvers=("web-group:ops", "web:zoe"))
    rig = make_rig(sqlite_store, clock, FakeSink(), identity=policy, routes=(route,))
    key = await intake(rig, "options")

    async with client(rig.app, "127.0.0.1", **{USER: "dana", GROUPS: "dev, qa"}) as dana:
        refused = await post_answer(dana, key, option="allow_once")
        # A web user by name (the one after ``web:``), the group as the proxy names it.
        assert refused.status_code == 403
        assert "Only the approvers of this route can decide: web-group:ops, zoe." in refused.text
        # Told once per question: her next try is refused with a short reminder only.
        again = await post_answer(dana, key, option="deny")
    assert again.status_code == 403
    assert TOLD_BEFORE.split("'")[0] in again.text  # (up to the escaped apostrophe)
    assert "web-group:ops, zoe" not in again.text
    assert (await rig.service.view(key)).status is Status.PENDING  # type: ignore[union-attr]

    # Forged: the same headers from a peer that is not the proxy are not believed at all.
    async with client(rig.app, "10.9.8.7", **{USER: "eve", GROUPS: "ops"}) as eve:
        forged = await eve.get("/")
    assert forged.status_code == 401

    async with client(rig.app, "127.0.0.1", **{USER: "omar", GROUPS: "dev,ops"}) as omar:
        won = await post_answer(omar, key, option="allow_once")
    assert won.status_code == 303, won.text
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert (stored.answer.respondent, stored.answer.option_ids) == ("web:omar", ("allow_once",))


def test_groups_are_read_only_from_a_trusted_proxy_that_names_the_user() -> None:
    policy = IdentityPolicy(user_header=USER, groups_header=GROUPS, trusts=PROXY.trusts)
    headers = {USER.lower(): "omar", GROUPS.lower(): " ops , ,dev,a b,\x07x"}
    assert policy.groups(headers, "127.0.0.1") == {"web-group:ops", "web-group:dev"}
    assert policy.groups(headers, "10.9.8.7") == frozenset()
    no_user = IdentityPolicy(groups_header=GROUPS, trusts=PROXY.trusts)
    assert no_user.groups(headers, "127.0.0.1") == frozenset()

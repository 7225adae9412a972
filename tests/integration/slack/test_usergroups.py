"""Slack user groups as approvers (``slack:S…``, answer rule 9), end to end on the fake Web API
(see :mod:`tests.integration.slack.rig`): the real Bolt app, signed requests, the real Service.
Who is in the route's approver group is read with ``usergroups.users.list``, cached a minute and
read again after it; a member's approval counts, anyone else is told privately who may decide;
a group that could not be read counts for nobody, and the person is told it could not be
checked."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from adapters.slack.api.groups import TTL, SlackGroups, SlackStanding, check_scope
from adapters.slack.api.people import SlackNames
from adapters.slack.api.scopes import manifest_scopes
from bot.app.config import parse_config
from bot.app.wiring import Elicitbot
from bot.domain.deciders import TOLD_BEFORE
from bot.domain.model import ElicitationKey, Route, Status
from tests.integration.slack.rig import ALICE, BOB, C1, Rig, button
from tests.slack_fake import FakeSlack
from tests.slack_fake_base import SCOPES

REPO = Path(__file__).resolve().parents[3]
GROUP = "S0DEPLOY"
CAROL = "U0CAROL"
HANDLE = "@deploy-team"
"""What ``usergroups.list`` calls the group: the refusal names it so."""
REFUSAL = f"Only the approvers of this route can decide: {HANDLE}."
UNCHECKED = (
    f" Whether you are in {HANDLE} could not be checked just now, so it did not count: "
    "try again in a minute (if it keeps failing, tell an elicitbot admin)."
)


def with_groups(rig: Rig, *approvers: str, quorum: int = 1) -> SlackGroups:
    """What bot.app.wiring does: the app reads the route's approver groups, cached, and names
    the route's approvers (people by users.info, groups by handle); the route names the group;
    Bob is its one member."""
    groups = SlackGroups(rig.chat.client, clock=rig.clock)
    names = SlackNames(rig.chat.client, clock=rig.clock)
    rig.slack.standing = SlackStanding(groups, rig.service, names)
    rig.fake.add_user(ALICE, display_name="Alice", real_name="Alice Smith")
    rig.service.config_routes = (
        Route(
            destinations=(f"slack:{C1}",),
            approvers=approvers or (f"slack:{GROUP}",),
            quorum=quorum,
        ),
    )
    rig.fake.add_usergroup(GROUP, [BOB], handle="deploy-team")
    return groups


async def asked(rig: Rig, case: str = "options") -> tuple[ElicitationKey, dict[str, Any]]:
    """A question posted to the channel: its key and its Slack message."""
    key = await rig.intake_fixture(case)
    await rig.drain()
    return key, rig.message(key)


def lookups(fake: FakeSlack) -> list[str]:
    return [c.params["usergroup"] for c in fake.calls_to("usergroups.users.list")]


def told(rig: Rig, user: str) -> str:
    *_, last = rig.ephemerals(user)
    text = str(last["text"])
    print(f"ephemeral to {user}: {text}")
    return text


async def click(rig: Rig, message: dict[str, Any], user: str, n: int, option: str = "allow_once"):
    response = await rig.click(
        message, button(message, option), user=user, action_ts=f"1700000100.{n:06d}"
    )
    assert response.status_code == 200
    await rig.drain()


async def test_a_member_of_the_group_approves_and_anyone_else_is_told_who_may(rig: Rig) -> None:
    with_groups(rig)
    key, message = await asked(rig)

    await click(rig, message, ALICE, 1)
    assert await rig.status(key) is Status.PENDING
    assert told(rig, ALICE) == REFUSAL
    [refused] = [a for a in await rig.store.audit(key) if a.code == "not_approver"]
    assert refused.actor == f"slack:{ALICE}"

    await click(rig, message, BOB, 2)
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert view.answer.respondent == f"slack:{BOB}"
    # One lookup of the route's one group served both people.
    assert lookups(rig.fake) == [GROUP]


async def test_a_member_answers_by_thread_reply_too(rig: Rig) -> None:
    with_groups(rig)
    key, message = await asked(rig, "free-text")

    await rig.reply(message, "main, please", user=ALICE)
    await rig.drain()
    assert await rig.status(key) is Status.PENDING
    assert told(rig, ALICE) == REFUSAL
    await rig.reply(message, "main, please", user=BOB, ts="1700000201.000001", event_id="Ev0R2")
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.answer.respondent, view.answer.text) == (f"slack:{BOB}", "main, please")


async def test_one_lookup_serves_every_click_within_a_minute_then_the_group_is_read_again(
    rig: Rig,
) -> None:
    with_groups(rig, quorum=3)
    key, message = await asked(rig)

    for n, user in enumerate((ALICE, CAROL, ALICE, CAROL), start=1):
        await click(rig, message, user, n)
        rig.clock.advance(10)
    await click(rig, message, BOB, 5)  # a vote: 1 of 3
    assert lookups(rig.fake) == [GROUP], "five clicks in 40 s: one call"
    print(told(rig, BOB))

    # Alice joins the group: not seen before the cached list is a minute old, then seen.
    rig.fake.add_usergroup(GROUP, [BOB, ALICE])
    await click(rig, message, ALICE, 6)
    assert told(rig, ALICE) == TOLD_BEFORE, "told who may at her first click: not again"
    rig.clock.advance(TTL.total_seconds() - 40 + 1)  # the list read at 0 s is now 61 s old
    await click(rig, message, ALICE, 7)
    assert lookups(rig.fake) == [GROUP, GROUP]
    assert "(2 of 3)" in told(rig, ALICE)
    assert await rig.status(key) is Status.PENDING


async def test_concurrent_lookups_of_one_group_share_one_call(rig: Rig) -> None:
    groups = with_groups(rig)
    rig.fake.script("usergroups.users.list", delay=0.3)
    found = await asyncio.gather(*(groups.members(GROUP) for _ in range(5)))
    assert found == [frozenset({BOB})] * 5
    assert lookups(rig.fake) == [GROUP]


async def test_a_rate_limited_lookup_counts_for_nobody_and_says_so(rig: Rig) -> None:
    with_groups(rig)
    key, message = await asked(rig)
    rig.fake.script("usergroups.users.list", status=429, retry_after=30)

    await click(rig, message, BOB, 1)
    assert await rig.status(key) is Status.PENDING, "fails closed: Bob's approval did not count"
    assert told(rig, BOB) == REFUSAL + UNCHECKED
    # Slack said when to come back: not asked before, even by another click.
    rig.clock.advance(20)
    await click(rig, message, BOB, 2)
    assert told(rig, BOB) == REFUSAL + UNCHECKED
    assert lookups(rig.fake) == [GROUP]
    rig.clock.advance(11)
    await click(rig, message, BOB, 3)
    assert lookups(rig.fake) == [GROUP, GROUP]
    assert await rig.status(key) is Status.ANSWERED


async def test_an_error_is_asked_again_after_ten_seconds_and_a_member_elsewhere_is_not_told(
    rig: Rig,
) -> None:
    """A 5xx: this group, for a few seconds. The note is only for people the group mattered to:
    someone who may decide anyway (Alice, named among the approvers) is not told about it."""
    with_groups(rig, f"slack:{GROUP}", "slack:U0ALICE")
    key, message = await asked(rig)
    rig.fake.script("usergroups.users.list", status=500, error="internal_error", times=2)

    await click(rig, message, CAROL, 1)
    refusal = f"Only the approvers of this route can decide: {HANDLE}, Alice."
    assert told(rig, CAROL) == refusal + UNCHECKED
    rig.clock.advance(11)
    await click(rig, message, CAROL, 2)  # asked again: still failing
    rig.clock.advance(11)
    await click(rig, message, CAROL, 3)  # asked again: Slack answers; Carol is not in it
    assert told(rig, CAROL) == refusal
    assert lookups(rig.fake) == [GROUP] * 3
    await click(rig, message, ALICE, 4)
    assert await rig.status(key) is Status.ANSWERED
    assert rig.ephemerals(ALICE) == []


async def test_a_group_slack_does_not_know_is_logged_once_and_counts_for_nobody(rig: Rig) -> None:
    with_groups(rig, "slack:S0GONE", f"slack:{GROUP}")
    key, message = await asked(rig)

    with capture_logs() as logs:
        await click(rig, message, CAROL, 1)
        rig.clock.advance(61)
        await click(rig, message, CAROL, 2)
    text = told(rig, CAROL)
    assert text.startswith(
        f"Only the approvers of this route can decide: slack:S0GONE, {HANDLE}. "
        "Whether you are in slack:S0GONE could not be checked just now"
    )
    assert f"{HANDLE} could not" not in text
    [gone] = [e for e in logs if e["event"] == "slack.usergroup_not_found"]
    assert gone["usergroup"] == "S0GONE"
    [call, *_] = [c for c in rig.fake.calls_to("usergroups.users.list") if not c.ok]
    assert call.response == {"ok": False, "error": "no_such_subteam"}
    await click(rig, message, BOB, 3)  # the other group still works
    assert await rig.status(key) is Status.ANSWERED


async def test_without_usergroups_read_nobody_counts_and_the_scope_is_named_once(
    rig: Rig,
) -> None:
    with_groups(rig)
    rig.fake.scopes.discard("usergroups:read")
    key, message = await asked(rig)

    with capture_logs() as logs:
        await click(rig, message, BOB, 1)
        rig.clock.advance(30)
        await click(rig, message, BOB, 2)
    # Nor can the group's handle be read: the refusal names it by id, and still goes out.
    by_id = f"Only the approvers of this route can decide: slack:{GROUP}."
    assert told(rig, BOB) == by_id + UNCHECKED.replace(HANDLE, f"slack:{GROUP}")
    assert await rig.status(key) is Status.PENDING
    [call] = rig.fake.calls_to("usergroups.users.list")  # a missing scope stops the lookups
    assert call.response is not None
    assert (call.response["error"], call.response["needed"]) == ("missing_scope", "usergroups:read")
    [missing] = [e for e in logs if e["event"] == "slack.usergroups_read_missing"]
    assert missing["scope"] == "usergroups:read"
    # Five minutes on, Slack is asked again: the app was reinstalled with the scope.
    rig.fake.scopes.add("usergroups:read")
    rig.clock.advance((timedelta(minutes=5) - timedelta(seconds=29)).total_seconds())
    await click(rig, message, BOB, 3)
    assert await rig.status(key) is Status.ANSWERED


async def test_no_group_among_any_route_reads_nothing(rig: Rig) -> None:
    """A route without user groups (the rig's own) costs no lookup, and Alice answers."""
    rig.slack.standing = SlackStanding(SlackGroups(rig.chat.client, clock=rig.clock), rig.service)
    key, message = await asked(rig)
    await click(rig, message, ALICE, 1)
    assert await rig.status(key) is Status.ANSWERED
    assert lookups(rig.fake) == []


async def test_at_start_a_token_without_usergroups_read_is_logged_once(rig: Rig) -> None:
    with_groups(rig)
    assert rig.chat.scopes is not None
    assert "usergroups:read" in rig.chat.scopes  # from auth.test's x-oauth-scopes
    with capture_logs() as logs:
        assert await check_scope(rig.chat.scopes, rig.service) is False
    assert logs == []

    rig.fake.scopes.discard("usergroups:read")
    await rig.chat.verify()
    with capture_logs() as logs:
        assert await check_scope(rig.chat.scopes, rig.service) is True
    [missing] = logs
    print(missing)
    assert missing["event"] == "slack.usergroups_read_missing"
    assert missing["usergroups"] == [f"slack:{GROUP}"]
    assert missing["log_level"] == "warning"


async def test_serve_wires_the_groups_and_logs_a_missing_scope_once_at_start(
    tmp_path: Path, fake: FakeSlack
) -> None:
    """What ``serve`` builds: the Slack app fills the Standing from the route's groups, and its
    start (``prepare``: auth.test) logs the token's missing ``usergroups:read`` once."""
    fake.scopes.discard("usergroups:read")
    config = parse_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'groups.db'}"},
            "slack": {
                "bot_token_env": "SLACK_BOT_TOKEN",
                "signing_secret_env": "SLACK_SIGNING_SECRET",
                "api_url": fake.api_url,
                "manifest": str(REPO / "slack-app-manifest.yaml"),
            },
            "routes": [{"destinations": [f"slack:{C1}"], "approvers": [f"slack:{GROUP}"]}],
        }
    )
    bot = Elicitbot(config, environ={"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": "s"})
    try:
        with capture_logs() as logs:
            await bot.prepare()
            await bot.prepare()  # once: a second call does nothing
        assert bot.slack_app is not None
        assert isinstance(bot.slack_app.standing, SlackStanding)
        [missing] = [e for e in logs if e["event"] == "slack.usergroups_read_missing"]
        assert missing["usergroups"] == [f"slack:{GROUP}"]
        assert missing["fix"] == (
            "add the bot scope usergroups:read to the Slack app and reinstall it"
        )
    finally:
        if bot.slack_app is not None:
            await bot.slack_app.aclose()
        await bot.http_client.aclose()
        await bot.store.close()


def test_the_manifest_asks_for_usergroups_read_and_the_fakes_token_has_what_it_asks() -> None:
    assert manifest_scopes(REPO / "slack-app-manifest.yaml") == SCOPES
    assert "usergroups:read" in SCOPES

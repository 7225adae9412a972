"""Who may decide, from chat: ``/elicitbot subscribe … approvers … quorum …`` and
``/elicitbot policy`` through the real Bolt app with signed requests (the rig:
tests/integration/slack/rig.py), and the stored policy enforced on a question the chat route
carries. Every reply is printed."""

from __future__ import annotations

from adapters.slack.api.groups import SlackGroups, SlackStanding
from adapters.slack.api.people import SlackNames
from bot.domain.deciders import TOLD_BEFORE
from bot.domain.model import Route, RouteMatch, Status
from bot.domain.policy import RoutePolicy
from tests.integration.slack.rig import ADMIN, ALICE, BOB, C1, C2, Rig, button

BOARD = "brd_134a0ddb6d434478"
"""The board of the SuperPipeline fixtures (workspace ``acme``)."""


def wire_names(rig: Rig) -> None:
    """What bot.app.wiring does: people named through users.info, the route's approver groups
    read (usergroups.users.list) and named by handle (usergroups.list), all cached."""
    names = SlackNames(rig.chat.client, clock=rig.clock)
    rig.slack.identify = names.identify
    groups = SlackGroups(rig.chat.client, clock=rig.clock)
    rig.slack.standing = SlackStanding(groups, rig.service, names)
    rig.fake.add_user(ALICE, display_name="Alice", real_name="Alice Smith")
    rig.fake.add_user(BOB, real_name="Bob Jones")
    rig.fake.add_user(ADMIN, display_name="Ada")


async def said(rig: Rig, text: str, *, channel: str = C2) -> str:
    """Run ``/elicitbot <text>`` as the admin; the reply they were sent (printed)."""
    before = len(rig.fake.responses())
    response = await rig.command(text, channel=channel)
    assert response.status_code == 200
    await rig.slack.idle()
    replies = rig.fake.responses()[before:]
    assert len(replies) == 1, replies
    body = replies[0]["body"]
    assert body["response_type"] == "ephemeral"
    print(f"\n/elicitbot {text}\n{body['text']}")
    return str(body["text"])


async def test_an_admin_subscribes_with_a_policy_updates_it_and_reads_it_back(rig: Rig) -> None:
    rig.service.config_routes = (
        Route(
            match=RouteMatch(source="superpipeline", workspace="globex"),
            destinations=(f"slack:{C2}", "web"),
            approvers=("admins",),
            anyone_may_reject=True,
        ),
    )

    first = await said(
        rig, f"subscribe acme board {BOARD} approvers slack:U0ALICE, web:dave quorum 2"
    )
    assert first == (
        f"Subscribed: requests of workspace `acme`, board `{BOARD}` now come to <#{C2}>.\n"
        "Who may decide: approvers: slack:U0ALICE, web:dave; quorum: 2; approve_on: every "
        "surface; anyone_may_reject: no"
    )
    [route] = await rig.store.chat_routes()
    assert route.policy == RoutePolicy(("slack:U0ALICE", "web:dave"), quorum=2)

    # Subscribing again without policy words keeps the policy (and says which it is).
    again = await said(rig, f"subscribe acme board {BOARD}")
    assert again.startswith(f"Already subscribed: workspace `acme`, board `{BOARD}` comes to")
    assert "approvers: slack:U0ALICE, web:dave; quorum: 2" in again

    # With policy words, they are the route's whole policy: quorum falls back to 1.
    updated = await said(rig, f"subscribe acme board {BOARD} approvers admins approve-on web")
    assert updated == (
        f"Updated: workspace `acme`, board `{BOARD}` comes to <#{C2}> with the policy you gave "
        "(the words left out are back to their defaults).\n"
        "Who may decide: approvers: admins; quorum: 1; approve_on: web; anyone_may_reject: no\n"
        "Before: approvers: slack:U0ALICE, web:dave; quorum: 2; approve_on: every surface; "
        "anyone_may_reject: no"
    )
    [route] = await rig.store.chat_routes()
    assert route.policy == RoutePolicy(("admins",), approve_on=("web",))

    policy = await said(rig, "policy")
    assert policy == (
        f"Who may decide, for the routes posting to <#{C2}> (first match wins):\n```\n"
        "source=superpipeline workspace=globex (config): approvers: admins; quorum: 1; "
        "approve_on: every surface; anyone_may_reject: yes\n"
        f"workspace=acme board={BOARD} (chat): approvers: admins; quorum: 1; approve_on: web; "
        "anyone_may_reject: no\n```"
    )
    elsewhere = await said(rig, "policy", channel="C0QUIET")
    assert elsewhere == "No route posts to <#C0QUIET>: `/elicitbot routes` lists them all."


async def test_a_wrong_policy_word_is_named_and_nothing_is_stored(rig: Rig) -> None:
    cases = {
        "subscribe acme approvers bob": "approvers: 'bob' is not an approver: use a person",
        "subscribe acme quorum 0": "quorum: '0' must be a whole number from 1 to 50.",
        "subscribe acme quorum 51": "quorum: '51' must be a whole number from 1 to 50.",
        "subscribe acme approve_on irc": "approve_on: 'irc': not a surface (use slack, matrix",
        "subscribe acme quorum 2 quroum 3": "'quroum' is not understood here",
        "subscribe acme approvers": "`approvers` needs a value",
        "unsubscribe acme quorum 2": "`quorum` is for subscribe only: unsubscribe takes",
        "policy now": "`policy` takes no arguments.",
    }
    for text, problem in cases.items():
        reply = await said(rig, text)
        assert reply.startswith(problem), reply
        assert "Usage, in the channel to route to:" in reply
    assert await rig.store.chat_routes() == []

    refused = await rig.command("policy", user=BOB)
    await rig.slack.idle()
    assert refused.status_code == 200
    text = rig.fake.responses()[-1]["body"]["text"]
    print(f"\n/elicitbot policy (by a non-admin)\n{text}")
    assert text == "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."


async def test_a_chat_routes_approvers_decide_and_nobody_else(rig: Rig) -> None:
    """End to end: the policy typed in Slack is stored, resolved for the question the chat route
    carries, and refuses a non-approver's approval; the approver's counts."""
    rig.service.config_routes = ()
    wire_names(rig)
    reply = await said(rig, f"subscribe acme board {BOARD} approvers slack:{ALICE}", channel=C1)
    assert reply.startswith("Subscribed:")

    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key, C1)

    await rig.click(message, button(message, "allow_once"), user=BOB)
    await rig.drain()
    [told] = rig.ephemerals(BOB)
    print(f"\nBOB's approval, refused:\n{told['text']}")
    assert told["text"] == "Only the approvers of this route can decide: Alice."
    assert await rig.status(key) is Status.PENDING
    # Told once per question: his next click hears a short reminder, not the list again.
    await rig.click(message, button(message, "deny"), user=BOB, action_ts="1700000100.000002")
    await rig.drain()
    assert [e["text"] for e in rig.ephemerals(BOB)][1:] == [TOLD_BEFORE]
    refusals = [a.code for a in await rig.store.audit(key) if a.action == "refusal"]
    assert refusals == ["not_approver", "not_approver"]

    await rig.click(message, button(message, "allow_once"), user=ALICE)
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert (stored.answer.respondent, stored.answer.option_ids) == (
        f"slack:{ALICE}",
        ("allow_once",),
    )


async def test_a_chat_routes_slack_user_group_decides_end_to_end(rig: Rig) -> None:
    """``/elicitbot subscribe acme approvers slack:S…`` through the real Bolt app (signed
    requests), a question the chat route carries, and the fake Web API answering
    ``usergroups.users.list``: a member of the group approves; a non-member is refused, told the
    group by its handle and the admins in words; his next click hears only a reminder."""
    rig.service.config_routes = ()
    wire_names(rig)
    rig.fake.add_usergroup("S0DEPLOY", [ALICE], handle="deploy-team")
    reply = await said(rig, "subscribe acme approvers slack:S0DEPLOY, admins", channel=C1)
    assert reply.startswith("Subscribed: requests of workspace `acme` now come to")
    assert "Who may decide: approvers: slack:S0DEPLOY, admins; quorum: 1" in reply

    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key, C1)

    await rig.click(message, button(message, "allow_once"), user=BOB)
    await rig.drain()
    [told] = rig.ephemerals(BOB)
    print(f"\nBOB's approval, refused:\n{told['text']}")
    assert told["text"] == (
        "Only the approvers of this route can decide: @deploy-team, the workspace admins."
    )
    await rig.click(message, button(message, "allow_once"), user=BOB, action_ts="1700000100.2")
    await rig.drain()
    assert [e["text"] for e in rig.ephemerals(BOB)] == [told["text"], TOLD_BEFORE]
    assert await rig.status(key) is Status.PENDING

    await rig.click(message, button(message, "allow_once"), user=ALICE, action_ts="1700000100.3")
    await rig.drain()
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED
    assert stored.answer is not None
    assert (stored.answer.respondent, stored.answer.display_name) == (f"slack:{ALICE}", "Alice")
    assert stored.answer.option_ids == ("allow_once",)
    assert [c.params["usergroup"] for c in rig.fake.calls_to("usergroups.users.list")] == [
        "S0DEPLOY"
    ], "one lookup, cached, served both clicks"
    assert len(rig.fake.calls_to("usergroups.list")) == 1
    assert rig.ephemerals(ALICE) == []

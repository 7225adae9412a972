"""An admin changes a chat route's policy while its question waits: the copy already in the
channel is redrawn (``chat.update`` through the outbox) under the new policy, end to end through
the real Bolt app (signed ``/elicitbot subscribe``) and the fake Web API. A config route listed
first keeps its questions: the chat route's change redraws nothing there. Block Kit printed."""

from __future__ import annotations

import copy
import json
from typing import Any

from adapters.slack.render import OPTION_ACTION, WEB_LINK_ACTION
from bot.domain.model import Route, RouteMatch
from tests.integration.slack.rig import C1, Rig, buttons
from tests.integration.slack.test_approve_on import LINK
from tests.integration.slack.test_chat_policy import said


def option_actions(message: dict[str, Any]) -> list[str]:
    return [b["action_id"] for b in buttons(message)]


async def test_re_subscribing_web_only_turns_the_waiting_approve_into_the_inbox_link(
    rig: Rig,
) -> None:
    rig.service.config_routes = ()
    rig.service.link_for = lambda key: f"{LINK}{key}"
    assert (await said(rig, "subscribe acme", channel=C1)).startswith("Subscribed")
    key = await rig.intake_fixture("approval-request")
    await rig.drain()
    before = copy.deepcopy(rig.message(key))
    print("\nBefore (every surface approves):\n" + json.dumps(before["blocks"], indent=2))
    assert f"{OPTION_ACTION}.0" in option_actions(before)
    assert WEB_LINK_ACTION not in option_actions(before)
    updates = len(rig.fake.calls_to("chat.update"))

    reply = await said(rig, "subscribe acme approve_on web", channel=C1)
    assert reply.startswith("Updated:")
    await rig.drain()

    [update] = rig.fake.calls_to("chat.update")[updates:]
    assert (update.params["channel"], update.params["ts"]) == (C1, before["ts"])
    after = rig.message(key)
    print("\nAfter `approve_on web` (chat.update):\n" + json.dumps(after["blocks"], indent=2))
    [actions] = [b for b in after["blocks"] if b.get("block_id") == "elicitbot.options.0"]
    assert [(e.get("action_id"), e.get("url")) for e in actions["elements"]] == [
        (WEB_LINK_ACTION, f"{LINK}{key}"),
        (f"{OPTION_ACTION}.2", None),
    ]
    assert actions["elements"][0]["text"]["text"] == "Approve in the web inbox"
    [redraw] = [a for a in await rig.store.audit(key) if a.action == "redraw"]
    assert redraw.detail == {"why": f"subscribe slack:{C1}"}

    # The same words again change nothing: nothing is redrawn.
    assert (await said(rig, "subscribe acme approve_on web", channel=C1)).startswith(
        "Already subscribed"
    )
    await rig.drain()
    assert len(rig.fake.calls_to("chat.update")) == updates + 1

    # Back to every surface: the Approve button returns.
    await said(rig, "subscribe acme quorum 1", channel=C1)
    await rig.drain()
    assert len(rig.fake.calls_to("chat.update")) == updates + 2
    again = rig.message(key)
    assert f"{OPTION_ACTION}.0" in option_actions(again)
    assert WEB_LINK_ACTION not in option_actions(again)


async def test_a_config_route_listed_first_keeps_its_copies_as_they_are(rig: Rig) -> None:
    """The chat route never decides a question the config route matches first: its change
    redraws nothing."""
    rig.service.config_routes = (
        Route(match=RouteMatch(workspace="acme"), destinations=(f"slack:{C1}",)),
    )
    await said(rig, "subscribe acme", channel=C1)
    key = await rig.intake_fixture("approval-request")
    await rig.drain()
    updates = len(rig.fake.calls_to("chat.update"))

    assert (await said(rig, "subscribe acme approve_on web", channel=C1)).startswith("Updated:")
    await rig.drain()
    assert rig.fake.calls_to("chat.update")[updates:] == []
    assert f"{OPTION_ACTION}.0" in option_actions(rig.message(key))
    assert [a for a in await rig.store.audit(key) if a.action == "redraw"] == []

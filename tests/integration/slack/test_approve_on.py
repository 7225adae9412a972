"""``approve_on = ["web"]`` on the route, end to end on Slack (the real Bolt app, the fake Web
API): the posted copy shows the request, keeps Deny, and has an "Approve in the web inbox" link
button where the approving buttons were; a click on that link is acked and does nothing; a
crafted approve click is refused privately, with the reason and the inbox page, and nothing is
recorded; Deny from Slack still decides."""

from __future__ import annotations

import json
from typing import Any

from adapters.slack.render import OPTION_ACTION, WEB_LINK_ACTION
from bot.domain.model import Route, Status
from tests.integration.slack.rig import ALICE, C1, Rig, buttons

LINK = "http://127.0.0.1:8787/#"
WEB_ONLY = Route(destinations=(f"slack:{C1}",), approve_on=("web",))


def web_only(rig: Rig) -> None:
    """The route the service judges by (and the copies render with: the rig's dispatcher asks
    the service, as the wiring sets it up); its links are the dispatcher's."""
    rig.service.config_routes = (WEB_ONLY,)
    rig.service.link_for = lambda key: f"{LINK}{key}"


def option_ids(message: dict[str, Any]) -> list[str | None]:
    return [json.loads(b["value"]).get("o") for b in buttons(message) if "value" in b]


async def test_a_web_only_route_links_to_the_inbox_where_approve_was_and_refuses_a_crafted_approve(
    rig: Rig,
) -> None:
    web_only(rig)
    key = await rig.intake_fixture("approval-request")
    await rig.drain()
    message = rig.message(key)
    print(json.dumps(message["blocks"], indent=2, ensure_ascii=False))

    [actions] = [b for b in message["blocks"] if b.get("block_id") == "elicitbot.options.0"]
    assert [(e.get("action_id"), e.get("url")) for e in actions["elements"]] == [
        (WEB_LINK_ACTION, f"{LINK}{key}"),
        (f"{OPTION_ACTION}.2", None),
    ]
    assert actions["elements"][0]["text"]["text"] == "Approve in the web inbox"
    assert "style" not in actions["elements"][0]
    assert option_ids(message) == [None, "deny"]  # the link's value names no option
    said = json.dumps(message["blocks"], ensure_ascii=False)
    assert "⚠️ Approving this request counts only in the web inbox. Other options work." in said

    # The link button: Slack sends a block_actions for it too; acked, nothing happens.
    link = next(b for b in buttons(message) if b["action_id"] == WEB_LINK_ACTION)
    response = await rig.click(message, link)
    assert (response.status_code, response.text) == (200, "")
    await rig.drain()
    assert rig.ephemerals(ALICE) == []
    assert await rig.status(key) is Status.PENDING

    crafted = {
        **next(b for b in buttons(message) if b["action_id"] == f"{OPTION_ACTION}.2"),
        "action_id": f"{OPTION_ACTION}.0",
        "value": json.dumps({"e": key, "o": "allow_once", "r": 1}),
    }
    assert (await rig.click(message, crafted)).status_code == 200
    await rig.drain()
    [told] = rig.ephemerals(ALICE)
    assert told["text"] == (
        "Approving this request counts only in the web inbox: “Allow once” is not taken here. "
        f"Approve in the web inbox: {LINK}{key}"
    )
    stored = await rig.store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.votes) == (Status.PENDING, None, ())
    audit = await rig.store.audit(key)
    assert [a.code for a in audit if a.action == "refusal"] == ["approve_elsewhere"]

    deny = next(b for b in buttons(message) if b["action_id"] == f"{OPTION_ACTION}.2")
    await rig.click(message, deny)
    await rig.drain()
    view = await rig.service.view(key)
    assert view is not None
    assert view.answer is not None
    assert (view.status, view.answer.option_ids) == (Status.ANSWERED, ("deny",))
    closed = rig.fake.message(C1, message["ts"])
    assert closed is not None
    assert not any(b["action_id"] == WEB_LINK_ACTION for b in buttons(closed))

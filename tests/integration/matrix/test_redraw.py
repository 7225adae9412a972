"""An admin changes a chat route's policy from the room while its question waits, on the real
Synapse: the prompt already in the room is edited (``m.replace``, through the outbox) under the
new policy: ``approve_on web`` puts the inbox link where the approving keycaps were. The Matrix
HTML is printed before and after."""

from __future__ import annotations

from tests.integration.matrix.rig import ONE, THREE, Rig
from tests.integration.matrix.test_chat_policy import said

LINK = "http://127.0.0.1:8787/#"
"""The rig dispatcher's inbox links."""


async def test_re_subscribing_web_only_edits_the_waiting_prompt_to_link_to_the_inbox(
    rig: Rig,
) -> None:
    cast = rig.cast
    rig.bot.service.config_routes = ()
    reply = await said(rig, cast.alice, rig.room, "!elicitbot subscribe acme")
    assert reply.startswith("Subscribed:")
    key, prompt = await rig.post("approval-request")
    [event] = await rig.prompts(key)
    before = event["content"]
    print("Matrix HTML before:", before["formatted_body"])
    assert f"{ONE} <b>Allow once</b>" in before["formatted_body"]
    assert "Approve in the web inbox" not in before["body"]
    assert await rig.edits(prompt) == []

    reply = await said(rig, cast.alice, rig.room, "!elicitbot subscribe acme approve_on web")
    assert reply.startswith("Updated:")
    assert await rig.bot.dispatcher.drain() >= 1
    [edit] = await rig.edits(prompt)
    new = edit["content"]["m.new_content"]
    print("Matrix HTML after `approve_on web`:", new["formatted_body"])
    link = f"{LINK}{key}"
    html = new["formatted_body"]
    assert f'🔗 <b>Allow once</b> — Approve in the web inbox: <a href="{link}">{link}</a>' in html
    assert f"{THREE} <b>Deny</b>" in html
    assert f"{ONE} " not in new["body"]
    [redraw] = [a for a in await rig.store.audit(key) if a.action == "redraw"]
    assert redraw.detail == {"why": f"subscribe {rig.destination}"}

"""An admin changes a chat route's policy from the room while its question waits, on the real
Synapse: the prompt already in the room is edited (``m.replace``, through the outbox) under the
new policy: ``approve_on web`` puts the inbox link where the approving keycaps were. The Matrix
HTML is printed before and after."""

from __future__ import annotations

from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import ElicitationKey
from bot.domain.refs import MatrixRef
from tests.integration.matrix.rig import ONE, THREE, Rig
from tests.integration.matrix.test_chat_policy import said
from tests.unit.sources.superpipeline_fixtures import VALID

LINK = "http://127.0.0.1:8787/#"
"""The rig dispatcher's inbox links."""
WORKSPACE = "wsredraw"
"""A workspace of this test's own: the shared accounts' other rooms may hold routes for acme."""


async def post(rig: Rig) -> tuple[ElicitationKey, str]:
    """The approval request of :data:`WORKSPACE`, posted (and its keycaps seeded)."""
    key = await rig.intake_elicitation(parse_body(VALID["approval-request"], workspace=WORKSPACE))
    assert await rig.bot.dispatcher.drain() >= 1
    [delivery] = await rig.store.deliveries(key)
    assert isinstance(delivery.ref, MatrixRef)
    assert (delivery.destination, delivery.state) == (rig.destination, "posted")
    return key, delivery.ref.event_id


async def test_re_subscribing_web_only_edits_the_waiting_prompt_to_link_to_the_inbox(
    rig: Rig,
) -> None:
    cast = rig.cast
    rig.bot.service.config_routes = ()
    reply = await said(rig, cast.alice, rig.room, f"!elicitbot subscribe {WORKSPACE}")
    assert reply.startswith("Subscribed:")
    key, prompt = await post(rig)
    [event] = await rig.prompts(key)
    before = event["content"]
    print("Matrix HTML before:", before["formatted_body"])
    assert f"{ONE} <b>Allow once</b>" in before["formatted_body"]
    assert "Approve in the web inbox" not in before["body"]
    assert await rig.edits(prompt) == []

    reply = await said(
        rig, cast.alice, rig.room, f"!elicitbot subscribe {WORKSPACE} approve_on web"
    )
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

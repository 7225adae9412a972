"""``approve_on = ["web"]`` on the route, on the real Synapse: the prompt shows the request and
Deny, and where the approving options were, "Approve in the web inbox" with the inbox page as a
link (the HTML an ``<a href>``); no keycap is seeded for an approving option; an approving keycap
reacted anyway, or its number replied in the thread, is refused privately with the reason and
the link, and nothing is recorded; Deny from the room still decides."""

from __future__ import annotations

from bot.domain.model import Route, Status
from tests.integration.matrix.rig import ONE, THREE, TWO, Rig, refusal_of

LINK = "http://127.0.0.1:8787/#"
REFUSED = (
    "Approving this request counts only in the web inbox: “Allow once” is not taken here. "
    "Approve in the web inbox: {link}"
)


async def web_only(rig: Rig) -> None:
    """A bot process whose route to the room counts approving only in the web inbox."""
    rig.routes = [Route(destinations=(rig.destination,), approve_on=("web",))]
    await rig.bot.close()
    rig.bots.pop()
    bot = await rig.start_bot()
    bot.service.link_for = lambda key: f"{LINK}{key}"


async def test_a_web_only_route_links_to_the_inbox_seeds_no_approving_keycap_and_refuses_one(
    rig: Rig,
) -> None:
    await web_only(rig)
    key, prompt = await rig.post("approval-request")
    link = f"{LINK}{key}"
    [event] = await rig.prompts(key)
    content = event["content"]
    print("Matrix HTML:", content["formatted_body"])
    print("Matrix body:", content["body"])
    html = content["formatted_body"]
    assert f'🔗 <b>Allow once</b> — Approve in the web inbox: <a href="{link}">{link}</a>' in html
    assert f"🔗 Allow once — Approve in the web inbox: {link}" in content["body"]
    assert f"{THREE} <b>Deny</b>" in html
    assert "🔗 <b>Always allow</b> <i>(workspace admins only)</i> <i>(in the web inbox)</i>" in html
    assert f"{ONE} " not in content["body"]
    assert f"{TWO} " not in content["body"]
    assert (
        "Approving this request counts only in the web inbox. The other options work here."
        in (content["body"])
    )
    assert await rig.seeded(prompt) == [THREE]

    bob = rig.cast.bob
    await rig.hs.react(bob, rig.room, prompt, ONE)
    [told] = await rig.wait_notices(prompt, 1)
    assert refusal_of(told, bob) == REFUSED.format(link=link)
    print("Matrix HTML of the refusal:", told["content"]["formatted_body"])
    await rig.hs.reply_in_thread(bob, rig.room, prompt, "1")
    [_, again] = await rig.wait_notices(prompt, 2)
    assert refusal_of(again, bob) == REFUSED.format(link=link)
    stored = await rig.store.get(key)
    assert stored is not None
    assert (stored.status, stored.answer, stored.votes) == (Status.PENDING, None, ())

    await rig.hs.react(bob, rig.room, prompt, THREE)
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("deny",), bob.key)

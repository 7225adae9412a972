"""A quorum counted across Slack, an encrypted Matrix room and the web inbox (answer rule 9).

One SuperPipeline approval goes to a Slack channel (the fake Web API), an encrypted room on the
real Synapse and the web inbox, through the rig of :mod:`tests.integration.test_mixed_route`
(the real Service, Dispatcher, Bolt app, MatrixChat with encryption and its listener) with the
inbox router on the same app behind a sign-in proxy. The route's approvers are one person on
each surface: Bob on Slack (``slack:U0BOB``, linked to ``web:bob`` by ``[people.principals]``),
alice in the encrypted room, carol in the web inbox.

- quorum 2: a non-approver's click is refused; Bob's Slack vote rewrites every copy to "Approved
  by Bob (1 of 2) — waiting for one more approver: <alice>, carol" (who may still approve; Bob's
  entry left out) (the Slack ``chat.update``, the Matrix
  ``m.replace`` alice decrypts, the inbox card; printed, and the card screenshotted in headless
  Chromium); Bob again from the web is refused; alice's encrypted reaction decides: one answer,
  one write-back whose ``approvals`` name both, every copy rewritten to the result. On SQLite
  and PostgreSQL.
- quorum 3: the web vote is the third and decides.
- one eligible reject decides at once, the vote before it notwithstanding.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.slack.api.people import SlackNames
from adapters.sources.superpipeline.sink import answered_document
from adapters.web.identity import IdentityPolicy
from bot.domain.model import Answer, ElicitationKey, People, Route, Status
from bot.domain.refs import MatrixRef, SlackRef
from bot.outbox import writeback_key
from tests.conftest import FakeClock
from tests.integration.matrix.rig import ONE, THREE, until
from tests.integration.matrix_e2ee.test_e2ee import reaction, send_encrypted
from tests.integration.slack.rig import ADMIN, BOB, C1, button, has_actions
from tests.integration.test_mixed_route import Mixed, edits_of, event, start_mixed
from tests.integration.web.test_browser import (
    as_user,
    chromium,
    loopback_socket,
    screenshot,
    serving,
    wait_until,
)
from tests.integration.web.test_browser import card as card_element
from tests.integration.web.test_inbox import HEADER, PROXY, card, post_answer, section
from tests.synapse import Homeserver, MatrixUser, Synapse

SIGNED_IN = IdentityPolicy(user_header=HEADER, trusts=PROXY.trusts)
TALLY_1_OF_2 = "🗳️ Approved by Bob (1 of 2) — waiting for one more approver"
NOT_APPROVER = "Only the approvers of this route can decide: "

Start = Callable[[str, int], Awaitable[Mixed]]


def policy(quorum: int, alice: MatrixUser, room: str) -> tuple[People, Route]:
    """Bob on Slack (and, linked, in the web inbox), alice in the room, carol on the web."""
    people = People(
        admins=frozenset({f"slack:{ADMIN}"}),
        principals={f"slack:{BOB}": "usr_bob", "web:bob": "usr_bob"},
    )
    route = Route(
        destinations=(f"slack:{C1}", f"matrix:{room}", "web"),
        approvers=(f"slack:{BOB}", alice.key, "web:carol"),
        quorum=quorum,
    )
    return people, route


@pytest.fixture
async def across(
    synapse: Synapse, homeserver: Homeserver, clock: FakeClock, tmp_path: Path
) -> AsyncIterator[Start]:
    """``await across(store_url, quorum)``: the mixed rig with :func:`policy`'s route."""
    async with contextlib.AsyncExitStack() as stack:

        async def start(store_url: str, quorum: int) -> Mixed:
            m = await start_mixed(
                stack,
                synapse,
                homeserver,
                store_url,
                clock,
                tmp_path,
                functools.partial(policy, quorum),
                SIGNED_IN,
            )
            # As bot.app.surfaces wires it: people by their Slack name (users.info), as shown.
            m.slack.identify = SlackNames(m.slack_chat.client, clock=clock).identify
            m.fake.add_user(BOB, display_name="Bob")
            m.fake.add_user(ADMIN, display_name="Ada")
            return m

        yield start


async def post_to_all(m: Mixed) -> tuple[ElicitationKey, SlackRef, MatrixRef]:
    """Intake and post; alice reads the room's prompt, decrypted."""
    key = await m.intake_options(f"May I deploy build {uuid.uuid4().hex[:8]} to production?")
    await m.dispatcher.drain()
    copies = {d.destination: d for d in await m.store.deliveries(key)}
    assert {d: c.state for d, c in copies.items()} == {
        f"slack:{C1}": "posted",
        f"matrix:{m.room}": "posted",
        "web": "posted",
    }
    slack, room = copies[f"slack:{C1}"].ref, copies[f"matrix:{m.room}"].ref
    assert isinstance(slack, SlackRef)
    assert isinstance(room, MatrixRef)
    await m.alice.until(m.room, functools.partial(event, room.event_id), "the prompt")
    return key, slack, room


async def click(m: Mixed, ts: str, option: str, user: str) -> list[str]:
    """``user`` clicks ``option`` on the Slack copy; what they were told privately."""
    message = m.fake.message(C1, ts)
    assert message is not None
    before = len(m.fake.ephemerals())
    assert await m.click(message, button(message, option), user) == 200
    await m.slack.idle()
    return [e["text"] for e in m.fake.ephemerals()[before:] if e["user"] == user]


async def react(m: Mixed, room: MatrixRef, key: str) -> None:
    """alice reacts ``key`` to the room's prompt, encrypted."""
    await send_encrypted(m.alice.client, m.room, "m.reaction", reaction(room.event_id, key))


async def votes_stored(m: Mixed, key: ElicitationKey, count: int) -> None:
    """Until ``count`` votes are stored; then the copies are rewritten (the outbox drained)."""

    async def check() -> bool | None:
        stored = await m.store.get(key)
        return True if stored is not None and len(stored.votes) == count else None

    await until(check, f"{count} votes on {key}")
    await m.dispatcher.drain()


def web(m: Mixed, user: str) -> httpx.AsyncClient:
    """The inbox as ``user``, signed in by the proxy on this machine."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=m.app), base_url="http://127.0.0.1:8787",
        headers={HEADER: user},
    )  # fmt: skip


async def inbox_card(m: Mixed, key: str, part: str = "pending") -> str:
    async with web(m, "carol") as carol:
        page = (await carol.get("/")).text
    return card(section(page, part), key)


def slack_text(m: Mixed, ts: str) -> str:
    message = m.fake.message(C1, ts)
    assert message is not None
    return json.dumps(message["blocks"], ensure_ascii=False)


async def matrix_edit(m: Mixed, room: MatrixRef, shown: str) -> dict[str, Any]:
    """The bot's latest edit of the room's prompt once it shows ``shown``, as alice decrypted it."""

    def found(events: dict[str, Any]) -> list[Any]:
        edits = edits_of(m, events, room.event_id)
        return (
            edits if edits and shown in edits[-1].source["content"]["m.new_content"]["body"] else []
        )

    edits = await m.alice.until(m.room, found, f"the room's copy showing {shown!r}")
    content: dict[str, Any] = edits[-1].source["content"]["m.new_content"]
    return content


def plain(html_text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_text))


async def shoot_the_card(m: Mixed, key: str, profile: Path) -> Path:
    """The inbox served for real, carol's view in headless Chromium; the page, screenshotted."""

    def take(url: str) -> Path:
        with chromium(profile) as driver:
            as_user(driver, "carol")
            driver.get(url + "/")
            wait_until(driver, lambda d: "(1 of 2)" in card_element(d, key).text)
            return screenshot(driver, "inbox-quorum-1-of-2.png", 1200)

    sock = loopback_socket()
    async with serving(m.app, sock):
        return await asyncio.to_thread(take, f"http://127.0.0.1:{sock.getsockname()[1]}")


async def answered(m: Mixed, key: ElicitationKey) -> Answer:
    answer = await m.answered(key)
    await m.dispatcher.drain()
    assert m.sink.attempts == [writeback_key(key)], "one write-back"
    [audit] = [a for a in await m.store.audit(key) if a.action == "answer"]
    assert audit.actor == answer.respondent
    return answer


async def every_copy_shows(
    m: Mixed, key: str, slack: SlackRef, room: MatrixRef, option: str
) -> None:
    """The result on the Slack copy (no buttons left), the room's copy and the inbox history,
    the tally gone from each."""
    result = f"— {option} —"
    final = m.fake.message(C1, slack.ts)
    assert final is not None
    assert not has_actions(final)
    assert "Answered by" in slack_text(m, slack.ts)
    assert result in slack_text(m, slack.ts)
    assert "🗳️" not in slack_text(m, slack.ts)
    edit = await matrix_edit(m, room, result)
    assert "Answered by" in edit["body"]
    assert "🗳️" not in edit["body"]
    shown = plain(await inbox_card(m, key, "history"))
    assert option in shown
    assert "🗳️" not in shown
    said = [line for line in edit["body"].splitlines() if "Answered by" in line]
    print(f"the final copies: Slack {result!r}, Matrix {said}, web {shown!r}")


@pytest.mark.parametrize("backend", ["sqlite_url", "pg_url"])
@pytest.mark.slow
async def test_two_approvers_across_slack_an_encrypted_room_and_the_web(
    across: Start, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    m = await across(request.getfixturevalue(backend), 2)
    key, slack, room = await post_to_all(m)

    # Ada is a workspace admin but not an approver of this route: refused, told who decides.
    [told] = await click(m, slack.ts, "allow_once", ADMIN)
    assert told.startswith(NOT_APPROVER), told
    assert "slack:U0BOB" in told
    print(f"\nAda is told: {told}")

    [told] = await click(m, slack.ts, "allow_once", BOB)
    assert told == "Your approval is recorded (1 of 2); waiting for one more approver."
    await m.dispatcher.drain()
    [update] = m.fake.calls_to("chat.update")
    assert (update.params["channel"], update.params["ts"]) == (C1, slack.ts)
    assert TALLY_1_OF_2 in slack_text(m, slack.ts)
    assert has_actions(m.fake.message(C1, slack.ts) or {})  # still open for the others
    edit = await matrix_edit(m, room, TALLY_1_OF_2)
    assert TALLY_1_OF_2 in plain(edit["formatted_body"])
    assert TALLY_1_OF_2 in plain(await inbox_card(m, key))
    # Who may still approve: the route's approvers but Bob, by readable id, never a mention.
    still = f"{TALLY_1_OF_2}: {m.alice_user.key}, carol"
    assert still in slack_text(m, slack.ts)
    assert "<@" not in slack_text(m, slack.ts)
    assert still in plain(edit["formatted_body"])
    assert still in plain(await inbox_card(m, key))
    print("\nSlack at 1 of 2, Block Kit:\n" + json.dumps(
        (m.fake.message(C1, slack.ts) or {})["blocks"], indent=2, ensure_ascii=False))  # fmt: skip
    print(f"Matrix at 1 of 2, HTML (decrypted by alice):\n{edit['formatted_body']}")
    if backend == "sqlite_url":
        shot = await shoot_the_card(m, key, tmp_path / "chromium")
        assert shot.stat().st_size > 10_000
        print(f"the inbox card at 1 of 2: {shot}")

    # Bob again, from the web inbox: the same principal, one person.
    async with web(m, "bob") as bob:
        again = await post_answer(bob, key, option="allow_once")
    assert again.status_code == 409
    assert "You already approved this; waiting for 1 more approver(s)." in again.text
    stored = await m.store.get(key)
    assert stored is not None
    assert [(v.person, v.respondent, v.option_id) for v in stored.votes] == [
        ("usr_bob", f"slack:{BOB}", "allow_once")
    ]

    # alice, in the encrypted room, is the second approver: decided.
    await react(m, room, ONE)
    answer = await answered(m, key)
    alice = m.alice_user.key
    assert (answer.respondent, answer.option_ids) == (alice, ("allow_once",))
    [delivered] = m.sink.delivered
    document = answered_document(delivered.view, delivered.idempotency_key)
    assert [(a["by"], a["via"], a["option"]) for a in document["approvals"]] == [
        (f"slack:{BOB}", f"slack:{C1}", "allow_once"),
        (alice, f"matrix:{m.room}", "allow_once"),
    ]
    assert document["answeredBy"]["id"] == alice
    print("the write-back's approvals:", json.dumps(document["approvals"], indent=2))
    audit = await m.store.audit(key)
    assert [(a.code, a.actor) for a in audit if a.action == "refusal"] == [
        ("not_approver", f"slack:{ADMIN}"),
        ("already_voted", "web:bob"),
    ]
    await every_copy_shows(m, key, slack, room, "Allow once")


async def test_with_a_quorum_of_three_the_web_vote_decides(
    across: Start, sqlite_url: str, clock: FakeClock
) -> None:
    m = await across(sqlite_url, 3)
    key, slack, room = await post_to_all(m)
    await click(m, slack.ts, "allow_once", BOB)
    clock.advance(30)
    await react(m, room, ONE)
    await votes_stored(m, key, 2)
    two = f"🗳️ Approved by Bob and {m.alice_user.user_id.split(':')[0][1:]} (2 of 3)"
    assert two in (await matrix_edit(m, room, two))["body"]
    assert two in slack_text(m, slack.ts)
    assert "(2 of 3)" in plain(await inbox_card(m, key))
    assert f"{two} — waiting for one more approver: carol" in slack_text(m, slack.ts)

    async with web(m, "carol") as carol:
        decided = await post_answer(carol, key, option="allow_once")
    assert decided.status_code == 303, decided.text
    answer = await answered(m, key)
    assert (answer.respondent, answer.via) == ("web:carol", "web")
    assert [(a.by, a.via) for a in answer.approvals] == [
        (f"slack:{BOB}", f"slack:{C1}"),
        (m.alice_user.key, f"matrix:{m.room}"),
        ("web:carol", "web"),
    ]
    await every_copy_shows(m, key, slack, room, "Allow once")


async def test_one_eligible_reject_decides_at_once(across: Start, pg_url: str) -> None:
    m = await across(pg_url, 2)
    key, slack, room = await post_to_all(m)
    await click(m, slack.ts, "allow_once", BOB)
    await react(m, room, THREE)  # Deny
    answer = await answered(m, key)
    assert (answer.respondent, answer.option_ids) == (m.alice_user.key, ("deny",))
    assert answer.approvals == ()
    view = await m.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    await every_copy_shows(m, key, slack, room, "Deny")

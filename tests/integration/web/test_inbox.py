"""The web inbox over HTTP: its router on the real app with a Service, SqlStore and Dispatcher.

Requests go through ``httpx.ASGITransport`` (client address 127.0.0.1 unless a test says
otherwise). Each test checks what the page shows and what the store holds afterwards: answers,
refusals, audit rows, write-backs and the rewrite of the Slack copy.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from adapters.web import reads
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import CSRF_COOKIE
from bot.app.config import ServerConfig
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Attempt,
    Elicitation,
    ElicitationKey,
    Identity,
    Kind,
    Option,
    PreviewItem,
    Status,
)
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.web import (
    AGENT,
    EXAMPLES,
    SLACK,
    Rig,
    intake,
    intake_elicitation,
    make_rig,
)
from tests.showcase import long_question

HEADER = "X-Forwarded-User"
PROXY = ServerConfig.model_validate({"trusted_proxies": ["127.0.0.1"]})
"""The sign-in proxy runs on this machine: only its requests may name a user."""
ALICE_SLACK = Identity(platform="slack", user="U0ALICE", display_name="Alice")
CANARY = "s3cr3t-canary-7f1e9a"
SENDING_ALICE_DENY = "⏳ Sending Alice\u2019s answer — Deny — to SuperPipeline…"
"""What a card says while Alice's answer is recorded here and not yet accepted upstream."""


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def sink() -> FakeSink:
    return FakeSink()


@pytest.fixture
def rig(sqlite_store: SqlStore, clock: FakeClock, sink: FakeSink) -> Rig:
    return make_rig(sqlite_store, clock, sink)


@pytest.fixture
def proxied(sqlite_store: SqlStore, clock: FakeClock, sink: FakeSink) -> Rig:
    """The same, behind a sign-in proxy on this machine: alice is an admin, bob is not."""
    policy = IdentityPolicy(user_header=HEADER, admins=frozenset({"alice"}), trusts=PROXY.trusts)
    return make_rig(sqlite_store, clock, sink, identity=policy)


def client_for(
    rig: Rig, *, user: str | None = None, address: str = "127.0.0.1"
) -> httpx.AsyncClient:
    headers = {HEADER: user} if user is not None else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=rig.app, client=(address, 50123)),
        base_url="http://127.0.0.1:8787",
        headers=headers,
    )


@pytest.fixture
async def client(rig: Rig) -> AsyncIterator[httpx.AsyncClient]:
    async with client_for(rig) as c:
        yield c


async def token(client: httpx.AsyncClient) -> str:
    if CSRF_COOKIE not in client.cookies:
        response = await client.get("/")
        assert response.status_code == 200, response.text
    return client.cookies[CSRF_COOKIE]


async def post_answer(
    client: httpx.AsyncClient,
    key: str,
    *,
    as_json: bool = False,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> httpx.Response:
    data = {"csrf": await token(client), "key": key, **fields}
    extra = dict(headers or {})
    if as_json:
        extra["Accept"] = "application/json"
    return await client.post("/inbox/answer", data=data, headers=extra)


def section(page: str, name: str) -> str:
    start = page.find(f'<section id="{name}"')
    if start == -1:
        return ""
    return page[start : page.index("</section>", start)]


def keys_in(html: str) -> list[str]:
    return re.findall(r'data-key="([^"]+)"', html)


def card(page: str, key: str) -> str:
    start = page.index(f'data-key="{key}"')
    end = page.find("</article>", start)
    end_row = page.find("</li>", start)
    ends = [e for e in (end, end_row) if e != -1]
    return page[start : min(ends)]


async def answer_in_slack(rig: Rig, key: ElicitationKey, *options: str) -> None:
    attempt = Attempt(shown=SHOWN_WHOLE, respondent=ALICE_SLACK, option_ids=options, via=SLACK)
    outcome = await rig.service.answer(key, attempt)
    assert outcome.won, outcome


def elicitation(clock: FakeClock, source_id: str, **fields: Any) -> Elicitation:
    values: dict[str, Any] = {
        "source": "superpipeline",
        "source_id": source_id,
        "workspace": "acme",
        "asker": AGENT,
        "title": "A question",
        "question": "What now?",
        "answer_mode": AnswerMode.SINGLE_CHOICE,
        "options": (Option(id="a", label="A"), Option(id="b", label="B")),
        "created_at": clock.now(),
    }
    values.update(fields)
    return Elicitation(**values)


async def drain(rig: Rig) -> None:
    while await rig.dispatcher.run_once():
        pass


# --------------------------------------------------------------------------- listing


async def test_pending_newest_first_with_everything_slack_shows(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    keys = []
    for case in EXAMPLES:
        keys.append(await intake(rig, case))
        rig.clock.advance(60)

    response = await client.get("/")

    assert response.status_code == 200
    page = response.text
    assert keys_in(section(page, "pending")) == list(reversed(keys))
    approval = card(page, "superpipeline:apr_4d5e6f7081920314")
    for shown in (
        "May I run the migration?",
        "Developer Experience",
        "prn_0123456789abcdef0123",
        "sub_7d6c5b4a39281706",
        "revision 1",
        "stk-capability/v1",
        "sha256:4f2a0c1e9b8d7f6a5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7",
        ">2026-11-11 09:30 UTC</time>",
        "We shipped the decision envelope.",
        '<span class="plabel">Account</span> <span class="pvalue">@example</span>',
        '<a href="https://example.com/draft"',
        "Reminder <time",
        ">2026-11-10 10:30 UTC</time>",
        'value="allow_once" class="opt approve">Allow once</button>',
        'value="deny" class="opt reject">Deny</button>',
    ):
        assert shown in approval, shown
    always = re.search(r'value="allow_always"[^>]*>(.*?)</button>', approval)
    assert always is not None
    assert "admin only" in always.group(1)
    free = card(page, "superpipeline:eli_2b3c4d5e6f708192")
    assert 'name="text"' in free
    assert 'data-max="2000"' in free
    assert 'name="option"' not in free
    empty = card(page, "superpipeline:eli_3c4d5e6f70819203")
    assert "(no question text)" in empty
    assert 'data-max="32768"' in empty
    assert "Nothing answered or expired yet." in section(page, "history")


async def test_a_900kb_question_is_shown_whole_with_its_approving_options(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    """No spec bounds a question: the inbox shows all of it, so approving stays offered."""
    question = long_question(900_000)
    key = await intake(rig, "options", question=question)
    response = await client.get("/")
    assert response.status_code == 200
    shown = html.unescape(card(response.text, key))
    missing = [line for line in question.splitlines() if line not in shown]
    assert missing == [], f"{len(missing)} lines of the question are not on the card"
    assert 'value="allow_once" class="opt approve">Allow once</button>' in shown


async def test_page_headers_forbid_inline_script_and_framing(client: httpx.AsyncClient) -> None:
    response = await client.get("/")

    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    assert not re.search(r"<script(?![^>]*\bsrc=)", response.text)
    assert " style=" not in response.text
    for asset in re.findall(r'(?:href|src)="(/static/[^"]+)"', response.text):
        got = await client.get(asset)
        assert got.status_code == 200
        assert "immutable" in got.headers["cache-control"]
    assert (await client.get("/static/nope.js")).status_code == 404


async def test_every_preview_type_is_shown_and_agent_text_is_escaped(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    previews = (
        PreviewItem(type="text", label="Post", text="Line one\nline two"),
        PreviewItem(type="field", label="Account", value="@example"),
        PreviewItem(type="link", label="Draft", url="https://example.com/d?a=1&b=2"),
        PreviewItem(type="link", label="Evil", url="javascript:alert(1)"),
        PreviewItem(type="markdown", label="Notes", text="**bold** <b>raw</b>"),
        PreviewItem(type="code", label="Script", text="print('<hi>')", language="python"),
        PreviewItem(type="diff", label="Change", text="@@ -1 +1 @@\n-old line\n+new line\n same"),
        PreviewItem(type="command", label="Runs", text="rm -rf /tmp/x"),
        PreviewItem(type="json", label="Payload", text='{"a": 1, "b": [2]}'),
        PreviewItem(type="email", label="Mail", text="To: ops@example.org\nHi"),
        PreviewItem(type="chart", label="Other", text="unknown kinds show as text"),
    )
    e = elicitation(
        rig.clock,
        "eli_escape",
        title="</h3><script>alert('title')</script>",
        question="<script>alert(1)</script> @channel <!here>",
        kind=Kind.APPROVAL,
        options=(
            Option(id="ok", label="<img src=x onerror=alert(2)>", meaning="approve"),
            Option(id="no", label="No", meaning="reject"),
        ),
        subject=ApprovalSubject(
            id="sub_1", digest="sha256:" + "ab" * 32, schema_="s/v1", revision=3, preview=previews
        ),
    )
    key = await intake_elicitation(rig, e)

    page = card((await client.get("/")).text, key)

    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; @channel &lt;!here&gt;" in page
    assert "&lt;/h3&gt;&lt;script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<img" not in page
    assert 'href="javascript:' not in page
    assert "javascript:alert(1)" in page  # shown as text, never linked
    assert '<a href="https://example.com/d?a=1&amp;b=2"' in page
    assert "Line one\nline two" in page
    assert "<strong>bold</strong> &lt;b&gt;raw&lt;/b&gt;" in page  # Markdown rendered, HTML not
    assert "print(&#39;&lt;hi&gt;&#39;)" in page
    assert "<small>python</small>" in page
    assert '<span class="add">+new line\n</span>' in page
    assert '<span class="del">-old line\n</span>' in page
    assert '<span class="hunk">@@ -1 +1 @@\n</span>' in page
    assert "$ rm -rf /tmp/x" in page
    assert "&#34;a&#34;: 1,\n  &#34;b&#34;: [\n    2\n  ]" in page
    assert "To: ops@example.org\nHi" in page
    assert "unknown kinds show as text" in page
    for label in ("Post", "Account", "Draft", "Notes", "Script", "Change", "Runs", "Payload"):
        assert f'<span class="plabel">{label}' in page, label


async def test_filters_by_workspace_board_source_and_status(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    acme = await intake(rig, "options")
    rig.clock.advance(1)
    beta = await intake(rig, "free-text", workspace="beta", boardId="brd_ops", boardName="Ops")
    rig.clock.advance(1)
    other = await intake_elicitation(
        rig, elicitation(rig.clock, "req_1", source="handup", workspace="acme")
    )
    rig.clock.advance(1)
    done = await intake(rig, "options", elicitationId="eli_answered")
    await answer_in_slack(rig, done, "deny")

    async def pending(**query: str) -> list[str]:
        page = (await client.get("/", params=query)).text
        return keys_in(section(page, "pending"))

    assert await pending() == [other, beta, acme]
    assert await pending(workspace="beta") == [beta]
    assert await pending(board="brd_ops") == [beta]
    assert await pending(board="Ops") == [beta]
    assert await pending(source="handup") == [other]
    assert await pending(workspace="acme", source="superpipeline") == [acme]
    assert await pending(workspace="nowhere") == []
    page = (await client.get("/", params={"status": "answered"})).text
    assert section(page, "pending") == ""
    assert keys_in(section(page, "history")) == [done]
    page = (await client.get("/", params={"status": "pending"})).text
    assert section(page, "history") == ""
    assert done not in keys_in(page)
    for choice in ('<option value="beta">', '<option value="handup">', ">Ops (brd_ops)</option>"):
        assert choice in page


async def test_history_shows_who_what_when_and_via(rig: Rig, client: httpx.AsyncClient) -> None:
    answered = await intake(rig, "options")
    expired = await intake(rig, "free-text")
    rig.clock.advance(300)
    await answer_in_slack(rig, answered, "deny")
    await rig.store.close_elicitation(
        expired, Status.EXPIRED, rig.clock.now(), answer=None, audit={}
    )

    page = (await client.get("/")).text

    assert keys_in(section(page, "pending")) == []
    row = card(section(page, "history"), answered)
    assert '<span class="who">Alice</span>' in row
    assert '<span class="what">Deny</span>' in row
    assert ">2026-11-10 09:35 UTC</time>" in row
    assert 'via <span class="via">Slack</span>' in row
    assert "expired" in card(section(page, "history"), expired)


# --------------------------------------------------------------------------- answering


async def test_an_answer_from_the_page_is_recorded_written_back_and_the_slack_copy_updated(
    rig: Rig, client: httpx.AsyncClient, sink: FakeSink
) -> None:
    key = await intake(rig, "options")
    await drain(rig)
    assert len(rig.chat.posted) == 1

    response = await post_answer(client, key, option="deny")

    assert response.status_code == 303
    assert response.headers["location"].startswith("/?done=")
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED
    assert stored.answer is not None
    assert stored.answer.respondent == "web:local"
    assert stored.answer.via == "web"
    assert stored.answer.option_ids == ("deny",)
    await drain(rig)
    assert [d.view.answer.respondent for d in sink.delivered if d.view.answer] == ["web:local"]
    [update] = rig.chat.updated
    assert update.destination == SLACK
    assert update.view.status is Status.ANSWERED
    page = (await client.get(response.headers["location"])).text
    assert "Recorded: Deny" in page
    row = card(section(page, "history"), key)
    assert '<span class="who">local admin</span>' in row
    assert 'via <span class="via">the web inbox</span>' in row


async def test_the_page_script_gets_json(rig: Rig, client: httpx.AsyncClient) -> None:
    key = await intake(rig, "options")

    response = await post_answer(client, key, as_json=True, option="allow_once")

    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "key": key,
        "message": "Recorded: Allow once (on “Research this”).",
    }


async def test_a_stale_click_is_refused_with_who_answered(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "options")
    await answer_in_slack(rig, key, "deny")

    html = await post_answer(client, key, option="allow_once")
    as_json = await post_answer(client, key, as_json=True, option="allow_once")

    said = "Already answered by Alice (Deny) at 2026-11-10 09:30 UTC via Slack."
    assert html.status_code == 409
    assert said in html.text
    # Recorded, not yet accepted by SuperPipeline: the card says it is on its way.
    assert SENDING_ALICE_DENY in html.text
    assert "Answered by Alice" not in html.text
    assert as_json.status_code == 409
    assert as_json.json() == {"ok": False, "code": "already_answered", "message": said}
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.respondent == "slack:U0ALICE"

    await rig.dispatcher.drain()  # the write-back is accepted
    again = await post_answer(client, key, option="allow_once")
    assert again.status_code == 409
    assert said in again.text
    assert "Answered by Alice — Deny" in again.text
    assert SENDING_ALICE_DENY not in again.text
    refusals = [a for a in await rig.store.audit(key) if a.action == "refusal"]
    assert [(a.actor, a.code) for a in refusals] == [("web:local", "already_answered")] * 3


async def test_a_double_click_records_one_answer_and_one_write_back(
    store: SqlStore, clock: FakeClock
) -> None:
    """Both databases: two posts at once, different options; the store picks one winner."""
    sink = FakeSink()
    rig = make_rig(store, clock, sink)
    key = await intake(rig, "options")
    async with client_for(rig) as client:
        await token(client)
        first, second = await asyncio.gather(
            post_answer(client, key, as_json=True, option="allow_once"),
            post_answer(client, key, as_json=True, option="deny"),
        )

    assert sorted([first.status_code, second.status_code]) == [200, 409]
    loser = first if first.status_code == 409 else second
    assert loser.json()["code"] == "already_answered"
    assert await store.count("answer") == 1
    await drain(rig)
    assert len(sink.delivered) == 1


async def test_the_page_and_slack_racing_record_one_answer(
    store: SqlStore, clock: FakeClock
) -> None:
    """Both databases, a few rounds: a click in the page and one in Slack at the same moment."""
    sink = FakeSink()
    rig = make_rig(store, clock, sink)
    rounds = 5
    async with client_for(rig) as client:
        await token(client)
        for n in range(rounds):
            key = await intake(rig, "options", elicitationId=f"eli_race_{n}")
            slack = Attempt(
                shown=SHOWN_WHOLE, respondent=ALICE_SLACK, option_ids=("deny",), via=SLACK
            )
            page, in_slack = await asyncio.gather(
                post_answer(client, key, as_json=True, option="allow_once"),
                rig.service.answer(key, slack),
            )
            assert (page.status_code == 200) != in_slack.won
            stored = await store.get(key)
            assert stored is not None
            assert stored.answer is not None
            winner = "web:local" if page.status_code == 200 else "slack:U0ALICE"
            assert stored.answer.respondent == winner
            if not in_slack.won:
                assert "Already answered by local admin" in str(in_slack.result)

    assert await store.count("answer") == rounds
    await drain(rig)
    assert len(sink.delivered) == rounds


async def test_multiple_choice_and_acknowledge(rig: Rig, client: httpx.AsyncClient) -> None:
    options = tuple(Option(id=i, label=i.upper()) for i in "abc")
    multi = await intake_elicitation(
        rig,
        elicitation(rig.clock, "m1", answer_mode=AnswerMode.MULTI_CHOICE, options=options),
    )
    ack = await intake_elicitation(
        rig, elicitation(rig.clock, "k1", answer_mode=AnswerMode.ACKNOWLEDGE, options=())
    )
    page = (await client.get("/")).text
    assert page.count('type="checkbox" name="option"') == 3
    assert 'name="ack" value="1"' in card(page, ack)

    empty = await post_answer(client, multi, as_json=True)
    chosen = await client.post(
        "/inbox/answer",
        data={"csrf": await token(client), "key": multi, "option": ["a", "c"]},
    )
    acknowledged = await post_answer(client, ack, ack="1")

    assert empty.status_code == 422
    assert empty.json()["message"] == "Choose at least one of the options."
    assert chosen.status_code == 303
    assert acknowledged.status_code == 303
    chosen_answer = await rig.store.get(multi)
    assert chosen_answer is not None
    assert chosen_answer.answer is not None
    assert chosen_answer.answer.option_ids == ("a", "c")
    acked = await rig.store.get(ack)
    assert acked is not None
    assert acked.status is Status.ANSWERED


async def test_text_is_recorded_with_unix_line_ends(rig: Rig, client: httpx.AsyncClient) -> None:
    key = await intake(rig, "free-text")

    response = await post_answer(client, key, text="main\r\nthen rebase")

    assert response.status_code == 303
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.text == "main\nthen rebase"


# --------------------------------------------------------------------------- refusals


async def test_over_long_text_is_refused_and_the_typed_text_kept(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "free-text")
    typed = "é" * 1990 + "🙂" * 10 + "<b>"  # 2,003 code points, more UTF-8 bytes

    response = await post_answer(client, key, text=typed)

    assert response.status_code == 422
    assert "Your answer is 2,003 characters; the limit is 2,000." in response.text
    textarea = re.search(r"<textarea([^>]*)>(.*?)</textarea>", response.text, re.S)
    assert textarea is not None
    assert "maxlength" not in textarea.group(1)  # a browser would cut a paste silently
    assert textarea.group(2) == typed.replace("<b>", "&lt;b&gt;")
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING
    assert await rig.store.count("answer") == 0


async def test_a_non_admin_is_refused_keeps_the_text_and_an_admin_still_wins(
    proxied: Rig,
) -> None:
    key = await intake(proxied, "options", freeText={"maxLength": 500})
    async with client_for(proxied, user="bob") as bob, client_for(proxied, user="alice") as alice:
        refused = await post_answer(bob, key, option="allow_always", text="ship it")
        won = await post_answer(alice, key, option="allow_always")

    assert refused.status_code == 403
    assert "Only a workspace admin can choose “Always allow”." in refused.text
    assert re.search(r"<textarea[^>]*>ship it</textarea>", refused.text)
    assert won.status_code == 303
    stored = await proxied.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.respondent == "web:alice"


async def test_the_asker_cannot_answer(proxied: Rig) -> None:
    key = await intake(proxied, "free-text")
    async with client_for(proxied, user=AGENT) as agent:
        response = await post_answer(agent, key, text="I approve myself")

    assert response.status_code == 403
    assert "You asked this question, so you cannot answer it." in response.text
    assert "I approve myself" in response.text
    assert await proxied.store.count("answer") == 0


async def test_withheld_approval_is_disabled_refused_and_offered_once_complete(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    incomplete = {
        **json.loads(json.dumps(_subject())),
        "previewComplete": False,
    }
    key = await intake(rig, "approval-request", approvalSubject=incomplete)
    page = card((await client.get("/")).text, key)
    assert re.search(r'value="allow_once" class="opt approve" disabled', page)
    assert "The preview is incomplete, so approving is not offered. Other options work." in page
    assert re.search(r'value="deny" class="opt reject">', page)

    crafted = await post_answer(client, key, as_json=True, option="allow_once", revision="1")
    assert crafted.status_code == 422
    assert crafted.json()["code"] == "preview_incomplete"

    await intake(rig, "approval-request", ts="2026-11-10T09:31:00.000Z")
    page = card((await client.get("/")).text, key)
    assert not re.search(r'value="allow_once"[^>]*disabled', page)
    assert (await post_answer(client, key, option="allow_once", revision="1")).status_code == 303


async def test_the_card_form_carries_the_digest_it_shows_and_an_older_one_is_refused(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    """Rule 2 by digest in the web inbox: the card's form carries the subject digest the card
    showed; approving from a card of the old digest (same revision) is refused, from the new one
    recorded."""
    old = _subject()["digest"]
    key = await intake(rig, "approval-request")
    page = card((await client.get("/")).text, key)
    assert f'<input type="hidden" name="digest" value="{old}">' in page
    new = "sha256:" + "c4" * 32
    changed = {**json.loads(json.dumps(_subject())), "digest": new}  # revision stays 1
    await intake(rig, "approval-request", approvalSubject=changed, ts="2026-11-10T09:31:00.000Z")
    page = card((await client.get("/")).text, key)
    assert f'<input type="hidden" name="digest" value="{new}">' in page

    stale = await post_answer(
        client, key, as_json=True, option="allow_once", revision="1", digest=old
    )
    assert stale.status_code == 422
    assert stale.json()["code"] == "stale_revision"
    assert stale.json()["message"] == (
        "The request changed since this message was shown; answer on the updated message."
    )
    fresh = await post_answer(client, key, option="allow_once", revision="1", digest=new)
    assert fresh.status_code == 303


async def test_approval_after_the_subject_expired_is_withheld(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "approval-request")
    rig.clock.current = datetime(2026, 11, 11, 9, 31, tzinfo=UTC)

    page = card((await client.get("/")).text, key)
    refused = await post_answer(client, key, as_json=True, option="allow_once", revision="1")

    assert "The approval subject expired at 2026-11-11 09:30 UTC." in page
    assert re.search(r'value="allow_once" class="opt approve" disabled', page)
    assert refused.json()["code"] == "subject_expired"
    assert (await post_answer(client, key, option="deny", revision="1")).status_code == 303


async def test_a_secret_goes_upstream_and_is_never_stored_or_shown(
    rig: Rig, client: httpx.AsyncClient, sqlite_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = elicitation(
        rig.clock,
        "sec_1",
        source="vault",
        title="Deploy key",
        question="Paste the deploy token",
        answer_mode=AnswerMode.SECRET,
        options=(),
        max_length=40,
    )
    key = await intake_elicitation(rig, secret)
    page = card((await client.get("/")).text, key)
    assert 'type="password" name="text" autocomplete="off"' in page
    assert 'name="secret" value="1"' in page
    assert "<textarea" not in page

    with capture_logs() as events:  # the log events themselves, whatever handler is set up
        too_long = await post_answer(client, key, secret="1", text=CANARY * 3)
        sent = await post_answer(client, key, secret="1", text=CANARY)

    assert too_long.status_code == 422
    assert CANARY not in too_long.text
    assert sent.status_code == 303
    assert rig.secrets.secrets == [(key, CANARY)]
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.secret
    assert stored.answer.text is None
    sending = (await client.get("/", params={"key": key})).text
    assert "⏳ Sending local admin\u2019s answer — (secret) — to vault…" in sending
    assert CANARY not in sending
    await rig.dispatcher.drain()  # the write-back (of the fact, never the secret) is done
    after = (await client.get("/", params={"key": key})).text
    assert "Answered by local admin — (secret)" in after
    assert CANARY not in after
    export = await client.get("/admin/audit.jsonl", params={"key": key})
    assert CANARY not in export.text
    assert "answer.recorded" in [e["event"] for e in events]
    assert CANARY not in repr(events)
    logged = capfd.readouterr()
    assert CANARY not in logged.out + logged.err
    database = Path(sqlite_url.removeprefix("sqlite:///"))
    for path in (database, Path(f"{database}-wal")):
        if path.exists():
            assert CANARY.encode() not in path.read_bytes()


async def test_a_secret_that_cannot_go_upstream_is_refused_without_echo(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    secret = elicitation(
        rig.clock, "sec_2", answer_mode=AnswerMode.SECRET, options=(), title="No sink"
    )
    key = await intake_elicitation(rig, secret)

    response = await post_answer(client, key, secret="1", text=CANARY)

    assert response.status_code == 422
    assert "This question takes no secret answers." in response.text
    assert CANARY not in response.text


async def test_unknown_elicitation_and_wrong_content_type(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "options")

    unknown = await post_answer(client, "superpipeline:nope", option="deny")
    as_json = await client.post(
        "/inbox/answer",
        json={"key": key, "option": "deny"},
        headers={"Accept": "application/json"},
    )
    by_source_id = await client.get("/", params={"key": "eli_1a2b3c4d5e6f7081"})
    missing = await client.get("/", params={"key": "eli_missing"})

    assert unknown.status_code == 404
    assert as_json.status_code == 415
    assert keys_in(by_source_id.text) == [key]
    assert "No such elicitation." in missing.text
    assert await rig.store.count("answer") == 0


# --------------------------------------------------------------------------- CSRF and identity


async def test_answers_need_the_csrf_token_of_the_session(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "options")
    page = await client.get("/")
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{CSRF_COOKIE}=")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/"):
        assert attribute in cookie
    good = client.cookies[CSRF_COOKIE]
    assert f'name="csrf" value="{good}"' in page.text

    async with client_for(rig) as stranger:
        no_cookie = await stranger.post("/inbox/answer", data={"csrf": good, "key": key})
    no_token = await client.post("/inbox/answer", data={"key": key, "option": "deny"})
    wrong = await client.post(
        "/inbox/answer", data={"csrf": "x" * 43, "key": key, "option": "deny"}
    )
    cross_site = await post_answer(
        client, key, option="deny", headers={"Sec-Fetch-Site": "cross-site"}
    )

    for refused in (no_cookie, no_token, wrong, cross_site):
        assert refused.status_code == 403
    assert "This form has expired: reload the page and answer again." in wrong.text
    assert "the form was sent from another site" in cross_site.text
    assert await rig.store.count("answer") == 0
    same_site = await post_answer(
        client, key, option="deny", headers={"Sec-Fetch-Site": "same-origin"}
    )
    assert same_site.status_code == 303


async def test_a_live_refresh_without_a_cookie_sets_the_one_its_forms_carry(rig: Rig) -> None:
    await intake(rig, "options")
    async with client_for(rig) as fresh:
        live = await fresh.get("/inbox/live")
        given = fresh.cookies[CSRF_COOKIE]

    assert f'name="csrf" value="{given}"' in live.text


async def test_over_https_the_cookie_is_secure_and_host_bound(
    sqlite_store: SqlStore, clock: FakeClock
) -> None:
    rig = make_rig(sqlite_store, clock, FakeSink())
    from adapters.web.routes import inbox_router

    rig.app.include_router(
        inbox_router(rig.service, sqlite_store, IdentityPolicy(), clock=clock, secure_cookies=True),
        prefix="/secure",
    )
    async with client_for(rig) as client:
        response = await client.get("/secure/")

    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"__Host-{CSRF_COOKIE}=")
    assert "Secure" in cookie


async def test_behind_a_proxy_the_user_comes_from_its_header(proxied: Rig) -> None:
    async with (
        client_for(proxied) as nobody,
        client_for(proxied, user="bob") as bob,
        client_for(proxied, user="alice") as alice,
        client_for(proxied, user="bad\x01name") as garbled,
    ):
        anonymous = await nobody.get("/")
        as_bob = await bob.get("/")
        bob_admin = await bob.get("/admin")
        alice_admin = await alice.get("/admin")
        version = await nobody.get("/inbox/version")
        bad = await garbled.get("/")

    assert anonymous.status_code == 401
    assert f"the request has no {HEADER} header" in anonymous.text
    assert version.status_code == 401
    assert version.json()["ok"] is False
    assert bad.status_code == 401
    assert as_bob.status_code == 200
    assert '<span class="me">bob</span>' in as_bob.text
    assert 'href="/admin"' not in as_bob.text
    assert bob_admin.status_code == 403
    assert alice_admin.status_code == 200
    assert '<span class="me">alice · admin</span>' in alice_admin.text


async def test_a_user_header_from_outside_the_trusted_proxies_is_refused_and_logged(
    proxied: Rig,
) -> None:
    """Whoever reaches the port directly cannot be anyone: a forged header is a 401, logged by
    peer and header name, never with the name it claimed."""
    async with (
        client_for(proxied, user="alice", address="10.0.0.7") as forged,
        client_for(proxied, address="10.0.0.7") as plain,
    ):
        with capture_logs() as events:
            page = await forged.get("/")
            admin = await forged.get("/admin")
            anonymous = await plain.get("/")

    assert (page.status_code, admin.status_code, anonymous.status_code) == (401, 401, 401)
    assert "alice" not in page.text
    untrusted = [e for e in events if e["event"] == "web.user_header_untrusted"]
    assert [(e["peer"], e["header"]) for e in untrusted] == [("10.0.0.7", HEADER)] * 2
    assert "alice" not in repr(events)


async def test_an_ipv4_mapped_proxy_address_is_the_same_proxy(
    sqlite_store: SqlStore, clock: FakeClock, sink: FakeSink
) -> None:
    policy = IdentityPolicy.from_config(
        listen_host="0.0.0.0", user_header=HEADER, admins=["alice"], trusts=PROXY.trusts
    )
    rig = make_rig(sqlite_store, clock, sink, identity=policy)
    async with client_for(rig, user="alice", address="::ffff:127.0.0.1") as mapped:
        response = await mapped.get("/admin")

    assert response.status_code == 200


async def test_the_embedded_default_answers_this_machine_only(rig: Rig) -> None:
    key = await intake(rig, "options")
    async with client_for(rig, address="10.0.0.7") as remote:
        page = await remote.get("/")
        post = await remote.post("/inbox/answer", data={"key": key, "option": "deny"})

    assert page.status_code == 403
    assert post.status_code == 403
    assert "this machine only" in page.text


async def test_an_exposed_server_without_a_proxy_header_serves_nobody(
    sqlite_store: SqlStore, clock: FakeClock
) -> None:
    policy = IdentityPolicy.from_config(listen_host="0.0.0.0", user_header=None)
    rig = make_rig(sqlite_store, clock, FakeSink(), identity=policy)
    async with client_for(rig) as client:
        response = await client.get("/")

    assert response.status_code == 403
    assert "[web] user_header" in response.text
    assert policy.admin_keys() == frozenset()


def test_identity_policy_admin_keys() -> None:
    local = IdentityPolicy.from_config(listen_host="127.0.0.1", user_header=None)
    proxied = IdentityPolicy.from_config(
        listen_host="0.0.0.0", user_header=" X-Forwarded-User ", admins=["alice"]
    )

    assert local.local
    assert local.admin_keys() == frozenset({"web:local"})
    assert proxied.user_header == "X-Forwarded-User"
    assert not proxied.local
    assert proxied.admin_keys() == frozenset({"web:alice"})


# --------------------------------------------------------------------------- admin view


async def test_admin_view_shows_routes_deliveries_deadlines_and_outbox(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "approval-request")
    await rig.service.subscribe("acme", "brd_1", "slack:C0CHAT", by="slack:U0ADMIN")
    before = (await client.get("/admin")).text
    await drain(rig)

    admin = (await client.get("/admin")).text
    detail = (await client.get("/admin/elicitation", params={"key": key})).text

    assert "everything -&gt; slack:C0APPROVALS, web (config)" in admin
    assert "workspace=acme board=brd_1 -&gt; slack:C0CHAT (chat)" in admin
    assert '<span class="delivery planned">slack:C0APPROVALS: planned</span>' in before
    assert '<span class="delivery posted">slack:C0APPROVALS: posted</span>' in admin
    assert '<span class="delivery posted">web: posted</span>' in admin
    assert "<td>remind</td><td>2026-11-10 10:30 UTC</td><td>pending</td>" in detail
    assert '<tr class="outbox-row done"><td>post</td><td>slack:C0APPROVALS</td>' in detail
    assert '<tr class="audit-row intake">' in detail
    assert "1700000000.000001" in detail  # the Slack message ref
    missing = await client.get("/admin/elicitation", params={"key": "nope"})
    assert missing.status_code == 404


async def test_only_admins_see_the_admin_view(proxied: Rig) -> None:
    async with client_for(proxied, user="bob") as bob:
        for path in ("/admin", "/admin/elicitation?key=x", "/admin/audit.jsonl"):
            response = await bob.get(path)
            assert response.status_code == 403, path
            assert "Only a workspace admin" in response.text


async def test_the_audit_log_exports_as_json_lines(rig: Rig, client: httpx.AsyncClient) -> None:
    key = await intake(rig, "options")
    other = await intake(rig, "free-text", workspace="beta")
    await post_answer(client, key, option="nope")
    await post_answer(client, key, option="deny")

    everything = await client.get("/admin/audit.jsonl")
    one = await client.get("/admin/audit.jsonl", params={"key": key})
    beta = await client.get("/admin/audit.jsonl", params={"workspace": "beta"})

    assert everything.headers["content-type"].startswith("application/jsonl")
    assert "attachment" in everything.headers["content-disposition"]
    lines = [json.loads(line) for line in everything.text.splitlines()]
    assert {line["elicitation"] for line in lines} == {key, other}
    mine = [json.loads(line) for line in one.text.splitlines()]
    assert [(m["action"], m["actor"], m["code"]) for m in mine] == [
        ("intake", None, None),
        ("refusal", "web:local", "not_offered"),
        ("answer", "web:local", None),
    ]
    assert mine[0]["at"] == "2026-11-10T09:30:00+00:00"
    assert mine[1]["detail"]["message"] == "That option is not offered on this question."
    assert [json.loads(line)["elicitation"] for line in beta.text.splitlines()] == [other]


# --------------------------------------------------------------------------- live updates


async def test_an_answer_given_elsewhere_changes_the_version_and_the_live_part(
    rig: Rig, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "VERSION_CACHE_SECONDS", 0.0)
    key = await intake(rig, "options")
    page = (await client.get("/")).text
    first = (await client.get("/inbox/version")).json()["version"]
    assert f'data-version="{first}"' in page
    assert (await client.get("/inbox/version")).json()["version"] == first

    await answer_in_slack(rig, key, "deny")
    second = (await client.get("/inbox/version")).json()["version"]
    live = await client.get("/inbox/live")

    assert second != first
    assert live.headers["x-inbox-version"] == second
    assert keys_in(section(live.text, "pending")) == []
    assert "Alice" in card(section(live.text, "history"), key)
    assert "<html" not in live.text

    rig.clock.advance(1)
    await intake(rig, "free-text")
    assert (await client.get("/inbox/version")).json()["version"] != second


async def test_the_version_is_computed_once_for_many_pages(
    rig: Rig, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await intake(rig, "options")
    monkeypatch.setattr(reads, "VERSION_CACHE_SECONDS", timedelta(hours=1).total_seconds())
    calls = 0
    real = rig.store.list_elicitations

    async def counting(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await real(**kwargs)

    monkeypatch.setattr(rig.store, "list_elicitations", counting)
    together = await asyncio.gather(*(client.get("/inbox/version") for _ in range(10)))
    versions = {r.json()["version"] for r in together}
    versions |= {(await client.get("/inbox/version")).json()["version"] for _ in range(5)}

    assert len(versions) == 1
    assert calls <= 1


def _subject() -> dict[str, Any]:
    from tests.unit.sources.superpipeline_fixtures import VALID

    subject: dict[str, Any] = VALID["approval-request"]["approvalSubject"]
    return subject


async def test_im_on_it_from_the_page_claims_the_question_and_the_card_shows_it(
    rig: Rig, client: httpx.AsyncClient
) -> None:
    key = await intake(rig, "options")
    await drain(rig)
    page = (await client.get("/")).text
    assert 'name="claim" value="1"' in card(page, key)

    response = await post_answer(client, key, as_json=True, claim="1")

    assert response.status_code == 200, response.text
    assert response.json()["message"].startswith("You're on it until")
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING
    assert stored.claim is not None
    assert stored.claim.by == "web:local"
    assert "is on it" in card((await client.get("/")).text, key)


async def test_a_trusted_proxy_forwarding_someone_is_not_the_person_at_the_machine(
    sqlite_store: SqlStore, clock: FakeClock, sink: FakeSink
) -> None:
    """Local mode behind a proxy on this machine: X-Forwarded-For from the trusted proxy means
    somebody else is asking, so no local admin; from an untrusted peer the header means nothing
    (the person at the machine sending it stays the local admin)."""
    trusting = IdentityPolicy.from_config(
        listen_host="127.0.0.1", user_header=None, trusts=PROXY.trusts
    )
    rig = make_rig(sqlite_store, clock, sink, identity=trusting)
    async with client_for(rig) as via_proxy:
        forwarded = await via_proxy.get("/", headers={"X-Forwarded-For": "203.0.113.9"})
        direct = await via_proxy.get("/")
    assert forwarded.status_code == 403
    assert "user_header" in forwarded.text
    assert direct.status_code == 200

    plain = make_rig(sqlite_store, clock, sink)  # trusts nobody: the header is not believed
    async with client_for(plain) as local:
        page = await local.get("/", headers={"X-Forwarded-For": "203.0.113.9"})
    assert page.status_code == 200


async def test_an_impossible_key_is_refused_naming_it_never_a_5xx(
    client: httpx.AsyncClient, rig: Rig
) -> None:
    """A NUL or an over-long key in the page or the answer form: a clear refusal, no store asked
    (PostgreSQL refuses a NUL in text outright)."""
    page = await client.get("/", params={"key": "eli\x00x"})
    post = await client.post(
        "/inbox/answer",
        data={"key": "x" * 1000, "option": "deny", "csrf": await token(client)},
    )
    assert page.status_code < 500
    assert post.status_code == 400
    assert "key" in post.text

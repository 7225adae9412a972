"""The real SlackChat and slack_sdk's AsyncWebClient against the fake Slack Web API.

What is asserted is what the fake recorded (method, parameters, headers) and stored (messages with
their metadata), never only a return value: a post whose connection dropped after Slack took it
is not posted twice (an uncertain post adopts the message an earlier attempt left), a 429's
``Retry-After`` is kept, and Block Kit's limits are checked by the fake on every post and update.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.api.lookup import LOOKUP_MARGIN, slack_ts
from adapters.slack.chat import SlackChat
from adapters.slack.render import EVENT_TYPE, NOTICE_EVENT_TYPE, notice_metadata
from adapters.sources.superpipeline.parse import parse_body
from bot.app.config import AppConfig, parse_config
from bot.app.wiring import Elicitbot
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import ConfigError, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import (
    Answer,
    Attempt,
    Destination,
    Elicitation,
    ElicitationKey,
    Identity,
    IdentityKey,
    People,
    Route,
    Status,
)
from bot.domain.ports import Notice, PromptView
from bot.domain.records import EffectView, NoticeKind
from bot.domain.refs import MatrixRef, SlackRef
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.slack_fake import BOT_USER, FakeSlack, SlackCall
from tests.unit.domain.builders import NOW, answer, sp_approval, sp_options
from tests.unit.sources.superpipeline_fixtures import VALID

LINK = "http://127.0.0.1:8787/#superpipeline:eli_1a2b3c4d5e6f7081"
KEY = "elicitbot-17"


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as slack:
        yield slack


def make_client(fake: FakeSlack, token: str | None = None, **kwargs: Any) -> AsyncWebClient:
    kwargs.setdefault("retry_handlers", [])
    return AsyncWebClient(token=token or fake.token, base_url=fake.api_url, **kwargs)


@pytest.fixture
def chat(fake: FakeSlack) -> SlackChat:
    return SlackChat(make_client(fake))


def view(
    e: Elicitation | None = None, status: Status = Status.PENDING, answer: Answer | None = None
) -> PromptView:
    return PromptView(
        elicitation=e or sp_options(), status=status, answer=answer, version=1, link=LINK, now=NOW
    )


def has_actions(message: dict[str, Any]) -> bool:
    return any(b["type"] == "actions" for b in message["blocks"])


# --------------------------------------------------------------------------- the three methods


async def test_verify_runs_auth_test_and_returns_the_bot_user(
    fake: FakeSlack, chat: SlackChat
) -> None:
    assert await chat.verify() == BOT_USER
    assert chat.bot_user_id == BOT_USER
    [call] = fake.calls()
    assert call.method == "auth.test"
    assert call.headers["authorization"] == f"Bearer {fake.token}"


async def test_a_refused_token_is_a_permanent_error(fake: FakeSlack) -> None:
    chat = SlackChat(make_client(fake, token="xoxb-wrong"))

    with pytest.raises(PermanentDeliveryError, match="invalid_auth"):
        await chat.verify()

    assert "xoxb-wrong" not in str(fake.calls()[0].response)


async def test_post_sends_blocks_fallback_text_and_metadata(
    fake: FakeSlack, chat: SlackChat
) -> None:
    ref = await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)

    [call] = fake.calls()
    assert call.method == "chat.postMessage"
    assert call.ok
    assert call.headers["authorization"] == f"Bearer {fake.token}"
    assert call.params["channel"] == "C1"
    assert call.params["unfurl_links"] is False
    assert call.params["text"] == "Research this: May I run the migration?"
    assert call.params["metadata"] == {
        "event_type": EVENT_TYPE,
        "event_payload": {"elicitation": "superpipeline:eli_1a2b3c4d5e6f7081", "post": KEY},
    }
    [message] = fake.messages("C1")
    assert ref.to_json() == {"channel": "C1", "ts": message["ts"], "key": f"C1/{message['ts']}"}
    assert message["metadata"] == call.params["metadata"]
    assert has_actions(message)
    values = [
        json.loads(el["value"])
        for b in message["blocks"]
        if b["type"] == "actions" and b["block_id"] != "elicitbot.claim"
        for el in b["elements"]
    ]
    assert [v["o"] for v in values] == ["allow_once", "allow_always", "deny"]


async def test_each_post_gets_its_own_increasing_ts(fake: FakeSlack, chat: SlackChat) -> None:
    refs = [
        await chat.post(Destination("slack:C1"), view(), idempotency_key=f"k{i}", uncertain=None)
        for i in range(3)
    ]

    assert [r.ts for r in refs] == sorted({r.ts for r in refs})


async def test_update_rewrites_the_message_to_the_result_without_buttons(
    fake: FakeSlack, chat: SlackChat
) -> None:
    e = sp_approval()
    ref = await chat.post(Destination("slack:C1"), view(e), idempotency_key=KEY, uncertain=None)
    result = answer(option_ids=("allow_once",))

    await chat.update(
        Destination("slack:C1"),
        ref,
        view(e, Status.ANSWERED, answer=result),
        idempotency_key="elicitbot-18",
    )

    call = fake.calls_to("chat.update")[0]
    assert (call.params["channel"], call.params["ts"]) == (ref.channel, ref.ts)
    message = fake.message("C1", ref.ts)
    assert message is not None
    assert not has_actions(message)
    assert message["blocks"][-1]["text"]["text"] == (
        "✅ Answered by <@U0ALICE> — Allow once — 2026-11-10 09:31 UTC via Slack"
    )
    assert message["text"].startswith("Developer Experience: ✅ Answered by")
    assert message["metadata"]["event_payload"]["post"] == KEY, "metadata survives the update"


async def test_notify_posts_an_ephemeral_in_the_thread(fake: FakeSlack, chat: SlackChat) -> None:
    notice = Notice(
        user=IdentityKey("slack:U0BOB"),
        text="Only a workspace admin can choose “<!channel> Always”.",
        thread=SlackRef("C1", "1700000000.000042"),
    )

    await chat.notify(Destination("slack:C1"), notice, idempotency_key="elicitbot-19")

    [call] = fake.calls()
    assert call.method == "chat.postEphemeral"
    assert call.ok
    assert call.params["channel"] == "C1"
    assert call.params["user"] == "U0BOB"
    assert call.params["thread_ts"] == "1700000000.000042"
    assert call.params["text"] == "Only a workspace admin can choose “&lt;!channel&gt; Always”."


async def test_notify_without_a_thread_has_no_thread_ts(fake: FakeSlack, chat: SlackChat) -> None:
    await chat.notify(
        Destination("slack:C1"),
        Notice(user=IdentityKey("slack:U0BOB"), text="hi"),
        idempotency_key="k",
    )

    [call] = fake.calls()
    assert "thread_ts" not in call.params


async def test_a_reminder_is_a_public_thread_reply_that_pings_the_routes_people(
    fake: FakeSlack, chat: SlackChat
) -> None:
    notice = Notice(
        user=IdentityKey(""),
        text="Still waiting: <!here> May I run the migration?",
        thread=SlackRef("C1", "1700000000.000042"),
        kind=NoticeKind.REMINDER,
        mentions=(IdentityKey("slack:U0ALICE"), IdentityKey("matrix:@alice:example.org")),
    )

    await chat.notify(Destination("slack:C1"), notice, idempotency_key="elicitbot-20")

    [call] = fake.calls()
    assert call.method == "chat.postMessage"
    assert call.params["thread_ts"] == "1700000000.000042"
    assert call.params["text"] == (
        "Still waiting: &lt;!here&gt; May I run the migration? <@U0ALICE>"
    )


async def test_a_user_destination_is_a_dm_opened_once(fake: FakeSlack, chat: SlackChat) -> None:
    first = await chat.post(
        Destination("slack:U0ALICE"), view(), idempotency_key="k1", uncertain=None
    )
    second = await chat.post(
        Destination("slack:U0ALICE"), view(), idempotency_key="k2", uncertain=None
    )

    assert [c.method for c in fake.calls()] == [
        "conversations.open",
        "chat.postMessage",
        "chat.postMessage",
    ]
    assert fake.calls()[0].params["users"] == "U0ALICE"
    assert first.channel == second.channel == "DU0ALICE"
    assert len(fake.messages("DU0ALICE")) == 2


async def test_an_oversize_question_is_accepted_by_the_block_kit_checks(
    fake: FakeSlack, chat: SlackChat
) -> None:
    from tests.unit.slack.test_render import oversize

    e = oversize()
    ref = await chat.post(Destination("slack:C1"), view(e), idempotency_key=KEY, uncertain=None)
    result = answer(option_ids=tuple(o.id for o in e.options[:2]), text="✍️" * 40_000)
    await chat.update(
        Destination("slack:C1"), ref, view(e, Status.ANSWERED, answer=result), idempotency_key="u"
    )

    assert [(c.method, c.ok) for c in fake.calls()] == [
        ("chat.postMessage", True),
        ("chat.update", True),
    ]


# --------------------------------------------------------------------------- errors


async def test_429_is_transient_with_the_retry_after_and_no_sdk_retry(
    fake: FakeSlack, chat: SlackChat
) -> None:
    fake.script("chat.postMessage", status=429, retry_after=7)

    with pytest.raises(TransientDeliveryError, match="ratelimited") as caught:
        await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)

    assert caught.value.retry_after == 7.0
    assert [(c.method, c.status) for c in fake.calls()] == [("chat.postMessage", 429)]
    assert fake.messages("C1") == []


async def test_channel_not_found_is_permanent(fake: FakeSlack, chat: SlackChat) -> None:
    fake.unknown_channels.add("C404")

    with pytest.raises(PermanentDeliveryError, match="channel_not_found"):
        await chat.post(Destination("slack:C404"), view(), idempotency_key=KEY, uncertain=None)


async def test_updating_a_message_slack_does_not_have_is_permanent(chat: SlackChat) -> None:
    with pytest.raises(PermanentDeliveryError, match="message_not_found"):
        await chat.update(
            Destination("slack:C1"), SlackRef("C1", "1.000001"), view(), idempotency_key=KEY
        )


async def test_updating_another_platforms_message_is_permanent(
    fake: FakeSlack, chat: SlackChat
) -> None:
    with pytest.raises(PermanentDeliveryError, match="not a Slack message ref"):
        await chat.update(
            Destination("slack:C1"), MatrixRef("!r:x", "$e"), view(), idempotency_key=KEY
        )

    assert fake.calls() == []


@pytest.mark.parametrize(
    ("status", "error", "expected"),
    [
        (500, "internal_error", TransientDeliveryError),
        (200, "internal_error", TransientDeliveryError),
        (200, "service_unavailable", TransientDeliveryError),
        (200, "something_new", TransientDeliveryError),
        (200, "ratelimited", TransientDeliveryError),
        (200, "is_archived", PermanentDeliveryError),
        (200, "not_in_channel", PermanentDeliveryError),
        (200, "token_revoked", PermanentDeliveryError),
        (200, "invalid_blocks", PermanentDeliveryError),
        (200, "msg_too_long", PermanentDeliveryError),
    ],
)
async def test_slack_errors_map_to_transient_or_permanent(
    fake: FakeSlack, chat: SlackChat, status: int, error: str, expected: type[Exception]
) -> None:
    fake.script("chat.postMessage", status=status, error=error)

    with pytest.raises(expected, match=error):
        await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)


async def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    chat = SlackChat(
        AsyncWebClient(token="xoxb-x", base_url=f"http://127.0.0.1:{port}/api/", retry_handlers=[])
    )

    with pytest.raises(TransientDeliveryError):
        await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)


# --------------------------------------------------------------------------- uncertain posts


def began() -> datetime:
    """When a first attempt begins: the outbox's ``first_attempt_at``, to the microsecond."""
    return datetime.now(UTC)


def chatter(fake: FakeSlack, channel: str, n: int, *, thread_ts: str | None = None) -> None:
    """``n`` messages of other people (and other bots' metadata), after whatever is there."""
    for i in range(n):
        meta = {"event_type": "someone_elses", "event_payload": {"post": KEY}} if i % 7 else None
        fake.add_message(channel, f"chatter {i}", thread_ts=thread_ts, metadata=meta)


async def test_an_uncertain_post_after_a_dropped_connection_adopts_the_message(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """Slack took the post, the connection dropped before the answer. The retry (the
    outbox's, flagged uncertain) finds the message by its metadata instead of posting again."""
    fake.script("chat.postMessage", drop=True)
    first = began()

    with pytest.raises(TransientDeliveryError):
        await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)
    [orphan] = fake.messages("C1")

    ref = await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=first)

    assert ref.to_json() == {"channel": "C1", "ts": orphan["ts"], "key": f"C1/{orphan['ts']}"}
    assert len(fake.calls_to("chat.postMessage")) == 1
    assert len(fake.messages("C1")) == 1
    [history] = fake.calls_to("conversations.history")
    assert history.params["channel"] == "C1"
    assert history.params["include_all_metadata"] in ("1", "true", True)
    assert history.params["oldest"] == slack_ts(first - LOOKUP_MARGIN)
    assert [c.method for c in fake.calls()][-1] == "chat.update", "brought to the current view"


async def test_an_uncertain_post_finds_its_message_far_below_the_newest_page() -> None:
    """The original has 260 messages after it (off the first page of 200, and far off the old
    newest-100 lookup) and an hour of older history below it: the lookup pages from the first
    attempt on, finds it on page two, adopts it, and never reads what came before."""
    hour_ago = [time.time() - 3600]
    with FakeSlack(clock=lambda: hour_ago[0] or time.time()) as fake:
        chatter(fake, "C1", 450)  # an hour ago: below ``oldest``
        hour_ago[0] = 0.0
        chat = SlackChat(make_client(fake))
        fake.script("chat.postMessage", drop=True)
        first = began()
        with pytest.raises(TransientDeliveryError):
            await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None)
        orphan = fake.messages("C1")[-1]
        chatter(fake, "C1", 260)

        ref = await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=first)

        assert ref == SlackRef("C1", orphan["ts"])
        assert len(fake.calls_to("chat.postMessage")) == 1, "adopted, not posted again"
        assert len(fake.messages("C1")) == 450 + 1 + 260
        pages = fake.calls_to("conversations.history")
        assert len(pages) == 2, "from the first attempt on: the older 450 are never read"
        oldest = slack_ts(first - LOOKUP_MARGIN)
        assert [(p.params["oldest"], p.params["limit"]) for p in pages] == [(oldest, "200")] * 2
        assert "cursor" not in pages[0].params
        first_page, second_page = (p.response for p in pages)
        assert first_page is not None
        assert second_page is not None
        assert pages[1].params["cursor"] == first_page["response_metadata"]["next_cursor"]
        assert orphan["ts"] in [m["ts"] for m in second_page["messages"]]
        assert fake.calls()[-1].method == "chat.update"


async def test_an_uncertain_post_that_never_arrived_is_posted_once(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """Nothing of ours since the first attempt in a channel of 420 other messages (one with
    our metadata but another key): every page is read to the end, then one post."""
    first = began()
    await chat.post(Destination("slack:C1"), view(), idempotency_key="someone-else", uncertain=None)
    chatter(fake, "C1", 420)

    ref = await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=first)

    assert [c.method for c in fake.calls()] == [
        "chat.postMessage",
        "conversations.history",
        "conversations.history",
        "conversations.history",
        "chat.postMessage",
    ]
    *_, last_page, _ = fake.calls()
    assert last_page.response is not None
    assert last_page.response["has_more"] is False
    assert ref.ts == fake.messages("C1")[-1]["ts"]
    assert fake.messages("C1")[-1]["metadata"]["event_payload"]["post"] == KEY


async def test_a_lookup_that_cannot_read_the_history_posts(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """No history scope: a possible duplicate rather than a certain loss."""
    fake.script("conversations.history", error="missing_scope")

    await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=began())

    assert [(c.method, c.ok) for c in fake.calls()] == [
        ("conversations.history", False),
        ("chat.postMessage", True),
    ]


async def test_a_lookup_that_fails_for_a_while_is_transient_and_posts_nothing(
    fake: FakeSlack, chat: SlackChat
) -> None:
    fake.script("conversations.history", status=500)

    with pytest.raises(TransientDeliveryError):
        await chat.post(Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=began())

    assert fake.calls_to("chat.postMessage") == []


# --------------------------------------------------------------------------- uncertain notices


def reminder(thread_ts: str) -> Notice:
    return Notice(
        user=IdentityKey(""),
        text="Still waiting: May I run the migration?",
        thread=SlackRef("C1", thread_ts),
        kind=NoticeKind.REMINDER,
        mentions=(IdentityKey("slack:U0ALICE"),),
    )


async def test_a_reminder_carries_its_key_and_an_uncertain_one_is_found_in_a_long_thread(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """A busy thread (250 replies within the lookup's margin), then the reminder went out but
    its answer was lost: the retry finds it in the thread (conversations.replies, oldest first,
    on page two) and does not ping Alice again."""
    copy = await chat.post(
        Destination("slack:C1"), view(), idempotency_key="post-1", uncertain=None
    )
    chatter(fake, "C1", 250, thread_ts=copy.ts)
    fake.script("chat.postMessage", drop=True)
    first = began()
    with pytest.raises(TransientDeliveryError):
        await chat.notify(Destination("slack:C1"), reminder(copy.ts), idempotency_key="remind-1")
    sent = fake.messages("C1")[-1]
    assert (sent["thread_ts"], sent["metadata"]) == (copy.ts, notice_metadata("remind-1"))
    assert sent["metadata"]["event_type"] == NOTICE_EVENT_TYPE
    chatter(fake, "C1", 10, thread_ts=copy.ts)

    await chat.notify(
        Destination("slack:C1"), reminder(copy.ts), idempotency_key="remind-1", uncertain=first
    )

    assert len(fake.calls_to("chat.postMessage")) == 2, "the copy and the one reminder"
    pages = fake.calls_to("conversations.replies")
    assert len(pages) == 2
    assert {(p.params["ts"], p.params["oldest"]) for p in pages} == {
        (copy.ts, slack_ts(first - LOOKUP_MARGIN))
    }
    assert pages[0].params["include_all_metadata"] in ("1", "true", True)
    assert pages[0].response is not None
    assert pages[1].params["cursor"] == pages[0].response["response_metadata"]["next_cursor"]
    assert fake.calls_to("conversations.history") == [], "a reply is looked for in its thread"


async def test_an_uncertain_reminder_that_never_arrived_is_posted_once(
    fake: FakeSlack, chat: SlackChat
) -> None:
    copy = await chat.post(
        Destination("slack:C1"), view(), idempotency_key="post-1", uncertain=None
    )
    chatter(fake, "C1", 5, thread_ts=copy.ts)

    await chat.notify(
        Destination("slack:C1"), reminder(copy.ts), idempotency_key="remind-1", uncertain=began()
    )

    assert [c.method for c in fake.calls()] == [
        "chat.postMessage",
        "conversations.replies",
        "chat.postMessage",
    ]
    reply = fake.messages("C1")[-1]
    assert (reply["thread_ts"], reply["metadata"]) == (copy.ts, notice_metadata("remind-1"))


async def test_an_uncertain_reminder_under_a_message_slack_lost_is_posted(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """``thread_not_found``: nothing to find there, so the reply goes out (Slack decides)."""
    await chat.notify(
        Destination("slack:C1"),
        reminder("1700000000.000042"),
        idempotency_key="r",
        uncertain=began(),
    )

    assert [(c.method, c.ok) for c in fake.calls()] == [
        ("conversations.replies", False),
        ("chat.postMessage", True),
    ]


async def test_an_uncertain_ephemeral_is_sent_again_without_a_lookup(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """Slack keeps no ephemeral to look up: a repeat is the documented cost (one person)."""
    notice = Notice(
        user=IdentityKey("slack:U0BOB"), text="Only admins.", thread=SlackRef("C1", "1.000001")
    )

    await chat.notify(Destination("slack:C1"), notice, idempotency_key="n", uncertain=began())

    assert [c.method for c in fake.calls()] == ["chat.postEphemeral"]


# --------------------------------------------------------------------------- the fake's timeline


async def test_the_fakes_history_pages_like_slack(fake: FakeSlack) -> None:
    """What the lookups rely on, so the fake cannot drift: newest first, top level only,
    ``oldest``/``latest`` exclusive unless ``inclusive``, ``limit``, cursors, ``has_more``,
    metadata only on request."""
    client = make_client(fake)
    ts = [
        fake.add_message("C9", f"m{i}", metadata={"event_type": "x", "event_payload": {}})
        for i in range(7)
    ]
    fake.add_message("C9", "a reply", thread_ts=ts[0])

    whole = await client.conversations_history(channel="C9")
    assert [m["ts"] for m in whole["messages"]] == ts[::-1], "newest first, no thread replies"
    assert whole["has_more"] is False
    assert "metadata" not in whole["messages"][0]

    seen: list[str] = []
    cursor = None
    while True:
        page = await client.conversations_history(
            channel="C9",
            oldest=ts[1],
            latest=ts[6],
            limit=2,
            cursor=cursor,
            include_all_metadata=True,
        )
        seen += [m["ts"] for m in page["messages"]]
        assert all("metadata" in m for m in page["messages"])
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        assert page["has_more"] is bool(cursor)
        if not cursor:
            break
    assert seen == ts[5:1:-1], "bounds excluded"

    both = await client.conversations_history(
        channel="C9", oldest=ts[1], latest=ts[6], inclusive=True, limit=999
    )
    assert [m["ts"] for m in both["messages"]] == ts[6:0:-1]
    thread = await client.conversations_replies(channel="C9", ts=ts[0])
    assert [m["text"] for m in thread["messages"]] == ["m0", "a reply"], "parent, then replies"
    with pytest.raises(SlackApiError, match="invalid_cursor"):
        await client.conversations_history(channel="C9", cursor="not-a-cursor")


async def test_the_sdk_default_connection_retry_would_post_twice(fake: FakeSlack) -> None:
    """Why the client has ``retry_handlers=[]``: slack_sdk's connection-error retry resends a
    post Slack already took (the double-post experiment, reproduced)."""
    default = AsyncWebClient(token=fake.token, base_url=fake.api_url)
    fake.script("chat.postMessage", drop=True)

    await SlackChat(default).post(
        Destination("slack:C1"), view(), idempotency_key=KEY, uncertain=None
    )

    assert len(fake.calls_to("chat.postMessage")) == 2
    assert len(fake.messages("C1")) == 2


# --------------------------------------------------------------------------- through the outbox


C1 = "slack:C1"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


class Rig:
    def __init__(self, store: SqlStore, clock: FakeClock, fake: FakeSlack) -> None:
        self.store = store
        self.clock = clock
        self.fake = fake
        self.dispatcher = Dispatcher(
            store,
            clock,
            {"slack": SlackChat(make_client(fake))},
            {},
            lambda key: f"http://127.0.0.1:8787/#{key}",
        )
        self.service = Service(
            store,
            clock,
            People(),
            [Route(destinations=(C1,))],
            on_change=self.dispatcher.wake,
        )

    async def intake(self, case: str = "options") -> ElicitationKey:
        e = parse_body(copy.deepcopy(VALID[case]), workspace="acme")
        [outcome] = await self.service.intake([Inbound("ce:/superpipeline/test", "ce-1", e, {})])
        assert outcome.result == "accepted"
        return outcome.key

    async def post_rows(self, key: ElicitationKey) -> list[EffectView]:
        return [r for r in await self.store.outbox(key) if r.kind == "post"]


@pytest.fixture
async def rig(sqlite_url: str, clock: FakeClock, fake: FakeSlack) -> AsyncIterator[Rig]:
    store = SqlStore.from_url(sqlite_url)
    try:
        yield Rig(store, clock, fake)
    finally:
        await store.close()


def posts_by_elicitation(calls: list[SlackCall]) -> dict[str, int]:
    """chat.postMessage calls Slack carried out (answered ok, or dropped after storing)."""
    counts: dict[str, int] = {}
    for call in calls:
        if call.method == "chat.postMessage" and (call.ok or call.response is None):
            key = call.params["metadata"]["event_payload"]["elicitation"]
            counts[key] = counts.get(key, 0) + 1
    return counts


async def test_the_dispatcher_posts_then_updates_after_the_answer(rig: Rig) -> None:
    key = await rig.intake()

    assert await rig.dispatcher.run_once() == 1

    [message] = rig.fake.messages("C1")
    assert message["metadata"]["event_payload"]["elicitation"] == key
    [delivery] = await rig.store.deliveries(key)
    assert delivery.state == "posted"
    assert delivery.ref is not None
    assert delivery.ref.to_json() == {
        "channel": "C1",
        "ts": message["ts"],
        "key": f"C1/{message['ts']}",
    }
    assert has_actions(message)

    rig.clock.advance(60)
    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("deny",), via=C1)
    )
    assert outcome.won
    assert await rig.dispatcher.run_once() == 1  # the write-back goes first
    assert rig.fake.calls_to("chat.update") == []
    assert await rig.dispatcher.run_once() == 1  # then the copy, once the answer was accepted

    [update] = rig.fake.calls_to("chat.update")
    assert (update.params["channel"], update.params["ts"]) == ("C1", message["ts"])
    updated = rig.fake.message("C1", message["ts"])
    assert updated is not None
    assert not has_actions(updated)
    assert updated["blocks"][-1]["text"]["text"] == (
        "✅ Answered by Alice — Deny — 2026-11-10 09:31 UTC via Slack"  # her name is known
    )
    assert posts_by_elicitation(rig.fake.calls()) == {key: 1}
    rig.clock.advance(3600)
    assert await rig.dispatcher.run_once() == 0


async def test_a_dropped_post_is_retried_as_uncertain_and_posted_once(rig: Rig) -> None:
    key = await rig.intake()
    rig.fake.script("chat.postMessage", drop=True)

    assert await rig.dispatcher.run_once() == 1
    [row] = await rig.post_rows(key)
    assert (row.state, row.attempts) == ("pending", 1)
    assert len(rig.fake.messages("C1")) == 1, "Slack has it; we do not know"

    rig.clock.advance(5)
    assert await rig.dispatcher.run_once() == 1

    [row] = await rig.post_rows(key)
    assert (row.state, row.attempts) == ("done", 2)
    [message] = rig.fake.messages("C1")
    [delivery] = await rig.store.deliveries(key)
    assert delivery.ref is not None
    assert delivery.ref.to_json() == {
        "channel": "C1",
        "ts": message["ts"],
        "key": f"C1/{message['ts']}",
    }
    assert posts_by_elicitation(rig.fake.calls()) == {key: 1}
    assert len(rig.fake.calls_to("conversations.history")) == 1


async def test_a_429_delays_the_retry_by_retry_after(rig: Rig) -> None:
    key = await rig.intake()
    rig.fake.script("chat.postMessage", status=429, retry_after=30)
    start = rig.clock.now()

    assert await rig.dispatcher.run_once() == 1

    [row] = await rig.post_rows(key)
    assert row.state == "pending"
    assert row.last_error is not None
    assert "ratelimited" in row.last_error
    assert start + timedelta(seconds=30) <= row.next_attempt_at < start + timedelta(seconds=31)
    rig.clock.advance(29)
    assert await rig.dispatcher.run_once() == 0
    rig.clock.advance(2)
    assert await rig.dispatcher.run_once() == 1
    assert [c.status for c in rig.fake.calls_to("chat.postMessage")] == [429, 200]
    assert posts_by_elicitation(rig.fake.calls()) == {key: 1}


# --------------------------------------------------------------------------- wiring


def slack_config(tmp_path: Path, fake: FakeSlack) -> AppConfig:
    return parse_config(
        {
            "server": {"listen": "127.0.0.1:8787"},
            "store": {"url": f"sqlite:///{tmp_path / 'elicitbot.db'}"},
            "slack": {"api_url": fake.api_url},
            "routes": [{"destinations": ["slack:C1"]}],
        }
    )


async def test_start_verifies_the_token_and_registers_slack(
    tmp_path: Path, fake: FakeSlack
) -> None:
    environ = {"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": "s3cret-signing"}
    bot = Elicitbot(slack_config(tmp_path, fake), environ=environ)
    assert isinstance(bot.chats["slack"], SlackChat)

    await bot.start()
    try:
        assert [c.method for c in fake.calls()] == ["auth.test"]
        assert bot.slack is not None
        assert bot.slack.bot_user_id == BOT_USER
    finally:
        await bot.stop()


async def test_start_refuses_a_token_slack_refuses(tmp_path: Path, fake: FakeSlack) -> None:
    environ = {"SLACK_BOT_TOKEN": "xoxb-revoked", "SLACK_SIGNING_SECRET": "s3cret-signing"}
    bot = Elicitbot(slack_config(tmp_path, fake), environ=environ)

    try:
        with pytest.raises(ConfigError, match=r"^slack\.bot_token_env: .*invalid_auth"):
            await bot.start()
    finally:
        await bot.http_client.aclose()
        await bot.store.close()
    assert bot._tasks == [], "nothing runs after a refused start"

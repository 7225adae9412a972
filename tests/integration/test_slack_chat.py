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
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.chat import SlackChat
from adapters.slack.render import EVENT_TYPE
from adapters.sources.superpipeline.parse import parse_body
from bot.config import AppConfig, parse_config
from bot.domain.errors import ConfigError, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Answer, Attempt, Elicitation, Identity, People, Route, Status
from bot.domain.ports import Notice, PromptView
from bot.domain.records import EffectView, NoticeKind
from bot.domain.refs import MatrixRef, SlackRef
from bot.outbox import Dispatcher
from bot.service import Inbound, Service
from bot.wiring import Elicitbot
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
    ref = await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=False)

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
        await chat.post("slack:C1", view(), idempotency_key=f"k{i}", uncertain=False)
        for i in range(3)
    ]

    assert [r.ts for r in refs] == sorted({r.ts for r in refs})


async def test_update_rewrites_the_message_to_the_result_without_buttons(
    fake: FakeSlack, chat: SlackChat
) -> None:
    e = sp_approval()
    ref = await chat.post("slack:C1", view(e), idempotency_key=KEY, uncertain=False)
    result = answer(option_ids=("allow_once",))

    await chat.update(
        "slack:C1", ref, view(e, Status.ANSWERED, answer=result), idempotency_key="elicitbot-18"
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
        user="slack:U0BOB",
        text="Only a workspace admin can choose “<!channel> Always”.",
        thread=SlackRef("C1", "1700000000.000042"),
    )

    await chat.notify("slack:C1", notice, idempotency_key="elicitbot-19")

    [call] = fake.calls()
    assert call.method == "chat.postEphemeral"
    assert call.ok
    assert call.params["channel"] == "C1"
    assert call.params["user"] == "U0BOB"
    assert call.params["thread_ts"] == "1700000000.000042"
    assert call.params["text"] == "Only a workspace admin can choose “&lt;!channel&gt; Always”."


async def test_notify_without_a_thread_has_no_thread_ts(fake: FakeSlack, chat: SlackChat) -> None:
    await chat.notify("slack:C1", Notice(user="slack:U0BOB", text="hi"), idempotency_key="k")

    [call] = fake.calls()
    assert "thread_ts" not in call.params


async def test_a_reminder_is_a_public_thread_reply_that_pings_the_routes_people(
    fake: FakeSlack, chat: SlackChat
) -> None:
    notice = Notice(
        user="",
        text="Still waiting: <!here> May I run the migration?",
        thread=SlackRef("C1", "1700000000.000042"),
        kind=NoticeKind.REMINDER,
        mentions=("slack:U0ALICE", "matrix:@alice:example.org"),
    )

    await chat.notify("slack:C1", notice, idempotency_key="elicitbot-20")

    [call] = fake.calls()
    assert call.method == "chat.postMessage"
    assert call.params["thread_ts"] == "1700000000.000042"
    assert call.params["text"] == (
        "Still waiting: &lt;!here&gt; May I run the migration? <@U0ALICE>"
    )


async def test_a_user_destination_is_a_dm_opened_once(fake: FakeSlack, chat: SlackChat) -> None:
    first = await chat.post("slack:U0ALICE", view(), idempotency_key="k1", uncertain=False)
    second = await chat.post("slack:U0ALICE", view(), idempotency_key="k2", uncertain=False)

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
    ref = await chat.post("slack:C1", view(e), idempotency_key=KEY, uncertain=False)
    result = answer(option_ids=tuple(o.id for o in e.options[:2]), text="✍️" * 40_000)
    await chat.update("slack:C1", ref, view(e, Status.ANSWERED, answer=result), idempotency_key="u")

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
        await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=False)

    assert caught.value.retry_after == 7.0
    assert [(c.method, c.status) for c in fake.calls()] == [("chat.postMessage", 429)]
    assert fake.messages("C1") == []


async def test_channel_not_found_is_permanent(fake: FakeSlack, chat: SlackChat) -> None:
    fake.unknown_channels.add("C404")

    with pytest.raises(PermanentDeliveryError, match="channel_not_found"):
        await chat.post("slack:C404", view(), idempotency_key=KEY, uncertain=False)


async def test_updating_a_message_slack_does_not_have_is_permanent(chat: SlackChat) -> None:
    with pytest.raises(PermanentDeliveryError, match="message_not_found"):
        await chat.update("slack:C1", SlackRef("C1", "1.000001"), view(), idempotency_key=KEY)


async def test_updating_another_platforms_message_is_permanent(
    fake: FakeSlack, chat: SlackChat
) -> None:
    with pytest.raises(PermanentDeliveryError, match="not a Slack message ref"):
        await chat.update("slack:C1", MatrixRef("!r:x", "$e"), view(), idempotency_key=KEY)

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
        await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=False)


async def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    chat = SlackChat(
        AsyncWebClient(token="xoxb-x", base_url=f"http://127.0.0.1:{port}/api/", retry_handlers=[])
    )

    with pytest.raises(TransientDeliveryError):
        await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=False)


# --------------------------------------------------------------------------- uncertain posts


async def test_an_uncertain_post_after_a_dropped_connection_adopts_the_message(
    fake: FakeSlack, chat: SlackChat
) -> None:
    """Slack took the post, the connection dropped before the answer. The retry (the
    outbox's, flagged uncertain) finds the message by its metadata instead of posting again."""
    fake.script("chat.postMessage", drop=True)

    with pytest.raises(TransientDeliveryError):
        await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=False)
    [orphan] = fake.messages("C1")

    ref = await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=True)

    assert ref.to_json() == {"channel": "C1", "ts": orphan["ts"], "key": f"C1/{orphan['ts']}"}
    assert len(fake.calls_to("chat.postMessage")) == 1
    assert len(fake.messages("C1")) == 1
    [history] = fake.calls_to("conversations.history")
    assert history.params["channel"] == "C1"
    assert history.params["include_all_metadata"] in ("1", "true", True)
    assert [c.method for c in fake.calls()][-1] == "chat.update", "brought to the current view"


async def test_an_uncertain_post_that_never_arrived_is_posted(
    fake: FakeSlack, chat: SlackChat
) -> None:
    await chat.post("slack:C1", view(), idempotency_key="someone-else", uncertain=False)

    ref = await chat.post("slack:C1", view(), idempotency_key=KEY, uncertain=True)

    assert [c.method for c in fake.calls()] == [
        "chat.postMessage",
        "conversations.history",
        "chat.postMessage",
    ]
    assert ref.ts == fake.messages("C1")[-1]["ts"]


async def test_the_sdk_default_connection_retry_would_post_twice(fake: FakeSlack) -> None:
    """Why the client has ``retry_handlers=[]``: slack_sdk's connection-error retry resends a
    post Slack already took (the double-post experiment, reproduced)."""
    default = AsyncWebClient(token=fake.token, base_url=fake.api_url)
    fake.script("chat.postMessage", drop=True)

    await SlackChat(default).post("slack:C1", view(), idempotency_key=KEY, uncertain=False)

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

    async def intake(self, case: str = "options") -> str:
        e = parse_body(copy.deepcopy(VALID[case]), workspace="acme")
        [outcome] = await self.service.intake([Inbound("ce:/superpipeline/test", "ce-1", e, {})])
        assert outcome.result == "accepted"
        return outcome.key

    async def post_rows(self, key: str) -> list[EffectView]:
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
    outcome = await rig.service.answer(key, Attempt(respondent=ALICE, option_ids=("deny",), via=C1))
    assert outcome.won
    assert await rig.dispatcher.run_once() >= 1

    [update] = rig.fake.calls_to("chat.update")
    assert (update.params["channel"], update.params["ts"]) == ("C1", message["ts"])
    updated = rig.fake.message("C1", message["ts"])
    assert updated is not None
    assert not has_actions(updated)
    assert updated["blocks"][-1]["text"]["text"] == (
        "✅ Answered by <@U0ALICE> — Deny — 2026-11-10 09:31 UTC via Slack"
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

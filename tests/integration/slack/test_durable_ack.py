"""Durable before ack, end to end (the rig of :mod:`tests.integration.slack.rig`, with the app
recording into its store): an interaction is in the store when Slack gets its 200, is never
acked when it could not be recorded, is handled after a kill between the ack and its handling,
is handled once however often it arrives, and never keeps a secret.

A "kill" here cancels the interaction's task mid-flight (its answer held up in ``act``) and
closes the store; the "restart" is a new rig on the same database, whose app replays what is
open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from adapters.slack.intake.routes import slack_router
from adapters.slack.intake.trims import MAX_RAW_KEY, RAW_CHANNEL, raw_key
from adapters.slack.listener import build_app
from adapters.slack.render import REPLY_ACTION
from adapters.slack.translate import RESEND_PRIVATE
from bot.app.http import Runtime, create_app
from bot.domain.actions import Action, Outcome
from bot.domain.model import AnswerMode, ElicitationKey, Status
from bot.domain.records import RawEvent
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.integration.slack.rig import (
    ALICE,
    BOB,
    C1,
    SIGNING_SECRET,
    Rig,
    action_button,
    button,
    text_value,
)
from tests.slack_fake import BOT_USER, FakeSlack
from tests.unit.domain.builders import elicitation


class DurableRig(Rig):
    """The rig with the app recording every interaction in the store before its ack."""

    async def start(self) -> None:
        await self.chat.verify()
        self.slack = build_app(
            self.chat, self.service, signing_secret=SIGNING_SECRET, raw=self.store, clock=self.clock
        )
        app = create_app(
            Runtime(
                store=self.store, elicitations=self.service, routers=[slack_router(self.slack.app)]
            )
        )
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://elicitbot.test"
        )

    async def open(self) -> list[RawEvent]:
        return await self.store.open_raw(RAW_CHANNEL)


async def durable_rig(url: str, tmp_path: Path, clock: FakeClock, fake: FakeSlack) -> DurableRig:
    rig = DurableRig(tmp_path / "elicitbot.db", SqlStore.from_url(url), clock, fake)
    await rig.start()
    return rig


@pytest.fixture
async def rig(
    tmp_path: Path, sqlite_url: str, clock: FakeClock, fake: FakeSlack
) -> AsyncIterator[DurableRig]:
    rig = await durable_rig(sqlite_url, tmp_path, clock, fake)
    try:
        yield rig
    finally:
        await rig.close()
        await rig.store.close()


class Held:
    """``act`` held up until ``release()``: the window between an ack and the answer."""

    def __init__(self, act: Callable[[Action], Awaitable[Outcome]]) -> None:
        self._act = act
        self.calls: list[Action] = []
        self.released = asyncio.Event()

    async def act(self, action: Action) -> Outcome:
        self.calls.append(action)
        await self.released.wait()
        return await self._act(action)

    def release(self) -> None:
        self.released.set()


def hold(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Held:
    held = Held(rig.service.act)
    monkeypatch.setattr(rig.service, "act", held.act)
    return held


async def posted(rig: DurableRig, *cases: str) -> list[ElicitationKey]:
    """Take these fixtures and post them (a second apart: one channel takes a post a second)."""
    keys = []
    for case in cases:
        keys.append(await rig.intake_fixture(case))
        await rig.drain()
        rig.clock.advance(2)
    return keys


async def kill(rig: DurableRig) -> None:
    """Stop mid-flight: the held interaction is cancelled, never finished, never marked."""
    await rig.slack.aclose()  # no grace: every running interaction is cancelled
    await rig.http.aclose()
    await rig.store.close()


async def restart(rig: DurableRig, url: str) -> DurableRig:
    rig.clock.advance(5)
    again = await durable_rig(url, rig.db.parent, rig.clock, rig.fake)
    await again.slack.durable.replay(before=again.slack.durable.started_at)
    await again.drain()
    return again


# ------------------------------------------------------------------------ recorded before the ack


async def test_a_click_is_in_the_store_when_its_200_comes_back(
    rig: DurableRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    held = hold(rig, monkeypatch)

    response = await rig.click(message, button(message, "deny"))
    await asyncio.sleep(0.05)  # the handler runs, and waits in act

    assert response.status_code == 200
    assert len(held.calls) == 1, "handled after the ack"
    [recorded] = await rig.open()
    assert recorded.dedupe_key.startswith("action:")
    assert recorded.body["type"] == "block_actions"
    assert recorded.body["actions"][0]["action_id"] == button(message, "deny")["action_id"]
    assert "token" not in recorded.body, "the legacy verification token is not kept"
    assert "blocks" not in recorded.body["message"], "only what the handling reads"
    assert await rig.status(key) is Status.PENDING
    assert await rig.slack.durable.replay(before=rig.clock.advance(3600)) == 0, (
        "a replay leaves alone what this process is handling"
    )

    held.release()
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED
    assert await rig.open() == [], "marked handled"
    assert len(rig.sink.delivered) == 1


async def test_nothing_is_acked_that_was_not_recorded(
    rig: DurableRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    click_key, reply_key, modal_key = await posted(
        rig, "options", "free-text", "no-options-no-question"
    )
    clicked, replied, modal_message = (rig.message(k) for k in (click_key, reply_key, modal_key))
    await rig.click(modal_message, action_button(modal_message, REPLY_ACTION))
    await rig.slack.idle()
    [modal] = rig.fake.views()
    acts: list[Action] = []
    act = rig.service.act

    async def counted(action: Action) -> Outcome:
        acts.append(action)
        return await act(action)

    monkeypatch.setattr(rig.service, "act", counted)
    record = rig.store.record_raw

    async def database_down(*_: Any, **__: Any) -> int | None:
        raise OperationalError("INSERT INTO raw_event", {}, ConnectionError("connection refused"))

    monkeypatch.setattr(rig.store, "record_raw", database_down)
    down = [
        await rig.click(clicked, button(clicked, "deny")),
        await rig.reply(replied, "release/2026.11", event_id="Ev0DOWN"),
        await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}}),
    ]
    await rig.drain()

    assert [r.status_code for r in down] == [503, 503, 503], "no ack: Slack shows an error"
    assert acts == []
    assert [await rig.status(k) for k in (click_key, reply_key, modal_key)] == [Status.PENDING] * 3
    assert rig.ephemerals(ALICE) == []

    monkeypatch.setattr(rig.store, "record_raw", record)
    # The person tries again; Slack sends the event again (its retry header says so).
    again = [
        await rig.click(clicked, button(clicked, "deny")),
        await rig.reply(replied, "release/2026.11", event_id="Ev0DOWN"),
        await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}}),
    ]
    await rig.drain()
    assert [r.status_code for r in again] == [200, 200, 200]
    assert [await rig.status(k) for k in (click_key, reply_key, modal_key)] == [Status.ANSWERED] * 3
    assert await rig.open() == []


# --------------------------------------------------------------------------- a kill after the ack


@pytest.mark.parametrize("kind", ["click", "thread reply", "modal"])
async def test_an_answer_acked_before_a_kill_is_recorded_after_the_restart(
    db_url: str,
    tmp_path: Path,
    clock: FakeClock,
    fake: FakeSlack,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    rig = await durable_rig(db_url, tmp_path, clock, fake)
    case = {"click": "options", "thread reply": "free-text", "modal": "no-options-no-question"}
    key = await rig.intake_fixture(case[kind])
    await rig.drain()
    message = rig.message(key)
    if kind == "modal":
        await rig.click(message, action_button(message, REPLY_ACTION))
        await rig.slack.idle()
        [modal] = rig.fake.views()
        held = hold(rig, monkeypatch)
        response = await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}})
    elif kind == "click":
        held = hold(rig, monkeypatch)
        response = await rig.click(message, button(message, "deny"))
    else:
        held = hold(rig, monkeypatch)
        response = await rig.reply(message, "release/2026.11")
    await asyncio.sleep(0.05)
    assert response.status_code == 200
    assert len(held.calls) == 1, "killed while the answer was being handled"
    await kill(rig)

    again = await restart(rig, db_url)
    try:
        view = await again.service.view(key)
        assert view is not None
        assert view.status is Status.ANSWERED
        assert view.answer is not None
        assert view.answer.respondent == f"slack:{ALICE}"
        assert view.answer.via == f"slack:{C1}"
        expected = {"click": ("deny",), "thread reply": (), "modal": ()}[kind]
        assert view.answer.option_ids == expected
        assert view.answer.text == {"thread reply": "release/2026.11", "modal": "noted"}.get(kind)
        assert len(again.sink.delivered) == 1, "one write-back"
        assert await again.open() == []
        assert again.ephemerals(ALICE) == [], "a replay is the one attempt, not a second one"
        notes = [m for m in again.thread(message) if m["user"] == BOT_USER]
        assert len(notes) == 1, "the win, said once in the thread"

        assert await again.slack.durable.replay(before=clock.advance(3600)) == 0, "handled once"
    finally:
        await again.close()
        await again.store.close()


async def test_a_replay_waits_for_what_another_process_may_still_be_handling(
    rig: DurableRig,
) -> None:
    """Several replicas: an open event younger than ``before`` (now minus a grace) is left to
    the process handling it; once older, it is replayed."""
    key = await rig.intake_fixture("options")
    await rig.drain()
    message = rig.message(key)
    elsewhere = rig.slack.durable.started_at  # recorded by another replica, not finished yet
    body: dict[str, object] = {
        "type": "block_actions",
        "trigger_id": "elsewhere.1",
        "team": {"id": "T0ACME"},
        "user": {"id": ALICE, "team_id": "T0ACME"},
        "channel": {"id": C1},
        "container": {"channel_id": C1, "message_ts": message["ts"]},
        "message": {"ts": message["ts"]},
        "actions": [{**button(message, "deny"), "action_ts": "1700000100.000001"}],
    }
    raw_id = await rig.store.record_raw(RAW_CHANNEL, "action:elsewhere.1", body, elsewhere)
    assert raw_id is not None

    assert await rig.slack.durable.replay(before=elsewhere) == 0
    assert [r.id for r in await rig.open()] == [raw_id]
    assert await rig.status(key) is Status.PENDING

    assert await rig.slack.durable.replay(before=rig.clock.advance(61)) == 1
    await rig.drain()
    assert await rig.status(key) is Status.ANSWERED
    assert await rig.open() == []


# --------------------------------------------------------------------------- duplicates


async def test_every_redelivery_is_acked_and_handled_once(
    rig: DurableRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    click_key, reply_key, modal_key = await posted(
        rig, "options", "free-text", "no-options-no-question"
    )
    clicked, replied, modal_message = (rig.message(k) for k in (click_key, reply_key, modal_key))
    await rig.click(modal_message, action_button(modal_message, REPLY_ACTION))
    await rig.slack.idle()
    [modal] = rig.fake.views()
    acts: list[Action] = []
    act = rig.service.act

    async def counted(action: Action) -> Outcome:
        acts.append(action)
        return await act(action)

    monkeypatch.setattr(rig.service, "act", counted)
    monkeypatch.setattr(rig.fake, "issue_trigger", lambda age=0.0: "1700000100.trigger-1")
    deny = button(clicked, "deny")

    statuses = [
        # One click delivered twice (the same payload: the same trigger id).
        (await rig.click(clicked, deny)).status_code,
        (await rig.click(clicked, deny)).status_code,
        # A thread reply retried by Slack (the same event), then the same message under
        # another event id.
        (await rig.reply(replied, "release/2026.11", event_id="Ev0AAA")).status_code,
        (await rig.reply(replied, "release/2026.11", event_id="Ev0AAA")).status_code,
        (await rig.reply(replied, "release/2026.11", event_id="Ev0BBB")).status_code,
        # Send pressed twice on one modal (the same view id and hash).
        (await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}})).status_code,
        (await rig.submit(modal, {"elicitbot.text": {"value": text_value("noted")}})).status_code,
    ]
    await rig.drain()

    assert statuses == [200] * 7
    assert len(acts) == 3, "one attempt each"
    assert [await rig.status(k) for k in (click_key, reply_key, modal_key)] == [Status.ANSWERED] * 3
    assert rig.ephemerals(ALICE) == [], "nobody is told 'already answered' for a redelivery"
    assert len(rig.sink.delivered) == 3

    # A second click is a new click (a new trigger id): judged, and told.
    monkeypatch.setattr(rig.fake, "issue_trigger", lambda age=0.0: "1700000101.trigger-2")
    await rig.click(clicked, deny, user=BOB, action_ts="1700000101.000001")
    await rig.drain()
    assert len(acts) == 4
    [told] = rig.ephemerals(BOB)
    assert told["text"].startswith("Already answered")


# --------------------------------------------------------------------------- secrets


async def test_a_secret_is_never_recorded_and_a_replayed_one_is_asked_for_again(
    tmp_path: Path,
    sqlite_url: str,
    clock: FakeClock,
    fake: FakeSlack,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    canary = "CANARY-2b7d4e-modal-secret"
    typed = "CANARY-9c1f0a-typed-in-the-thread"
    rig = await durable_rig(sqlite_url, tmp_path, clock, fake)
    e = elicitation(
        source="pinework",
        source_id="qst_0secret",
        answer_mode=AnswerMode.SECRET,
        options=(),
        question="Paste the deploy token for staging.",
    )
    key = await rig.intake(e)
    await rig.drain()
    message = rig.message(key)
    await rig.reply(message, typed, event_id="Ev0TYPED")
    await rig.click(message, action_button(message, REPLY_ACTION))
    await rig.drain()
    [modal] = rig.fake.views()
    held = hold(rig, monkeypatch)
    response = await rig.submit(modal, {"elicitbot.secret": {"value": text_value(canary)}})
    await asyncio.sleep(0.05)
    assert response.status_code == 200
    assert len(held.calls) == 1
    [kept] = await rig.open()
    assert kept.body["type"] == "view_submission"
    assert "elicitbot.secret" not in kept.body["view"]["state"]["values"]
    await kill(rig)

    files = [tmp_path / n for n in ("elicitbot.db", "elicitbot.db-wal", "elicitbot.db-shm")]
    assert files[0].exists()
    for path in (f for f in files if f.exists()):
        data = path.read_bytes()
        assert canary.encode() not in data, path.name
        assert typed.encode() not in data, path.name

    again = await restart(rig, sqlite_url)
    try:
        assert rig.secret_sink.secrets == [], "nothing went upstream before the kill"
        assert again.secret_sink.secrets == [], "a replay has no secret to send"
        assert await again.status(key) is Status.PENDING
        told = [t["text"] for t in again.ephemerals(ALICE)]
        # The secret typed in the thread was refused (before the kill); the modal's is asked for.
        assert told[0].startswith("This answer is a secret: use the private form")
        assert told[1:] == [RESEND_PRIVATE]
        assert await again.open() == []
        calls = json.dumps([c.params for c in again.fake.calls()])
        assert canary not in calls
    finally:
        await again.close()
        await again.store.close()


# --------------------------------------------------------------------------- the dedupe keys


def test_the_dedupe_keys_are_what_slack_makes_unique() -> None:
    click = {
        "type": "block_actions",
        "trigger_id": "1700000100.trg",
        "user": {"id": ALICE},
        "actions": [{"action_id": "elicitbot.option.0", "action_ts": "1700000100.000001"}],
    }
    untriggered = {k: v for k, v in click.items() if k != "trigger_id"}
    view = {"type": "view_submission", "view": {"id": "V0MODAL", "hash": "1700000300.abc"}}
    event = {
        "type": "event_callback",
        "event_id": "Ev0AAA",
        "event": {"type": "message", "channel": C1, "ts": "1700000200.000001"},
    }
    other_event = {"type": "event_callback", "event_id": "Ev0CCC", "event": {"type": "app_home"}}

    assert raw_key(click) == "action:1700000100.trg"
    assert raw_key(untriggered) == f"action:{ALICE}:elicitbot.option.0:1700000100.000001"
    assert raw_key(view) == "view:V0MODAL:1700000300.abc"
    assert (
        raw_key(event)
        == raw_key({**event, "event_id": "Ev0BBB"})
        == (f"message:{C1}/1700000200.000001")
    ), "one message under two event ids is one"
    assert raw_key(other_event) == "event:Ev0CCC"
    long = {**click, "trigger_id": "t" * 500}
    assert len(raw_key(long)) <= MAX_RAW_KEY
    assert raw_key(long) != raw_key({**click, "trigger_id": "t" * 499})

"""Matrix end to end: restarts, failed batches, limited syncs, a homeserver outage, a wrong token
and stopping (the rig: tests/integration/matrix/rig.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from adapters.matrix import MatrixChat, MatrixListener, make_client
from adapters.matrix.chat import post_txn
from adapters.matrix.listener import token_key
from bot.domain.actions import Action, Outcome
from bot.domain.errors import ConfigError, StoreError
from bot.domain.model import Route
from bot.domain.ports import PromptView
from bot.domain.refs import MatrixRef
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.integration.matrix.rig import OUTAGE_SECONDS, THREE, Rig, flag, people, until
from tests.synapse import Cast, Homeserver, Synapse

# --------------------------------------------------------------------------- restarts, outages


async def test_a_restart_replays_nothing_and_a_post_cut_off_is_not_doubled(rig: Rig) -> None:
    _, event_id = await rig.post("options")
    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "what is this?")
    await rig.wait_notices(event_id, 1)
    saved = await rig.store.get_value(token_key(rig.cast.bot.user_id, rig.cast.bot.device_id))
    assert saved == rig.bot.listener.since

    # The process dies after the homeserver took a post but before its ref was stored.
    second = await rig.intake("free-text")
    [row] = await rig.store.claim_outbox(rig.clock.now(), "dead-process")
    stored = await rig.store.get(second)
    assert stored is not None
    view = PromptView(
        stored.elicitation, stored.status, None, stored.version, "http://x/", rig.clock.now()
    )
    orphan = await rig.bot.chat.post(
        rig.destination, view, idempotency_key=f"elicitbot-{row.id}", uncertain=None
    )
    await rig.bot.close()
    rig.bots.pop()

    bot = await rig.start_bot()
    rig.clock.advance(61)  # the dead process's lease runs out
    assert await bot.dispatcher.run_once() == 1
    [delivery] = await rig.store.deliveries(second)
    assert delivery.ref == orphan, "the same transaction id gave back the same event"
    assert len(await rig.prompts(second)) == 1

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, orphan.event_id, "develop")
    assert (await rig.answered(second)).text == "develop"
    await rig.wait_notices(orphan.event_id, 1)
    assert bot.listener.handled == 1, "nothing from before the restart was handled again"
    assert len(await rig.notices(event_id)) == 1
    assert post_txn(f"elicitbot-{row.id}", second).startswith(f"elicitbot-{row.id}.")


class FlakyService(Service):
    """The service with its database failing for the first ``fail`` answers."""

    def __init__(self, *args: Any, fail: int, log: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail = fail
        self.log = log

    async def act(self, action: Action) -> Outcome:
        if self.fail:
            self.fail -= 1
            self.log.append("failed")
            raise StoreError("database is down")
        outcome = await super().act(action)
        self.log.append("answered")
        return outcome


class RecordingValues:
    """The KeyValue port over the store, logging each sync token saved."""

    def __init__(self, store: SqlStore, log: list[str]) -> None:
        self.store = store
        self.log = log

    async def get_value(self, key: str) -> str | None:
        return await self.store.get_value(key)

    async def set_value(self, key: str, value: str) -> None:
        await self.store.set_value(key, value)
        self.log.append("saved")


async def test_a_failed_batch_is_handled_again_before_its_token_is_saved(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    await rig.bot.listener.stop()
    log: list[str] = []
    flaky = FlakyService(
        rig.store,
        rig.clock,
        people(rig.cast),
        [Route(destinations=(rig.destination,))],
        fail=0,
        log=log,
    )
    listener = MatrixListener(
        rig.bot.chat,
        flaky,
        RecordingValues(rig.store, log),
        device_id=rig.cast.bot.device_id,
        max_backoff=0.2,
    )
    await listener.start()
    try:
        await until(flag(lambda: listener.ready), "the first sync")
        log.clear()
        flaky.fail = 2  # armed now: under load the first sync's own batch could take them
        await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
        answer = await rig.answered(key)
        await until(
            flag(lambda: "answered" in log and "saved" in log[log.index("answered") :]),
            "the token saved",
        )
    finally:
        await listener.drain()
        await listener.stop()

    assert answer.respondent == rig.cast.bob.key
    # Other batches (the bot's own events, an empty sync) may save their token before the
    # reaction's batch comes: from its first failure on, no token is saved until it is answered.
    first = log.index("failed")
    assert log[first : log.index("saved", first) + 1] == ["failed", "failed", "answered", "saved"]
    assert len([a for a in await rig.store.audit(key) if a.action == "answer"]) == 1
    assert len(await rig.notices(event_id)) == 1


async def test_a_limited_sync_is_backfilled_from_the_last_token(rig: Rig) -> None:
    key, event_id = await rig.post("options")
    await rig.bot.close()
    rig.bots.pop()

    await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "deny")
    for n in range(8):
        await rig.hs.say(rig.cast.alice, rig.room, f"chatter {n}")

    bot = await rig.start_bot(timeline_limit=3)
    answer = await rig.answered(key)
    assert (answer.option_ids, answer.respondent) == (("deny",), rig.cast.bob.key)
    assert bot.listener.backfilled >= 6
    await rig.wait_notices(event_id, 1)


@pytest.mark.slow
@pytest.mark.faults  # the homeserver is stopped and started again: ~25 s, the fault tier's
async def test_a_homeserver_outage_then_the_same_transaction_ids_give_one_event_each(
    rig: Rig,
) -> None:
    key, event_id = await rig.post("options")
    # A post the homeserver took just before it went down, its answer lost on the way back.
    cut_off = await rig.intake("approval-request")
    [row] = await rig.store.claim_outbox(rig.clock.now(), "dead-process")
    stored = await rig.store.get(cut_off)
    assert stored is not None
    view = PromptView(
        stored.elicitation, stored.status, None, stored.version, "http://x/", rig.clock.now()
    )
    orphan = await rig.bot.chat.post(
        rig.destination, view, idempotency_key=f"elicitbot-{row.id}", uncertain=None
    )

    rig.synapse.stop()
    try:
        during = await rig.intake("free-text")
        # The dead process's claim runs out (nobody renews it); the cut-off post and the new one
        # are the room's chain, retried together, and both fail while Synapse is down.
        rig.clock.advance(11)
        assert await rig.bot.dispatcher.run_once() == 2
        for key_ in (cut_off, during):
            [failed] = [r for r in await rig.store.outbox(key_) if r.kind == "post"]
            assert failed.state == "pending"
            assert "ClientConnectorError" in (failed.last_error or "")
        await until(flag(lambda: not rig.bot.listener.ready), "not ready")
        await asyncio.sleep(OUTAGE_SECONDS)
        assert not rig.bot.listener.ready
    finally:
        rig.synapse.start()

    await until(flag(lambda: rig.bot.listener.ready), "ready again", within=30)
    rig.clock.advance(120)
    # The cut-off post and the one made meanwhile, then their keycaps.
    assert await rig.bot.dispatcher.drain() == 4
    [adopted] = await rig.store.deliveries(cut_off)
    assert adopted.ref == orphan
    assert len(await rig.prompts(cut_off)) == 1
    assert len(await rig.prompts(during)) == 1
    assert len(await rig.prompts(key)) == 1
    [posted] = await rig.store.deliveries(during)
    assert isinstance(posted.ref, MatrixRef)
    await rig.hs.reply_in_thread(rig.cast.alice, rig.room, posted.ref.event_id, "main")
    assert (await rig.answered(during)).text == "main"
    await rig.hs.react(rig.cast.bob, rig.room, event_id, THREE)
    assert (await rig.answered(key)).option_ids == ("deny",)


async def test_a_refused_token_or_another_device_stops_the_start_by_name(
    homeserver: Homeserver, synapse: Synapse, cast: Cast, sqlite_url: str, clock: FakeClock
) -> None:
    store = SqlStore.from_url(sqlite_url)
    service = Service(store, clock, people(cast), [])
    bot = cast.bot
    other_device = synapse.login(bot, "ANOTHERDEVICE")
    cases = [
        (bot.device_id, "not-a-real-token", "matrix.access_token_env: the homeserver refused"),
        (bot.device_id, other_device.access_token, "matrix.device_id: the token belongs to"),
    ]
    try:
        for device_id, token, message in cases:
            chat = MatrixChat(make_client(homeserver.base_url, bot.user_id, device_id, token))
            listener = MatrixListener(chat, service, store, device_id=device_id)
            try:
                with pytest.raises(ConfigError, match=message) as refused:
                    await listener.start()
                assert token not in str(refused.value)
                assert not listener.ready
            finally:
                await chat.client.close()
    finally:
        await store.close()


async def test_stopping_the_listener_does_not_wait_for_the_long_poll(rig: Rig) -> None:
    await asyncio.sleep(0.3)  # the listener is now inside a 30 s long poll
    started = time.monotonic()
    await rig.bot.listener.stop()
    assert time.monotonic() - started < 1.0
    assert not rig.bot.listener.ready

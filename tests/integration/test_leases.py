"""Lease failover on a real database (SQLite file, PostgreSQL): two replicas, each its own store
and LeaseKeeper on the real clock; the holder is killed (its keeper cancelled: no release) and
the other takes the work over once the lease runs out — here a 1 s ttl, so the test is quick;
the default 10 s ttl gives the same within 12 s.

Also the Matrix failover end to end: two sync runners on one PostgreSQL store against the real
Synapse; the owner dies, an answer is posted while nobody syncs, and the new owner handles it
once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest

from adapters.matrix import MatrixChat, MatrixListener, make_client
from adapters.matrix.listener import token_key
from bot.app.config import AppConfig, parse_config
from bot.app.wiring import Elicitbot
from bot.clock import SystemClock
from bot.domain.errors import ConfigError
from bot.domain.model import Route
from bot.lease import LeaseKeeper
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.matrix.rig import Bot, Rig, flag, people, until
from tests.integration.test_pinework import TOKEN, FakePinework
from tests.slack_fake import FakeSlack
from tests.synapse import Cast, Homeserver, Synapse

pytestmark = pytest.mark.faults
"""The fault tier (``-m faults``): holders killed, leases moved."""

TTL = 1.0
RETRY = 0.2
FAILOVER_LIMIT = TTL + RETRY + 1.0
"""ttl + retry, plus a second for the database and a loaded machine."""


class Holder:
    """One replica's single-owner work: counts its runs and whether it runs now."""

    def __init__(self, url: str, holder: str, shared: dict[str, int]) -> None:
        self.store = SqlStore.from_url(url)
        self.holder = holder
        self.shared = shared
        self.running = False
        self.started_at: float | None = None
        self.keeper = LeaseKeeper(
            self.store,
            "matrix:@bot:hs",
            self.work,
            clock=SystemClock(),
            holder=holder,
            ttl=TTL,
            retry=RETRY,
        )
        self.task: asyncio.Task[None] | None = None

    async def work(self) -> None:
        self.shared["running"] += 1
        self.shared["most"] = max(self.shared["most"], self.shared["running"])
        self.running = True
        self.started_at = time.monotonic()
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False
            self.shared["running"] -= 1

    def start(self) -> None:
        self.task = asyncio.create_task(self.keeper.run())

    async def kill(self) -> None:
        """As kill -9 would: the work stops, the lease stays in the database until it runs out."""
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    async def close(self) -> None:
        if self.task is not None and not self.task.done():
            await self.keeper.stop()
        await self.store.close()


async def wait_for(check: Callable[[], bool], what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def replicas(db_url: str) -> AsyncIterator[tuple[Holder, Holder]]:
    shared = {"running": 0, "most": 0}
    a, b = Holder(db_url, "replica-a", shared), Holder(db_url, "replica-b", shared)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        assert shared["most"] == 1, "two replicas ran the single-owner work at once"


async def test_a_killed_holders_lease_moves_to_the_live_replica(
    replicas: tuple[Holder, Holder],
) -> None:
    a, b = replicas
    a.start()
    await wait_for(lambda: a.running, "the first replica to take the lease", 5)
    b.start()
    await wait_for(lambda: b.keeper.standby, "the second replica to stand by", 5)
    assert not b.running

    await a.kill()
    killed = time.monotonic()
    assert not a.running
    [view] = await b.store.leases()
    assert view.holder == "replica-a", "a kill releases nothing"

    await wait_for(lambda: b.running, "the take-over", FAILOVER_LIMIT + 1)
    assert b.started_at is not None
    assert b.started_at - killed <= FAILOVER_LIMIT
    [view] = await b.store.leases()
    assert view.holder == "replica-b"
    assert view.since >= view.until - timedelta(seconds=TTL), "held since the take-over"


async def test_an_orderly_stop_hands_the_lease_over_at_once(
    replicas: tuple[Holder, Holder],
) -> None:
    a, b = replicas
    a.start()
    await wait_for(lambda: a.running, "the first replica to take the lease", 5)
    b.start()
    await wait_for(lambda: b.keeper.standby, "the second replica to stand by", 5)
    await a.keeper.stop()
    stopped = time.monotonic()
    await wait_for(lambda: b.running, "the take-over", 5)
    assert b.started_at is not None
    assert b.started_at - stopped <= RETRY + 0.5, "released: no wait for the lease to run out"


# --------------------------------------------------------------------------- Matrix failover


@pytest.fixture
async def pg_rig(
    homeserver: Homeserver, synapse: Synapse, cast: Cast, pg_url: str, clock: FakeClock
) -> AsyncIterator[Rig]:
    room = await homeserver.make_room(
        cast.alice, [cast.bot, cast.bob, cast.agent], power={cast.bot.user_id: 50}
    )
    store = SqlStore.from_url(pg_url)
    rig = Rig(homeserver, synapse, cast, room, store, clock, FakeSink(), pg_url)
    try:
        yield rig
    finally:
        for bot in rig.bots:
            await bot.close()
        await store.close()


class Tokens:
    """The listener's KeyValue port on the shared store, recording the sync tokens it reads."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.read: list[str | None] = []

    async def get_value(self, key: str) -> str | None:
        value = await self.store.get_value(key)
        self.read.append(value)
        return value

    async def set_value(self, key: str, value: str) -> None:
        await self.store.set_value(key, value)


@dataclass
class MatrixReplica:
    """One elicitbot replica with Matrix: its own nio client, outbox, service and listener on the
    shared store; the sync loop runs under the Matrix lease (as bot.app.wiring runs it)."""

    bot: Bot
    tokens: Tokens
    holder: str
    keeper: LeaseKeeper | None = None
    task: asyncio.Task[None] | None = None

    def start(self, rig: Rig) -> LeaseKeeper:
        self.keeper = LeaseKeeper(
            rig.store,
            f"matrix:{rig.cast.bot.user_id}",
            self.bot.listener.run,
            clock=SystemClock(),
            holder=self.holder,
            ttl=TTL,
            retry=RETRY,
        )
        self.task = asyncio.create_task(self.keeper.run())
        return self.keeper

    async def kill(self) -> None:
        """kill -9: the sync stops, nobody releases the lease."""
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task

    async def stop(self) -> None:
        if self.keeper is not None and self.task is not None and not self.task.done():
            await self.keeper.stop()


async def _matrix_replica(rig: Rig, holder: str) -> MatrixReplica:
    user = rig.cast.bot
    chat = MatrixChat(make_client(rig.hs.base_url, user.user_id, user.device_id, user.access_token))
    dispatcher = Dispatcher(
        rig.store,
        rig.clock,
        {"matrix": chat},
        {"superpipeline": rig.sink},
        lambda key: f"http://127.0.0.1:8787/#{key}",
        claimer=holder,
    )
    service = Service(
        rig.store,
        rig.clock,
        people(rig.cast),
        [Route(destinations=(rig.destination,))],
        on_change=dispatcher.wake,
    )
    tokens = Tokens(rig.store)
    listener = MatrixListener(chat, service, tokens, device_id=user.device_id)
    await listener.connect()
    bot = Bot(chat, dispatcher, service, listener)
    rig.bots.append(bot)
    return MatrixReplica(bot, tokens, holder)


async def test_the_matrix_owner_dies_and_the_other_replica_handles_the_answer_once(
    pg_rig: Rig,
) -> None:
    rig = pg_rig
    a = await _matrix_replica(rig, "replica-a")
    a.start(rig)
    await until(flag(lambda: a.bot.listener.ready), "the owner's first sync")
    key, event_id = await rig.post("options")
    await rig.settle(rig.cast.bob)  # the owner synced past the post and saved its token
    b = await _matrix_replica(rig, "replica-b")
    try:
        b_keeper = b.start(rig)
        await until(flag(lambda: b_keeper.standby), "the standby")
        assert not b.bot.listener.ready, "the standby does not sync"

        await a.kill()
        died = time.monotonic()
        # An answer while nobody syncs.
        await rig.hs.reply_in_thread(rig.cast.bob, rig.room, event_id, "deny")

        await until(flag(lambda: b_keeper.held), "the take-over", within=FAILOVER_LIMIT + 1)
        assert time.monotonic() - died <= FAILOVER_LIMIT + 0.5
        answer = await rig.answered(key)
        assert (answer.option_ids, answer.respondent) == (("deny",), rig.cast.bob.key)
        await rig.settle(rig.cast.bob)  # rig.bot: the new owner
        assert b.bot.listener.handled == 1, "the answer, once"
        assert a.bot.listener.handled == 0
        assert len([x for x in await rig.store.audit(key) if x.action == "answer"]) == 1

        # The new owner dies too; the first replica, back, syncs on from the token the second
        # saved (not from its own, older one).
        await b.kill()
        saved = await rig.store.get_value(token_key(rig.cast.bot.user_id, rig.cast.bot.device_id))
        assert saved is not None
        assert saved != a.tokens.read[-1]
        a_keeper = a.start(rig)
        await until(flag(lambda: a_keeper.held and a.bot.listener.ready), "the return")
        assert a.tokens.read[-1] == saved
        marker = await rig.hs.say(rig.cast.bob, rig.room, "marker")
        await until(flag(lambda: a.bot.listener.last_event_id == marker), "the marker")
        assert a.bot.listener.handled == 0, "nothing handled twice"
    finally:
        await b.stop()
        await a.stop()


# --------------------------------------------------------------------------- the wiring


def _matrix_config(pg_url: str, synapse: Synapse, cast: Cast) -> AppConfig:
    return parse_config(
        {
            "store": {"url": pg_url},
            "matrix": {
                "homeserver": synapse.base_url,
                "user_id": cast.bot.user_id,
                "device_id": cast.bot.device_id,
            },
        }
    )


async def test_replicas_sync_matrix_one_at_a_time_and_hand_over_on_stop(
    homeserver: Homeserver, synapse: Synapse, cast: Cast, pg_url: str
) -> None:
    """Two ``Elicitbot`` replicas on one PostgreSQL store: one holds ``matrix:<user id>`` and
    syncs, the other stands by (and is ready: it posts); an orderly stop hands over at once."""
    environ = {"MATRIX_ACCESS_TOKEN": cast.bot.access_token}
    first = Elicitbot(_matrix_config(pg_url, synapse, cast), environ=environ)
    second = Elicitbot(_matrix_config(pg_url, synapse, cast), environ=environ)
    assert first.matrix is not None
    assert second.matrix is not None
    one, other = first.matrix, second.matrix
    await first.start()
    try:
        await until(flag(lambda: one.ready), "the first replica's sync")
        await second.start()
        try:
            name = f"matrix:{cast.bot.user_id}"
            [lease] = [v for v in await first.store.leases() if v.name == name]
            assert lease.holder == first.dispatcher.claimer
            await asyncio.sleep(0.5)
            assert not other.ready, "the standby does not sync"
            assert first.adapters_ready()["matrix"]
            assert second.adapters_ready()["matrix"], "a standby is ready: it posts"

            await first.stop()
            stopped = time.monotonic()
            await until(flag(lambda: other.ready), "the take-over", within=5)
            assert time.monotonic() - stopped < 4, "released at stop: no wait for the ttl"
            [lease] = [v for v in await second.store.leases() if v.name == name]
            assert lease.holder == second.dispatcher.claimer
        finally:
            await second.stop()
    finally:
        if not first.runtime.draining:
            await first.stop()


def _socket_config(pg_url: str, fake: FakeSlack) -> AppConfig:
    return parse_config(
        {
            "store": {"url": pg_url},
            "slack": {"api_url": fake.api_url, "app_token_env": "SLACK_APP_TOKEN"},
        }
    )


async def test_replicas_open_one_socket_mode_connection_and_hand_it_over_on_stop(
    pg_url: str,
) -> None:
    with FakeSlack() as fake:
        environ = {"SLACK_BOT_TOKEN": fake.token, "SLACK_APP_TOKEN": fake.app_token}
        first = Elicitbot(_socket_config(pg_url, fake), environ=environ)
        second = Elicitbot(_socket_config(pg_url, fake), environ=environ)
        one, other = first.slack_socket, second.slack_socket
        assert one is not None
        assert other is not None
        await first.start()
        try:
            await until(flag(one.connected), "the first replica's connection")
            await second.start()
            try:
                await asyncio.sleep(0.5)
                assert fake.socket_connections == 1, "one replica holds the connection"
                assert not other.connected()
                assert second.adapters_ready()["slack"], "a standby is ready: it posts"

                await first.stop()
                await until(flag(other.connected), "the take-over", within=5)
                assert fake.socket_connections == 2
            finally:
                await second.stop()
        finally:
            if not first.runtime.draining:
                await first.stop()

        # Every replica checks the app-level token at start, holder or not.
        refused = Elicitbot(
            _socket_config(pg_url, fake), environ={**environ, "SLACK_APP_TOKEN": "xapp-1-A0-no"}
        )
        with pytest.raises(ConfigError, match=r"slack\.app_token_env: Slack refused"):
            await refused.prepare()
        await refused.store.close()
        await refused.http_client.aclose()


async def test_replicas_poll_pinework_one_at_a_time_and_hand_over_on_stop(pg_url: str) -> None:
    with FakePinework() as fake:
        config = parse_config(
            {
                "store": {"url": pg_url},
                "sources": {
                    "pinework": [
                        {
                            "base_url": fake.url,
                            "token_env": "PINEWORK_TOKEN",
                            "workspace": "acme",
                            "poll_seconds": 0.1,
                        }
                    ]
                },
            }
        )
        environ = {"PINEWORK_TOKEN": TOKEN}
        first, second = Elicitbot(config, environ=environ), Elicitbot(config, environ=environ)
        name = f"pinework:{fake.url}#acme"

        async def holder() -> str | None:
            return next((v.holder for v in await first.store.leases() if v.name == name), None)

        await first.start()
        try:
            await second.start()
            try:
                await until(holder, "the poller's lease")
                assert await holder() == first.dispatcher.claimer
                await until(lambda: _polled(fake), "a poll")
                ready = second.adapters_ready
                await until(flag(lambda: ready()[f"pinework:{fake.url}#acme"]), "standby: ready")

                await first.stop()
                await until(
                    lambda: _is(holder, second.dispatcher.claimer), "the take-over", within=5
                )
                polls = len(fake.requests("GET"))
                await until(lambda: _polled(fake, more_than=polls), "the new holder's poll")
            finally:
                await second.stop()
        finally:
            if not first.runtime.draining:
                await first.stop()


async def _polled(fake: FakePinework, more_than: int = 0) -> bool:
    return len(fake.requests("GET")) > more_than


async def _is(read: Callable[[], Awaitable[str | None]], expected: str) -> bool:
    return await read() == expected

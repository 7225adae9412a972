"""The composition root: the only module that sees bot, adapters and store together.

(Over 500 lines on purpose: the whole service is assembled here, one factory per part, read top
to bottom; what a part does at start and stop lives with the part, e.g. the Slack Socket Mode
connection's token check and lease in adapters/slack/socket.py.)

``Elicitbot`` is built from a list of parts: the core (store, service, dispatcher, timekeeper) and
one small factory per optional part (Slack, Matrix, NATS, each Pinework poller, the sources'
routes, the web inbox), each returning what it adds — a chat adapter, answer sinks, HTTP routers,
background tasks, readiness — so the constructor reads as a list, not a tree of conditionals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog
import uvicorn
from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client.registry import CollectorRegistry
from slack_sdk.web.async_client import AsyncWebClient

from adapters.matrix import MatrixChat, MatrixListener, lease_fence, matrix_chat
from adapters.matrix.crypto_state import pickle_key_from_env
from adapters.slack.app import SlackInteractivity, build_app
from adapters.slack.chat import SlackChat
from adapters.slack.pacing import Pacer
from adapters.slack.people import SlackNames
from adapters.slack.routes import slack_router
from adapters.slack.socket import SlackSocket
from adapters.sources.engine import EngineSink, engine_router
from adapters.sources.handup import HandupSink, handup_router
from adapters.sources.pinework import (
    PineworkPoller,
    PineworkSecretSink,
    PineworkSink,
    account_key,
)
from adapters.sources.pinework.config import PineworkConfig
from adapters.sources.superpipeline import superpipeline_router
from adapters.sources.superpipeline.nats import CompositeSink, NatsAnswerPublisher, NatsIntake
from adapters.sources.superpipeline.sink import SuperPipelineSink
from adapters.sources.toolshed import toolshed_router
from adapters.web.chat import WebChat
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from bot.app import logs
from bot.app.config import AppConfig, preflight, secret
from bot.app.http import Runtime, authorised, create_app, problem
from bot.clock import SystemClock
from bot.domain.errors import ConfigError, DeliveryError, PermanentDeliveryError
from bot.domain.model import People
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, Elicitations
from bot.domain.store import Store
from bot.lease import LeaseKeeper, owner_id
from bot.outbox import Dispatcher
from bot.scheduler import Scheduler
from bot.service import Service
from bot.timekeeper import Timekeeper
from store.db import upgrade
from store.sql import SqlStore

log = structlog.get_logger("elicitbot")
SHUTDOWN_GRACE_SECONDS = 10.0

Task = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def open_store(url: str) -> Store:
    """The store a URL names (SQLite file or PostgreSQL), for commands that only read or migrate."""
    return SqlStore.from_url(url)


def upgrade_store(url: str) -> None:
    """Apply the database migrations (``elicitbot db upgrade``; ``serve`` does it at start)."""
    upgrade(url)


@dataclass
class Part:
    """What one optional part adds to the running service."""

    name: str
    chats: dict[str, ChatAdapter] = field(default_factory=dict)
    """Outbound chat by platform."""
    sinks: dict[str, AnswerSink] = field(default_factory=dict)
    """Write-backs by source."""
    routers: list[APIRouter] = field(default_factory=list)
    tasks: dict[str, Task] = field(default_factory=dict)
    """Background loops, run until the stop event is set."""
    ready: Callable[[], dict[str, bool]] = dict
    prepare: Callable[[], Awaitable[None]] | None = None
    """What must work before we listen (a token check); a ConfigError stops the start."""
    start: Callable[[], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None
    """Stops intake (before the outbox drains)."""
    close: Callable[[], Awaitable[None]] | None = None
    """Releases connections (after the outbox drained)."""


@dataclass
class Context:
    """What every factory may use."""

    config: AppConfig
    environ: Mapping[str, str]
    clock: Clock
    store: Store
    http_client: httpx.AsyncClient
    elicitations: Elicitations
    authorise: Callable[[Request], Response | None]
    learn_identities: Callable[[set[str]], None]
    """Add elicitbot's own identity keys on a platform (bots never answer)."""
    owner: str
    """This replica's identity: its outbox claims and its single-owner leases (bot.lease)."""
    registry: CollectorRegistry
    """What ``/metrics`` serves; routers register their metrics on it."""
    pinework_tokens: Mapping[str, str]
    """Each Pinework account's token, by :func:`account_key`."""


class Elicitbot:
    """Everything ``serve`` runs, started and stopped by the HTTP server's lifespan."""

    def __init__(
        self,
        config: AppConfig,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)
        _check_startable(config, self.environ)
        logs.register_secrets(self.environ.get(env) for env in config.secret_envs().values())
        self.clock: Clock = clock or SystemClock()
        self.store: Store = open_store(config.store.url)
        self.http_client = httpx.AsyncClient()
        base = config.server.base_url
        link_for: Callable[[str], str] = lambda key: f"{base}/#{key}"  # noqa: E731
        self.web_identity = IdentityPolicy.from_config(
            listen_host=config.server.host,
            user_header=config.web.user_header,
            admins=config.web.admins,
            trusts=config.server.trusts,
        )
        self.registry = CollectorRegistry()
        """What ``/metrics`` serves (the runtime's); the dispatcher counts refused write-backs."""
        self.owner = owner_id()
        """This replica's identity: its outbox claims and its single-owner leases."""
        # New outbox rows wake the dispatcher: the service and the timekeeper set this event,
        # the dispatcher (built last, once every chat is known) waits on it.
        changed = asyncio.Event()
        pinework_tokens = _pinework_tokens(config, self.environ)
        self.service = Service(
            self.store,
            self.clock,
            self._people(),
            config.route_list(),
            on_change=changed.set,
            link_for=link_for,
            secret_sinks={"pinework": PineworkSecretSink(self.http_client, pinework_tokens)},
            claim_minutes=config.deadlines.claim_minutes,
        )
        self.elicitations: Elicitations = self.service  # mypy checks Service against the port
        # The timekeeper reads the service's people at each firing: identities learnt at start
        # (the Slack bot's own) reach it too.
        self.timekeeper = Timekeeper(
            self.store, self.clock, lambda: self.service.people, on_change=changed.set
        )
        self.scheduler = Scheduler(self.timekeeper, sweep_seconds=config.deadlines.sweep_seconds)
        context = Context(
            config=config,
            environ=self.environ,
            clock=self.clock,
            store=self.store,
            http_client=self.http_client,
            elicitations=self.service,
            authorise=self.authorise,
            learn_identities=self._learn_identities,
            owner=self.owner,
            registry=self.registry,
            pinework_tokens=pinework_tokens,
        )
        self.parts: list[Part] = [
            *_sources(context, self),
            _web(context, self.web_identity),
            *_slack(context, self),
            *_matrix(context, self),
        ]
        # Every part is built: the dispatcher gets the final chats and sinks (it decides from
        # the chats which lanes' posts go out as a chain).
        self.chats: Mapping[str, ChatAdapter] = {
            "web": WebChat(),
            **{k: v for part in self.parts for k, v in part.chats.items()},
        }
        self.sinks: Mapping[str, AnswerSink] = {
            k: v for part in self.parts for k, v in part.sinks.items()
        }
        self.dispatcher = Dispatcher(
            self.store,
            self.clock,
            self.chats,
            self.sinks,
            link_for,
            claimer=self.owner,
            wake=changed,
            registry=self.registry,
        )
        self.runtime = Runtime(
            store=self.store,
            registry=self.registry,
            elicitations=self.service,
            intake_token=secret(self.environ, config.server.intake_token_env),
            adapters_ready=self.adapters_ready,
            routers=[router for part in self.parts for router in part.routers],
        )
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._prepared = False

    # -- parts' views, kept as attributes for the operators' tools and the tests ---------------

    slack: SlackChat | None = None
    slack_app: SlackInteractivity | None = None
    slack_socket: SlackSocket | None = None
    matrix: MatrixListener | None = None
    matrix_chat: MatrixChat | None = None
    nats_intake: NatsIntake | None = None
    nats_publisher: NatsAnswerPublisher | None = None

    def _people(self) -> People:
        """``[people]``, plus the web inbox's admins and our own identities on each platform."""
        people = self.config.people_model()
        people = people.model_copy(
            update={"admins": people.admins | self.web_identity.admin_keys()}
        )
        if self.config.matrix is not None:
            own = f"matrix:{self.config.matrix.user_id}"
            people = people.model_copy(update={"bot_identities": people.bot_identities | {own}})
        return people

    def _learn_identities(self, own: set[str]) -> None:
        people = self.service.people
        self.service.people = people.model_copy(
            update={"bot_identities": people.bot_identities | own}
        )

    def adapters_ready(self) -> dict[str, bool]:
        """For /readyz: each configured adapter and whether it is connected."""
        ready: dict[str, bool] = {}
        for part in self.parts:
            ready.update(part.ready())
        return ready

    def authorise(self, request: Request) -> Response | None:
        """The edges' guard: 503 while stopping (writes), else the intake bearer token."""
        if self.runtime.draining and request.method == "POST":
            return problem(503, "Shutting down", "elicitbot is stopping; send it again shortly.")
        return authorised(self.runtime, request)

    async def prepare(self) -> None:
        """What must work before we listen: migrations, and the chat tokens (auth.test)."""
        if self._prepared:
            return
        await asyncio.to_thread(upgrade, self.config.store.url)
        for part in self.parts:
            if part.prepare is not None:
                await part.prepare()
        self._prepared = True

    async def start(self) -> None:
        await self.prepare()
        if self.store.single_process:
            # One process owns a SQLite file: claims left by a killed predecessor are ours again.
            released = await self.store.release_claims()
            if released:
                log.info("outbox.released", rows=released)
        self._tasks.append(asyncio.create_task(self.dispatcher.run(self._stop), name="outbox"))
        await self.scheduler.start()
        for part in self.parts:
            if part.start is not None:
                await part.start()
            for name, task in part.tasks.items():
                self._tasks.append(asyncio.create_task(task(self._stop), name=name))
        log.info(
            "elicitbot.started",
            listen=self.config.server.listen,
            store="sqlite" if self.store.single_process else "postgresql",
        )

    async def stop(self) -> None:
        self.runtime.draining = True
        await self.scheduler.stop()
        for part in self.parts:
            if part.stop is not None:
                await part.stop()
        self._stop.set()
        self.dispatcher.wake()
        done, pending = await asyncio.wait(self._tasks, timeout=SHUTDOWN_GRACE_SECONDS)
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in done:
            if (exc := task.exception()) is not None:
                log.error("task.failed", task=task.get_name(), error=repr(exc))
        for part in self.parts:
            if part.close is not None:
                await part.close()
        await self.http_client.aclose()
        await self.store.close()
        log.info("elicitbot.stopped", unfinished=len(pending))

    def asgi(self) -> FastAPI:
        app = create_app(self.runtime)

        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            await self.start()
            logs.announce_ready(self.config)  # the event, and the line itself for a person
            try:
                yield
            finally:
                await self.stop()

        app.router.lifespan_context = lifespan
        return app


def _check_startable(config: AppConfig, environ: Mapping[str, str]) -> None:
    """What ``check-config`` checks, the same function: the two can never disagree."""
    problems = preflight(config, environ)
    if problems:
        raise ConfigError("\n".join(problems))


# --------------------------------------------------------------------------- the parts


def _pinework_tokens(config: AppConfig, environ: Mapping[str, str]) -> dict[str, str]:
    return {
        account_key(str(p.base_url), p.workspace): environ[p.token_env]
        for p in config.sources.pinework
    }


def _sources(ctx: Context, bot: Elicitbot) -> list[Part]:
    """Every upstream system: its routes, its answer sink, its poller."""
    config = ctx.config
    tokens = ctx.pinework_tokens
    allowlist = [str(u) for u in config.sources.handup.callback_allowlist]
    webhook = config.sources.superpipeline.answer_webhook
    superpipeline: AnswerSink = SuperPipelineSink(
        str(webhook) if webhook else None, ctx.http_client
    )
    parts: list[Part] = []
    if config.nats is not None:
        parts.append(_nats(ctx, bot))
        # The answer goes to the webhook (when set) and on NATS; both dedupe by the same key.
        publisher = NatsAnswerPublisher(
            config.nats.url, config.sources.superpipeline.answer_subject
        )
        bot.nats_publisher = publisher
        superpipeline = CompositeSink([superpipeline, publisher])
        parts.append(Part("nats-publisher", close=publisher.close))
    engine_webhook = config.sources.engine.answer_webhook  # unset: only read back
    sources = Part(
        "sources",
        sinks={
            "superpipeline": superpipeline,
            "pinework": PineworkSink(ctx.http_client, tokens),
            "handup": HandupSink(ctx.http_client, allowlist),
            "engine": EngineSink(str(engine_webhook) if engine_webhook else None, ctx.http_client),
        },
        routers=[
            superpipeline_router(ctx.elicitations, ctx.authorise, registry=ctx.registry),
            toolshed_router(ctx.elicitations, ctx.authorise, clock=ctx.clock),
            handup_router(
                ctx.elicitations,
                ctx.authorise,
                allowlist,
                clock=ctx.clock,
                default_timeout=config.sources.handup.default_timeout,
            ),
            engine_router(ctx.elicitations, ctx.authorise, clock=ctx.clock),
        ],
    )
    return [sources, *parts, *(_pinework(ctx, p, tokens) for p in config.sources.pinework)]


def _nats(ctx: Context, bot: Elicitbot) -> Part:
    nats = ctx.config.nats
    if nats is None:
        msg = "the NATS part needs [nats]"
        raise ConfigError(msg)
    intake = NatsIntake(nats.url, nats.subjects, nats.durable, ctx.elicitations.intake)
    bot.nats_intake = intake
    return Part(
        "nats",
        tasks={"nats-intake": intake.run},
        ready=lambda: {"nats": intake.connected},
        close=intake.close,
    )


def _pinework(ctx: Context, p: PineworkConfig, tokens: Mapping[str, str]) -> Part:
    poller = PineworkPoller(
        base_url=str(p.base_url),
        workspace=p.workspace,
        poll_seconds=p.poll_seconds,
        client=ctx.http_client,
        elicitations=ctx.elicitations,
        token=tokens[account_key(str(p.base_url), p.workspace)],
        state=ctx.store,
        clock=ctx.clock,
    )
    # One replica polls each account (a lease); it polls until the keeper cancels it.
    keeper = _keeper(ctx, f"pinework:{poller.account}", lambda: poller.run(asyncio.Event()))
    return Part(
        f"pinework:{poller.account}",
        tasks={f"pinework:{poller.account}": keeper.run},
        ready=lambda: {f"pinework:{poller.account}": poller.connected or keeper.standby},
    )


def _web(ctx: Context, identity: IdentityPolicy) -> Part:
    return Part(
        "web",
        routers=[
            inbox_router(
                ctx.elicitations,
                ctx.store,
                identity,
                clock=ctx.clock,
                secure_cookies=ctx.config.server.base_url.startswith("https://"),
            )
        ],
    )


def _slack(ctx: Context, bot: Elicitbot) -> list[Part]:
    config = ctx.config.slack
    if config is None:
        return []
    # No SDK retries: the outbox retries, and the SDK's connection-error retry can post a message
    # twice; a retried post looks for its message first.
    chat = SlackChat(
        AsyncWebClient(
            token=ctx.environ[config.bot_token_env],
            base_url=str(config.api_url),
            retry_handlers=[],
        ),
        pacer=Pacer(),
        # Slack's rates are per channel and per workspace, not per process: on PostgreSQL every
        # replica takes its turn from the store. A SQLite file has one process: the Pacer alone.
        slots=None if ctx.store.single_process else ctx.store,
    )
    # Interactions are recorded in the store before their ack (durable before ack).
    app = build_app(
        chat,
        ctx.elicitations,
        signing_secret=secret(ctx.environ, config.signing_secret_env),
        raw=ctx.store,
        clock=ctx.clock,
    )
    # People by name on every copy ("Answered by Alice"): users.info, cached; without the
    # users:read scope, their ids.
    app.identify = SlackNames(chat.client, clock=ctx.clock).identify
    app_token = ctx.environ[config.app_token_env] if config.app_token_env else None
    socket = SlackSocket(app.app, app_token) if app_token else None
    bot.slack, bot.slack_app, bot.slack_socket = chat, app, socket
    # Socket Mode: one replica holds the connection (a lease): Slack hands each envelope to one
    # open connection, and one on a replica that died would swallow clicks until Slack noticed.
    socket_keeper = (
        _keeper(ctx, socket.lease, lambda: socket.hold(config.app_token_env or "?"))
        if socket is not None and app_token
        else None
    )

    async def prepare() -> None:
        await _verify_slack(chat, config.bot_token_env)
        ctx.learn_identities({f"slack:{i}" for i in (chat.bot_user_id, chat.bot_id) if i})
        if socket is not None and app_token:
            # Every replica checks the app-level token; only the lease holder connects.
            await socket.check_token(config.app_token_env or "?")

    async def stop() -> None:
        if replay_keeper is not None:
            await replay_keeper.stop()
        if socket_keeper is not None:
            await socket_keeper.stop()
        if socket is not None:
            await socket.stop()
        await app.aclose(grace=5.0)

    def ready() -> dict[str, bool]:
        standby = socket_keeper is not None and socket_keeper.standby
        connected = socket is None or socket.connected() or standby
        return {"slack": chat.bot_user_id is not None and connected}

    async def replays(stop_event: asyncio.Event) -> None:
        # What a killed process recorded and never handled: at once on SQLite (one process owns
        # it), after a grace on PostgreSQL (another replica may still be handling it), there by
        # one replica at a time (a lease), so two sweeps never replay one event twice.
        await app.run_replays(stop_event, ours=ctx.store.single_process)

    replay_keeper = (
        None
        if ctx.store.single_process
        else _keeper(ctx, "slack-replay", lambda: app.run_replays(asyncio.Event(), ours=False))
    )

    return [
        Part(
            "slack",
            chats={"slack": chat},
            routers=[] if socket is not None else [slack_router(app.app)],
            tasks={
                "slack-replay": replays if replay_keeper is None else replay_keeper.run,
                **({"slack-socket": socket_keeper.run} if socket_keeper is not None else {}),
            },
            ready=ready,
            prepare=prepare,
            stop=stop,
        )
    ]


def _matrix(ctx: Context, bot: Elicitbot) -> list[Part]:
    m = ctx.config.matrix
    if m is None:
        return []
    lease = f"matrix:{m.user_id}"
    # matrix.pickle_key_env set: end-to-end encryption. The device's crypto state lives in the
    # store and is live only on the lease holder (the listener restores it, snapshots it after
    # each batch, fenced on the lease, and saves it last on stop); prepare checks the key.
    pickle_key = ctx.environ.get(m.pickle_key_env, "") if m.pickle_key_env else None
    chat = matrix_chat(
        str(m.homeserver),
        m.user_id,
        m.device_id,
        ctx.environ[m.access_token_env],
        pickle_key=pickle_key,
        states=ctx.store,
        clock=ctx.clock,
        fence=lease_fence(ctx.store, lease, ctx.owner, ctx.clock),
        lease=(lease, ctx.owner),  # the LeaseKeeper's (name, holder) below: saves fenced on it
    )
    listener = MatrixListener(chat, ctx.elicitations, ctx.store, device_id=m.device_id)
    bot.matrix_chat, bot.matrix = chat, listener
    # One replica syncs the account (a lease: it moves within 15 s of its holder's death); every
    # replica posts (to an encrypted room only the holder can). The token check (prepare) runs
    # on each, so a bad token stops any start.
    keeper = _keeper(ctx, lease, listener.run)

    async def prepare() -> None:
        if m.pickle_key_env:
            pickle_key_from_env(ctx.environ, m.pickle_key_env)  # names the key if unusable
        await listener.connect()

    async def stop() -> None:
        await keeper.stop()
        await listener.stop()

    async def close() -> None:
        await chat.client.close()

    return [
        Part(
            "matrix",
            chats={"matrix": chat},
            tasks={f"matrix:{m.user_id}": keeper.run},
            ready=lambda: {"matrix": listener.ready or keeper.standby},
            prepare=prepare,
            stop=stop,
            close=close,
        )
    ]


def _keeper(ctx: Context, name: str, work: Callable[[], Awaitable[None]]) -> LeaseKeeper:
    """Single-owner work: run only by the replica holding lease ``name`` (see bot.lease)."""
    return LeaseKeeper(ctx.store, name, work, clock=ctx.clock, holder=ctx.owner)


async def _verify_slack(slack: SlackChat, env: str) -> None:
    """``auth.test`` at start, never lazily: a refused token stops the start, named."""
    try:
        await slack.verify()
    except PermanentDeliveryError as exc:
        raise ConfigError(
            f"slack.bot_token_env: Slack refused the token in {env} ({exc})"
        ) from None
    except DeliveryError as exc:
        raise ConfigError(f"slack.api_url: Slack did not answer auth.test ({exc})") from None


async def serve(config: AppConfig, environ: Mapping[str, str] | None = None) -> None:
    bot = Elicitbot(config, environ)
    # Before listening, so a refused token is a config error (exit 1), not a failed startup.
    await bot.prepare()
    server = uvicorn.Server(
        uvicorn.Config(
            bot.asgi(),
            host=config.server.host,
            port=config.server.port,
            log_config=None,
            lifespan="on",
            # The client stays the socket's peer: the web inbox believes a user header only
            # from a trusted proxy's own address, which uvicorn's X-Forwarded-For would replace.
            proxy_headers=False,
            timeout_graceful_shutdown=int(SHUTDOWN_GRACE_SECONDS),
        )
    )
    # uvicorn re-raises a captured SIGTERM after its graceful shutdown (to the handler it found at
    # start); a quiet handler there lets `serve` return, so a SIGTERM ends with exit status 0.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: None)
    # Everything built so far lives as long as the process: out of the collector's sight, a full
    # collection walks only what requests make (about 120 ms less per pass; bench/README.md).
    gc.collect()
    gc.freeze()
    await server.serve()

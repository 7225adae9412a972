"""The composition root: the only module that sees bot, adapters and store together."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import structlog
import uvicorn
from fastapi import FastAPI, Request, Response
from slack_sdk.web.async_client import AsyncWebClient

from adapters.matrix import MatrixChat, MatrixListener, make_client
from adapters.problem import problem
from adapters.slack.app import SlackInteractivity, build_app
from adapters.slack.chat import SlackChat
from adapters.slack.pacing import Pacer
from adapters.slack.routes import slack_router
from adapters.slack.socket import SlackSocket
from adapters.sources.engine import engine_router
from adapters.sources.handup import HandupSink, handup_router
from adapters.sources.pinework import (
    PineworkPoller,
    PineworkSecretSink,
    PineworkSink,
    account_key,
)
from adapters.sources.superpipeline.nats import CompositeSink, NatsAnswerPublisher, NatsIntake
from adapters.sources.superpipeline.sink import SuperPipelineSink
from adapters.sources.toolshed import toolshed_router
from adapters.web.chat import WebChat
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from bot import logs
from bot.clock import SystemClock
from bot.config import AppConfig, check_environment, is_loopback, secret
from bot.domain.errors import ConfigError, DeliveryError, PermanentDeliveryError
from bot.domain.model import People
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, Elicitations
from bot.http import Runtime, authorised, create_app
from bot.outbox import Dispatcher
from bot.scheduler import Scheduler
from bot.service import Service
from bot.timekeeper import Timekeeper
from store.db import upgrade
from store.sql import SqlStore

log = structlog.get_logger("elicitbot")
SHUTDOWN_GRACE_SECONDS = 10.0


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
        problems = check_environment(config, self.environ)
        if problems:
            raise ConfigError("\n".join(problems))
        if config.server.intake_token_env is None and not is_loopback(config.server.host):
            raise ConfigError(
                "server.intake_token_env: required when server.listen is not a loopback address"
            )
        logs.register_secrets(self.environ.get(env) for env in config.secret_envs().values())
        self.clock: Clock = clock or SystemClock()
        self.store = SqlStore.from_url(config.store.url)
        self.http_client = httpx.AsyncClient()
        self._build_chats()
        self.pinework_tokens = {
            account_key(str(p.base_url), p.workspace): self.environ[p.token_env]
            for p in config.sources.pinework
        }
        allowlist = [str(u) for u in config.sources.handup.callback_allowlist]
        self._build_sinks(allowlist)
        base = config.server.base_url
        self.dispatcher = Dispatcher(
            self.store, self.clock, self.chats, self.sinks, lambda key: f"{base}/#{key}"
        )
        self.web_identity = IdentityPolicy.from_config(
            listen_host=config.server.host,
            user_header=config.web.user_header,
            admins=config.web.admins,
        )
        people = self._people()
        self.service = Service(
            self.store,
            self.clock,
            people,
            config.route_list(),
            on_change=self.dispatcher.wake,
            link_for=lambda key: f"{base}/#{key}",
            secret_sinks={"pinework": PineworkSecretSink(self.http_client, self.pinework_tokens)},
            claim_minutes=config.deadlines.claim_minutes,
        )
        self.timekeeper = Timekeeper(self.store, self.clock, people, on_change=self.dispatcher.wake)
        self.scheduler = Scheduler(self.timekeeper, sweep_seconds=config.deadlines.sweep_seconds)
        self.elicitations: Elicitations = self.service  # mypy checks Service against the port
        self.matrix: MatrixListener | None = None
        if self.matrix_chat is not None and config.matrix is not None:
            self.matrix = MatrixListener(
                self.matrix_chat, self.service, self.store, device_id=config.matrix.device_id
            )
        self.runtime = Runtime(
            store=self.store,
            service=self.service,
            intake_token=secret(self.environ, config.server.intake_token_env),
        )
        self.slack_app: SlackInteractivity | None = None
        self.slack_socket: SlackSocket | None = None
        if self.slack is not None and config.slack is not None:
            self.slack_app = build_app(
                self.slack,
                self.elicitations,
                signing_secret=secret(self.environ, config.slack.signing_secret_env),
            )
            if config.slack.app_token_env:
                self.slack_socket = SlackSocket(
                    self.slack_app.app, self.environ[config.slack.app_token_env]
                )
            else:
                self.runtime.routers.append(slack_router(self.slack_app.app))
        self.nats_intake: NatsIntake | None = None
        if config.nats is not None:
            self.nats_intake = NatsIntake(
                config.nats.url, config.nats.subjects, config.nats.durable, self.service.intake
            )
        self.pinework_pollers = [
            PineworkPoller(
                base_url=str(p.base_url),
                workspace=p.workspace,
                poll_seconds=p.poll_seconds,
                client=self.http_client,
                elicitations=self.service,
                token=self.environ[p.token_env],
                state=self.store,
                clock=self.clock,
            )
            for p in config.sources.pinework
        ]
        self.runtime.adapters_ready = self.adapters_ready
        self.runtime.routers += [
            inbox_router(
                self.service,
                self.store,
                self.web_identity,
                clock=self.clock,
                secure_cookies=base.startswith("https://"),
            ),
            toolshed_router(self.elicitations, self.authorise, clock=self.clock),
            handup_router(self.elicitations, self.authorise, allowlist, clock=self.clock),
            engine_router(self.elicitations, self.authorise, clock=self.clock),
        ]
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._prepared = False

    def _build_chats(self) -> None:
        config = self.config
        self.chats: dict[str, ChatAdapter] = {"web": WebChat()}
        self.slack: SlackChat | None = None
        if config.slack is not None:
            # No SDK retries: the outbox retries, and the SDK's connection-error retry can post a
            # message twice (reliability.md §1.5); a retried post looks for its message first.
            self.slack = SlackChat(
                AsyncWebClient(
                    token=self.environ[config.slack.bot_token_env],
                    base_url=str(config.slack.api_url),
                    retry_handlers=[],
                ),
                pacer=Pacer(),
            )
            self.chats["slack"] = self.slack
        self.matrix_chat: MatrixChat | None = None
        if config.matrix is not None:
            m = config.matrix
            self.matrix_chat = MatrixChat(
                make_client(
                    str(m.homeserver), m.user_id, m.device_id, self.environ[m.access_token_env]
                )
            )
            self.chats["matrix"] = self.matrix_chat

    def _build_sinks(self, allowlist: list[str]) -> None:
        """Where each source's outcome goes back (by elicitation source)."""
        config = self.config
        superpipeline: AnswerSink = SuperPipelineSink(
            str(config.sources.superpipeline.answer_webhook)
            if config.sources.superpipeline.answer_webhook
            else None,
            self.http_client,
        )
        self.nats_publisher: NatsAnswerPublisher | None = None
        if config.nats is not None:
            # The answer goes to the webhook (when set) and on NATS; both dedupe by the same key.
            self.nats_publisher = NatsAnswerPublisher(
                config.nats.url, config.sources.superpipeline.answer_subject
            )
            superpipeline = CompositeSink([superpipeline, self.nats_publisher])
        self.sinks: dict[str, AnswerSink] = {
            "superpipeline": superpipeline,
            "pinework": PineworkSink(self.http_client, self.pinework_tokens),
            "handup": HandupSink(self.http_client, allowlist),
        }

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

    def adapters_ready(self) -> dict[str, bool]:
        """For /readyz: each configured adapter and whether it is connected."""
        ready: dict[str, bool] = {}
        if self.slack is not None:
            ready["slack"] = self.slack.bot_user_id is not None and (
                self.slack_socket is None or self.slack_socket.connected()
            )
        if self.nats_intake is not None:
            ready["nats"] = self.nats_intake.connected
        if self.matrix is not None:
            ready["matrix"] = self.matrix.ready
        for poller in self.pinework_pollers:
            ready[f"pinework:{poller.account}"] = poller.connected
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
        if self.slack is not None:
            await self._verify_slack(self.slack)
            own = {f"slack:{i}" for i in (self.slack.bot_user_id, self.slack.bot_id) if i}
            self.service.people = self.service.people.model_copy(
                update={"bot_identities": self.service.people.bot_identities | own}
            )
            if self.slack_socket is not None:
                await self._start_socket(self.slack_socket)
        if self.matrix is not None:
            await self.matrix.connect()
        self._prepared = True

    async def start(self) -> None:
        await self.prepare()
        if self.store.dialect == "sqlite":
            # One process owns a SQLite file: claims left by a killed predecessor are ours again.
            released = await self.store.release_claims()
            if released:
                log.info("outbox.released", rows=released)
        self._tasks.append(asyncio.create_task(self.dispatcher.run(self._stop), name="outbox"))
        await self.scheduler.start()
        if self.matrix is not None:
            await self.matrix.start()
        for poller in self.pinework_pollers:
            self._tasks.append(
                asyncio.create_task(poller.run(self._stop), name=f"pinework:{poller.account}")
            )
        if self.nats_intake is not None:
            self._tasks.append(
                asyncio.create_task(self.nats_intake.run(self._stop), name="nats-intake")
            )
        log.info("elicitbot.started", listen=self.config.server.listen, store=self.store.dialect)

    async def _verify_slack(self, slack: SlackChat) -> None:
        """``auth.test`` at start, never lazily: a refused token stops the start, named."""
        env = self.config.slack.bot_token_env if self.config.slack else "?"
        try:
            await slack.verify()
        except PermanentDeliveryError as exc:
            raise ConfigError(
                f"slack.bot_token_env: Slack refused the token in {env} ({exc})"
            ) from None
        except DeliveryError as exc:
            raise ConfigError(f"slack.api_url: Slack did not answer auth.test ({exc})") from None

    async def _start_socket(self, socket: SlackSocket) -> None:
        env = self.config.slack.app_token_env if self.config.slack else "?"
        try:
            await socket.start()
        except PermanentDeliveryError as exc:
            raise ConfigError(
                f"slack.app_token_env: Slack refused the app-level token in {env} ({exc})"
            ) from None
        except DeliveryError as exc:
            raise ConfigError(f"slack.api_url: Socket Mode did not connect ({exc})") from None

    async def stop(self) -> None:
        self.runtime.draining = True
        await self.scheduler.stop()
        if self.slack_socket is not None:
            await self.slack_socket.stop()
        if self.slack_app is not None:
            await self.slack_app.aclose(grace=5.0)
        if self.matrix is not None:
            await self.matrix.stop()
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
        if self.nats_intake is not None:
            await self.nats_intake.close()
        if self.nats_publisher is not None:
            await self.nats_publisher.close()
        if self.matrix_chat is not None:
            await self.matrix_chat.client.close()
        await self.http_client.aclose()
        await self.store.close()
        log.info("elicitbot.stopped", unfinished=len(pending))

    def asgi(self) -> FastAPI:
        app = create_app(self.runtime)

        @asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            await self.start()
            try:
                yield
            finally:
                await self.stop()

        app.router.lifespan_context = lifespan
        return app


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
            timeout_graceful_shutdown=int(SHUTDOWN_GRACE_SECONDS),
        )
    )
    # uvicorn re-raises a captured SIGTERM after its graceful shutdown (to the handler it found at
    # start); a quiet handler there lets `serve` return, so a SIGTERM ends with exit status 0.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: None)
    await server.serve()

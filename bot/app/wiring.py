"""The composition root's assembly: ``Elicitbot`` builds every part, then what carries them out.
Each optional part comes from a small factory (``bot.app.sources``, ``bot.app.surfaces``), so the
constructor reads as a list; the dispatcher is built last, from the final chats and sinks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import structlog
import uvicorn
from fastapi import FastAPI, Request, Response
from prometheus_client.registry import CollectorRegistry

from adapters.web.identity import IdentityPolicy
from bot.app import logs, sources, surfaces
from bot.app.config import AppConfig, check_startable, secret
from bot.app.http import Runtime, authorised, create_app, problem
from bot.app.parts import Context, Part, Views
from bot.clock import SystemClock
from bot.domain.model import People
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, Elicitations
from bot.domain.store import Store
from bot.lease import owner_id
from bot.outbox import Dispatcher
from bot.scheduler import Scheduler
from bot.service import Service
from bot.timekeeper import Timekeeper
from store.db import upgrade
from store.sql import SqlStore

log = structlog.get_logger("elicitbot")
SHUTDOWN_GRACE_SECONDS = 10.0


class Elicitbot(Views):
    """Everything ``serve`` runs, started and stopped by the HTTP server's lifespan."""

    def __init__(
        self,
        config: AppConfig,
        environ: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.environ = dict(os.environ if environ is None else environ)
        check_startable(config, self.environ)
        logs.register_secrets(self.environ.get(env) for env in config.secret_envs().values())
        self.clock: Clock = clock or SystemClock()
        self.store: Store = SqlStore.from_url(config.store.url)
        self.http_client = httpx.AsyncClient()
        base = config.server.base_url
        link_for: Callable[[str], str] = lambda key: f"{base}/#{key}"  # noqa: E731
        self.web_identity = IdentityPolicy.from_config(
            listen_host=config.server.host,
            user_header=config.web.user_header,
            admins=config.web.admins,
            trusts=config.server.trusts,
            groups_header=config.web.groups_header,
        )
        self.registry = CollectorRegistry()
        """What ``/metrics`` serves (the runtime's); the dispatcher counts refused write-backs."""
        self.owner = owner_id()
        """This replica's identity: its outbox claims and its single-owner leases."""
        # New outbox rows wake the dispatcher: the service and the timekeeper set this event,
        # the dispatcher (built last, once every chat is known) waits on it.
        changed = asyncio.Event()
        tokens = sources.pinework_tokens(config, self.environ)
        self.service = Service(
            self.store,
            self.clock,
            self._people(),
            config.route_list(),
            on_change=changed.set,
            link_for=link_for,
            secret_sinks=sources.secret_sinks(self.http_client, tokens),
            claim_minutes=config.deadlines.claim_minutes,
            web_groups=config.web.groups_header is not None,
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
            views=self,
            owner=self.owner,
            registry=self.registry,
            pinework_tokens=tokens,
        )
        self.parts: list[Part] = [
            *sources.parts(context),
            surfaces.web(context, self.web_identity),
            *surfaces.slack(context),
            *surfaces.matrix(context),
        ]
        # Every part is built: the dispatcher gets the final chats and sinks (it decides from
        # the chats which lanes' posts go out as a chain).
        self.chats: Mapping[str, ChatAdapter] = {
            k: v for part in self.parts for k, v in part.chats.items()
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
            # Copies say where approving counts (a route's approve_on) and who may still approve
            # (its approvers), from the route the service judges by.
            policy=self.service.copy_policy,
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
        # Copies drawn under config routes whose policy changed since the last start (once).
        redrawn = await self.service.redraw_at_start()
        if redrawn:
            log.info("copies.redrawn_at_start", elicitations=redrawn)
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

"""The upstream systems' parts: each source's routes and answer sink, NATS, each Pinework poller."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import httpx
from fastapi import APIRouter

from adapters.sources.engine import EngineSink, engine_router
from adapters.sources.handup import HandupSink, handup_router
from adapters.sources.mcp import mcp_part
from adapters.sources.mcp.config import McpConfig
from adapters.sources.pinework import PineworkPoller, PineworkSecretSink, PineworkSink, account_key
from adapters.sources.pinework.config import PineworkConfig
from adapters.sources.superpipeline import superpipeline_router
from adapters.sources.superpipeline.config import NatsConfig
from adapters.sources.superpipeline.nats import CompositeSink, NatsAnswerPublisher, NatsIntake
from adapters.sources.superpipeline.sink import SuperPipelineSink
from adapters.sources.toolshed import toolshed_router
from bot.app.config import AppConfig
from bot.app.parts import Context, Part, lease_keeper
from bot.domain.ports import AnswerSink, SecretSink


def pinework_tokens(config: AppConfig, environ: Mapping[str, str]) -> dict[str, str]:
    return {
        account_key(str(p.base_url), p.workspace): environ[p.token_env]
        for p in config.sources.pinework
    }


def secret_sinks(client: httpx.AsyncClient, tokens: Mapping[str, str]) -> dict[str, SecretSink]:
    """Where a secret answer goes at once (never through the outbox): Pinework's secret route."""
    return {"pinework": PineworkSecretSink(client, tokens)}


def parts(ctx: Context) -> list[Part]:
    """Every upstream system: its routes, its answer sink, its poller."""
    config = ctx.config
    tokens = ctx.pinework_tokens
    allowlist = [str(u) for u in config.sources.handup.callback_allowlist]
    webhook = config.sources.superpipeline.answer_webhook
    superpipeline: AnswerSink = SuperPipelineSink(
        str(webhook) if webhook else None, ctx.http_client
    )
    nats: list[Part] = []
    if config.nats is not None:
        nats.append(_nats(ctx, config.nats))
        # The answer goes to the webhook (when set) and on NATS; both dedupe by the same key.
        publisher = NatsAnswerPublisher(
            config.nats.url, config.sources.superpipeline.answer_subject
        )
        ctx.views.nats_publisher = publisher
        superpipeline = CompositeSink([superpipeline, publisher])
        nats.append(Part("nats-publisher", close=publisher.close))
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
            engine_router(
                ctx.elicitations,
                ctx.authorise,
                clock=ctx.clock,
                # A destination on a platform this deployment does not run: 422 before storing.
                platforms=[p for p in ("slack", "matrix") if getattr(config, p) is not None],
            ),
        ],
    )
    mcp = [_mcp(ctx, config.mcp)] if config.mcp is not None else []
    return [sources, *nats, *mcp, *(_pinework(ctx, p) for p in config.sources.pinework)]


def _mcp(ctx: Context, mcp: McpConfig) -> Part:
    """The MCP server at ``/mcp``: its session manager runs from start to close (the HTTP app's
    lifespan, one task); at stop its waiting calls answer "pending" at once."""
    part = mcp_part(mcp, ctx.environ, ctx.elicitations, ctx.clock)
    router = APIRouter()
    router.routes.append(part.route)
    running = contextlib.AsyncExitStack()

    async def start() -> None:
        await running.enter_async_context(part.lifespan())

    async def stop() -> None:
        part.shutdown()

    return Part(
        "mcp",
        routers=[router],
        ready=lambda: {"mcp": part.ready() is None},
        start=start,
        stop=stop,
        close=running.aclose,
    )


def _nats(ctx: Context, nats: NatsConfig) -> Part:
    intake = NatsIntake(nats.url, nats.subjects, nats.durable, ctx.elicitations.intake)
    ctx.views.nats_intake = intake
    return Part(
        "nats",
        tasks={"nats-intake": intake.run},
        ready=lambda: {"nats": intake.connected},
        close=intake.close,
    )


def _pinework(ctx: Context, p: PineworkConfig) -> Part:
    poller = PineworkPoller(
        base_url=str(p.base_url),
        workspace=p.workspace,
        poll_seconds=p.poll_seconds,
        client=ctx.http_client,
        elicitations=ctx.elicitations,
        token=ctx.pinework_tokens[account_key(str(p.base_url), p.workspace)],
        state=ctx.store,
        clock=ctx.clock,
    )
    # One replica polls each account (a lease); it polls until the keeper cancels it.
    keeper = lease_keeper(ctx, f"pinework:{poller.account}", lambda: poller.run(asyncio.Event()))
    return Part(
        f"pinework:{poller.account}",
        tasks={f"pinework:{poller.account}": keeper.run},
        ready=lambda: {f"pinework:{poller.account}": poller.connected or keeper.standby},
    )

"""The MCP server under uvicorn on a free 127.0.0.1 port, with a real Service on SQLite; the SDK's
own client over real HTTP. Shared by the MCP tests."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import uvicorn
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adapters.sources.mcp import McpConfig, McpPart, mcp_part
from bot.domain.model import People, Route, RouteMatch
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock

TOKENS = {"CI_TOKEN": "tok-ci-5e1f0a", "OTHER_TOKEN": "tok-other-77c2"}
AGENTS = {
    "ci-agent": {"token_env": "CI_TOKEN", "destinations": ["web", "slack:C0APPROVALS"]},
    "other": {"token_env": "OTHER_TOKEN"},
}
ROUTES = [Route(match=RouteMatch(source="mcp", workspace="acme"), destinations=("slack:C0ACME",))]
LEGACY = "legacy"
MODERN = "2026-07-28"
MODES = (LEGACY, MODERN)


@dataclass
class Rig:
    url: str
    store: SqlStore
    clock: FakeClock
    service: Service
    part: McpPart

    def client(self, token: str = TOKENS["CI_TOKEN"], mode: str = LEGACY, **kw: Any) -> Client:
        return Client(transport(self.url, token), mode=mode, **kw)


def transport(url: str, token: str) -> AbstractAsyncContextManager[Any]:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(30, read=300),
    )
    return streamable_http_client(url, http_client=http)


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free port of 127.0.0.1 (its lifespan runs); yields its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def http_app(part: McpPart) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with part.lifespan():
            yield
        part.shutdown()

    app = FastAPI(lifespan=lifespan)
    app.router.routes.append(part.route)
    return app


@asynccontextmanager
async def rig(
    sqlite_url: str, *, wait_seconds: float = 5, people: People | None = None
) -> AsyncIterator[Rig]:
    store = SqlStore.from_url(sqlite_url)
    clock = FakeClock()
    service = Service(store, clock, people or People(), ROUTES)
    config = McpConfig.model_validate({"wait_seconds": wait_seconds, "agents": AGENTS})
    ids = itertools.count(1)
    part = mcp_part(
        config, TOKENS, service, clock, new_id=lambda: f"q{next(ids)}", poll_seconds=0.1
    )
    try:
        async with serving(http_app(part)) as base:
            yield Rig(f"{base}/mcp", store, clock, service, part)
    finally:
        await store.close()

"""``serve`` start compares the config routes with those it last served: a question waiting
under a route whose policy changed in between is redrawn once (an in-process Elicitbot, the real
HTTP intake, SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from bot.app.config import AppConfig, RouteConfig, StoreConfig
from bot.app.wiring import Elicitbot
from bot.redraws import CONFIG_ROUTES
from store.sql import SqlStore
from tests.integration.test_cli import STRUCTURED, event


async def test_a_restart_with_a_changed_config_policy_redraws_the_waiting_question(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'redraw.db'}"
    everywhere = AppConfig(store=StoreConfig(url=url))
    bot = Elicitbot(everywhere, environ={})
    await bot.start()
    try:
        transport = httpx.ASGITransport(app=bot.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.post(
                "/v1/events", content=json.dumps(event()), headers={"Content-Type": STRUCTURED}
            )
            assert response.status_code == 202, response.text
            key = response.json()["elicitation"]
    finally:
        await bot.stop()

    async def redraws() -> list[object]:
        store = SqlStore.from_url(url)
        try:
            assert await store.get_value(CONFIG_ROUTES) is not None
            return [a.detail for a in await store.audit(key) if a.action == "redraw"]
        finally:
            await store.close()

    assert await redraws() == []  # the first start: no route had approve_on

    web_only = AppConfig(store=StoreConfig(url=url), routes=(RouteConfig(approve_on=("web",)),))
    for config in (web_only, web_only):  # changed, then unchanged: one redraw
        bot = Elicitbot(config, environ={})
        await bot.start()
        await bot.stop()
    assert await redraws() == [{"why": "config routes changed"}]

"""``elicitbot mcp-proxy`` end to end: the SDK's stdio client starts the proxy, the proxy starts a
small MCP server that elicits a form mid-tool-call, and the proxy asks elicitbot (the in-test
uvicorn app) for it; a person's answer goes back to the server as ``accept`` with the content."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Answer, Attempt, ElicitationKey, Identity
from tests.integration.mcp import LEGACY, MODERN, TOKENS, Rig, rig

pytestmark = pytest.mark.slow  # generated requests / whole processes: the second tier

HERE = Path(__file__).parent
REPO = HERE.parents[2]
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


@asynccontextmanager
async def proxied(r: Rig, mode: str = LEGACY, upstream: str = LEGACY) -> AsyncIterator[Client]:
    """``elicitbot mcp-proxy`` itself (the CLI, as a host runs it) in front of the test's server,
    asking through the rig's ``/mcp`` as the agent ``ci-agent``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "proxy.toml"
        config.write_text(
            f'[server]\npublic_url = "{r.url.removesuffix("/mcp")}"\n\n'
            '[mcp.agents.ci-agent]\ntoken_env = "ELICITBOT_MCP_TOKEN"\n',
            encoding="utf-8",
        )
        env = {**os.environ, "ELICITBOT_MCP_TOKEN": TOKENS["CI_TOKEN"], "PYTHONPATH": str(REPO)}
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                *("-m", "bot", "mcp-proxy", "-c", str(config), "--upstream-mode", upstream),
                *("--", sys.executable, str(HERE / "elicit_server.py")),
            ],
            env=env,
            cwd=str(REPO),
        )
        async with Client(params, mode=mode) as client:
            yield client


Q1 = ElicitationKey("mcp:q1")


async def asked(r: Rig, key: ElicitationKey = Q1) -> Any:
    for _ in range(500):
        view = await r.service.view(key)
        if view is not None:
            return view
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key} never asked")


def text_of(result: Any) -> str:
    assert not result.is_error, result.content
    return str(result.content[0].text)


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_a_form_elicitation_is_answered_by_a_person_through_elicitbot(
    sqlite_url: str, mode: str
) -> None:
    async with rig(sqlite_url, wait_seconds=1) as r, proxied(r, mode) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {
            "deploy",
            "wipe",
            "login",
            "scale",
        }
        seen: list[tuple[float, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, message))

        call = asyncio.create_task(
            client.call_tool("deploy", {"service": "api"}, progress_callback=on_progress)
        )
        view = await asked(r)
        await asyncio.sleep(1.5)  # a get_answer round or two: their progress is relayed
        e = view.elicitation
        assert e.asker == "mcp:ci-agent"
        assert e.question == "Deploy settings for api?"
        assert [q.id for q in e.form] == ["replicas", "canary", "note"]
        answers = {
            "replicas": {"selected": [], "text": "3"},
            "canary": {"selected": ["Yes"], "text": None},
            "note": {"selected": ["(leave empty)"], "text": None},
        }
        given = await r.service.answer(
            e.key, Attempt(respondent=ALICE, via="web", fields={"answers": answers})
        )
        assert isinstance(given.result, Answer)
        out = text_of(await asyncio.wait_for(call, 30))
        assert out == "accept: {'replicas': 3, 'canary': True, 'note': None}"
        assert seen
        assert all((m or "").startswith("elicitbot: Waiting for a person") for _, m in seen)
        values = [p for p, _ in seen]
        assert values == sorted(set(values))  # increasing, as the spec wants


async def test_a_declined_confirmation_is_decline_and_a_cancelled_question_is_cancel(
    sqlite_url: str,
) -> None:
    async with rig(sqlite_url, wait_seconds=1) as r, proxied(r) as client:
        call = asyncio.create_task(client.call_tool("wipe", {}))
        view = await asked(r)
        assert [o.id for o in view.elicitation.options] == ["accept", "decline"]
        declined = await r.service.answer(
            view.elicitation.key,
            Attempt(respondent=ALICE, option_ids=("decline",), via="web", shown=SHOWN_WHOLE),
        )
        assert isinstance(declined.result, Answer)
        assert text_of(await asyncio.wait_for(call, 30)) == "decline"

        call = asyncio.create_task(client.call_tool("deploy", {"service": "db"}))
        await asked(r, ElicitationKey("mcp:q2"))
        async with r.client() as agent:  # the agent withdraws the question at /mcp
            assert (await agent.call_tool("cancel", {"id": "q2"})).structured_content["status"] == (
                "cancelled"
            )
        assert text_of(await asyncio.wait_for(call, 30)) == "cancel: None"


async def test_resources_and_prompts_pass_through(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=1) as r, proxied(r) as client:
        read = await client.read_resource("memo://motd")
        assert read.contents[0].text == "deploys are frozen on Fridays"  # type: ignore[union-attr]
        prompts = await client.list_prompts()
        assert [p.name for p in prompts.prompts] == ["release_notes"]
        prompt = await client.get_prompt("release_notes", {"version": "2.4"})
        assert "2.4" in prompt.messages[0].content.text  # type: ignore[union-attr]


async def test_a_url_elicitation_with_no_one_person_to_send_it_to_is_cancelled(
    sqlite_url: str,
) -> None:
    """A link to open goes to one person only, as a direct message: this agent's destinations
    are a channel and the inbox, so nothing is asked, and the server hears ``cancel``."""
    async with rig(sqlite_url, wait_seconds=1) as r, proxied(r) as client:
        assert text_of(await asyncio.wait_for(client.call_tool("login", {}), 30)) == "cancel"
        assert await r.service.view(ElicitationKey("mcp:q1")) is None, "nothing was posted anywhere"


@pytest.mark.parametrize("upstream", [LEGACY, MODERN, "auto"])
async def test_an_upstream_on_either_protocol_version_is_answered(
    sqlite_url: str, upstream: str
) -> None:
    """2025-11-25: the server sends elicitation/create mid-call; 2026-07-28: the call returns
    input_required and is retried with the answer. The proxy answers both the same way."""
    async with rig(sqlite_url, wait_seconds=1) as r, proxied(r, upstream=upstream) as client:
        call = asyncio.create_task(client.call_tool("scale", {"service": "api"}))
        view = await asked(r)
        assert view.elicitation.question == "How far should api scale?"
        given = await r.service.answer(
            view.elicitation.key, Attempt(respondent=ALICE, text="4", via="web")
        )
        assert isinstance(given.result, Answer)
        assert text_of(await asyncio.wait_for(call, 30)) == "accept: {'replicas': 4}"

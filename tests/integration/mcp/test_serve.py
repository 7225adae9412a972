"""The MCP tools in ``elicitbot serve`` (the process, its composition root), answered from Slack.

The SDK's own client asks over real HTTP at ``/mcp``; the question is posted to the fake Slack
Web API; a person's signed click on ``/slack/events`` answers it:

- an ``ask`` answered while it waits returns the answer in its tool result;
- an ``ask`` nobody answers in ``mcp.wait_seconds`` returns ``pending``; the server is killed
  with SIGKILL; after a restart the click on the same message answers, and ``get_answer`` (a new
  session, as after a client's time-out) returns the answer: nothing was lost.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.integration.slack.rig import block_actions_of, sign
from tests.integration.test_crash import Server, free_port, poll
from tests.slack_fake import FakeSlack

pytestmark = pytest.mark.slow

CHANNEL = "C0APPROVALS"
ALICE = "U0ALICE"
OPS = "U0OPS"
LOGIN = "https://registry.example.org/login?session=7f3a&next=%2Fdeploy"
SECRET = "mcp-serve-signing-secret"
ENV = {
    "SLACK_BOT_TOKEN": "xoxb-mcp-serve-token",
    "SLACK_SIGNING_SECRET": SECRET,
    "MCP_TOKEN_CI": "tok-ci-mcp-serve-9d1e",
}
OPTIONS = [
    {"id": "ship", "label": "Ship it", "meaning": "approve"},
    {"id": "hold", "label": "Hold", "meaning": "reject"},
]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Server, FakeSlack]]:
    port = free_port()
    with FakeSlack(ENV["SLACK_BOT_TOKEN"]) as slack:
        config = tmp_path / "cfg.toml"
        config.write_text(
            f'[server]\nlisten = "127.0.0.1:{port}"\n\n'
            f'[store]\nurl = "sqlite:///{tmp_path / "elicitbot.db"}"\n\n'
            '[slack]\nbot_token_env = "SLACK_BOT_TOKEN"\n'
            'signing_secret_env = "SLACK_SIGNING_SECRET"\n'
            f'api_url = "{slack.api_url}"\n\n'
            "[mcp]\nwait_seconds = 4\n"
            "[mcp.agents.ci-agent]\n"
            'token_env = "MCP_TOKEN_CI"\n'
            f'destinations = ["slack:{CHANNEL}", "slack:{OPS}"]\n',
            encoding="utf-8",
        )
        server = Server(tmp_path, config, port, ENV)
        try:
            yield server, slack
        finally:
            server.kill()


def client(server: Server) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {ENV['MCP_TOKEN_CI']}"},
        timeout=httpx2.Timeout(30, read=60),
    )
    return Client(streamable_http_client(f"{server.base}/mcp", http_client=http))


def result_of(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def posted(slack: FakeSlack, question: str) -> dict[str, Any]:
    """The Slack message that carries ``question`` (once the dispatcher posted it)."""

    async def find() -> dict[str, Any] | None:
        for message in slack.messages(CHANNEL):
            if question in json.dumps(message.get("blocks", [])):
                return message
        return None

    return await poll(find, within=20, what=f"the Slack post of {question!r}")


async def click(server: Server, message: dict[str, Any], option: str) -> None:
    """A person's signed click on the option's button, as Slack sends it to HTTP mode."""
    [button] = [
        e
        for block in message["blocks"]
        if block.get("type") == "actions"
        for e in block["elements"]
        if json.loads(e.get("value") or "{}").get("o") == option
    ]
    payload = {
        **block_actions_of(ALICE),
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": CHANNEL},
        "trigger_id": f"{time.time_ns()}.738474920.{option}",  # Slack's, new per click
        "channel": {"id": CHANNEL, "name": "approvals"},
        "message": message,
        "state": {"values": {}},
        "response_url": f"{server.base}/no-response-url",
        "actions": [{**button, "action_ts": f"{time.time():.6f}"}],
    }
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time()))
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{server.base}/slack/events",
            content=body.encode(),
            headers={
                "content-type": "application/x-www-form-urlencoded",
                "x-slack-request-timestamp": stamp,
                "x-slack-signature": sign(SECRET, stamp, body),
            },
        )
    assert response.status_code == 200, response.text


async def test_ask_in_serve_is_answered_from_slack_and_survives_a_kill_9(
    served: tuple[Server, FakeSlack],
) -> None:
    server, slack = served
    server.start()
    async with httpx.AsyncClient() as http:
        await server.wait_healthy(http)

    # Answered while the tool call waits.
    async with client(server) as agent:
        call = asyncio.create_task(
            agent.call_tool(
                "ask",
                {
                    "question": "Ship release 4.2?",
                    "options": OPTIONS,
                    "destinations": [f"slack:{CHANNEL}"],
                },
            )
        )
        await click(server, await posted(slack, "Ship release 4.2?"), "ship")
        answered = result_of(await asyncio.wait_for(call, 20))
    assert answered["status"] == "answered", answered
    assert answered["answer"]["option_ids"] == ["ship"]
    assert answered["answer"]["by"] == f"slack:{ALICE}"

    # Unanswered within wait_seconds: pending, with the id to ask again.
    async with client(server) as agent:
        pending = result_of(
            await agent.call_tool(
                "ask",
                {
                    "question": "Drop table audit_old?",
                    "options": OPTIONS,
                    "destinations": [f"slack:{CHANNEL}"],
                },
            )
        )
    assert pending["status"] == "pending", pending
    assert pending["answer"] is None
    message = await posted(slack, "Drop table audit_old?")

    server.kill()  # SIGKILL between the ask and the click
    server.start()
    async with httpx.AsyncClient() as http:
        await server.wait_healthy(http)
    await click(server, message, "hold")

    async with client(server) as agent:
        later = result_of(
            await agent.call_tool("get_answer", {"id": pending["id"], "wait_seconds": 15})
        )
    assert later["status"] == "answered", later
    assert later["answer"]["option_ids"] == ["hold"]
    assert later["answer"]["by"] == f"slack:{ALICE}"


async def test_a_url_goes_to_one_person_as_a_direct_message_shown_whole_and_never_previewed(
    served: tuple[Server, FakeSlack],
) -> None:
    """MCP URL mode: the address goes only to the one person among the agent's destinations
    (never the channel), whole, as text, with Slack's link previews off; the result says it was
    delivered, which is all ``accept`` means."""
    server, slack = served
    server.start()
    async with httpx.AsyncClient() as http:
        await server.wait_healthy(http)
    async with client(server) as agent:
        out = result_of(
            await agent.call_tool("ask", {"question": "Sign in to the registry", "url": LOGIN})
        )
    assert out["status"] == "pending", out
    assert out["delivered"] is True, out
    [post] = [c for c in slack.calls() if c.method == "chat.postMessage"]
    assert post.params["channel"] != CHANNEL, "never the channel"
    opened = [c for c in slack.calls() if c.method == "conversations.open"]
    assert [c.params.get("users") for c in opened] == [OPS]
    assert post.params.get("unfurl_links") in (False, "false")
    assert post.params.get("unfurl_media") in (False, "false")
    shown = json.dumps(post.params.get("blocks"), ensure_ascii=False)
    assert LOGIN in shown or LOGIN.replace("&", "&amp;") in shown, shown[:2000]
    print(json.dumps(post.params.get("blocks"), indent=2, ensure_ascii=False)[:3000])

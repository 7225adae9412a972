"""The tools ``ask``, ``get_answer`` and ``cancel`` through the SDK's own client over real HTTP, on
both protocol versions: a person's answer comes back in the tool result, an unanswered question
is pending and then read with ``get_answer``, an agent sees only its own questions, the asking
agent cannot answer, a bad token is a 401 and bad input a tool error naming the field."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from mcp import Client

from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Answer,
    Attempt,
    ElicitationKey,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Status,
)
from bot.timekeeper import Timekeeper
from tests.integration.mcp import MODES, TOKENS, Rig, rig

pytestmark = pytest.mark.slow  # generated requests / whole processes: the second tier

ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
YES_NO = [
    {"id": "yes", "label": "Deploy", "meaning": "approve"},
    {"id": "no", "label": "Hold", "meaning": "reject"},
]


def body(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    assert data == json.loads(result.content[0].text)
    return dict(data)


def error_text(result: Any) -> str:
    assert result.is_error
    return str(result.content[0].text)


async def pending(r: Rig, key: ElicitationKey) -> None:
    """Until the question is stored (the tool call is under way)."""
    for _ in range(300):
        if await r.service.view(key) is not None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{key} never stored")


async def answer(r: Rig, key: ElicitationKey, attempt: Attempt) -> Answer | Refusal:
    return (await r.service.answer(key, attempt)).result


@pytest.mark.parametrize("mode", MODES)
async def test_ask_returns_the_persons_answer_with_progress_while_it_waits(
    sqlite_url: str, mode: str
) -> None:
    async with rig(sqlite_url, wait_seconds=20) as r, r.client(mode=mode) as client:
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        call = asyncio.create_task(
            client.call_tool(
                "ask",
                {"question": "Deploy *api* to production?", "options": YES_NO},
                progress_callback=on_progress,
            )
        )
        await pending(r, ElicitationKey("mcp:q1"))
        await asyncio.sleep(0.3)  # a few polls: progress is sent while it waits
        given = await answer(
            r,
            ElicitationKey("mcp:q1"),
            Attempt(respondent=ALICE, option_ids=("yes",), via="web", shown=SHOWN_WHOLE),
        )
        assert isinstance(given, Answer)
        out = body(await asyncio.wait_for(call, 10))
        assert out["id"] == "q1"
        assert out["status"] == "answered"
        assert out["answer"]["option_ids"] == ["yes"]
        assert out["answer"]["by"] == "slack:U0ALICE"
        assert out["answer"]["text"] is None
        assert out["answer"]["at"].endswith("Z")
        assert seen
        assert seen[-1][1] == 20
        assert "Waiting for a person" in (seen[-1][2] or "")
        view = await r.service.view(ElicitationKey("mcp:q1"))
        assert view is not None
        assert view.elicitation.asker == "mcp:ci-agent"
        assert view.elicitation.source == "mcp"


@pytest.mark.parametrize("mode", MODES)
async def test_unanswered_ask_is_pending_then_get_answer_returns_the_answer(
    sqlite_url: str, mode: str
) -> None:
    async with rig(sqlite_url, wait_seconds=0.5) as r, r.client(mode=mode) as client:
        out = body(
            await client.call_tool("ask", {"question": "Why?", "free_text": {"max_length": 50}})
        )
        assert out == {"id": "q1", "status": "pending", "answer": None}
        again = body(await client.call_tool("get_answer", {"id": "q1", "wait_seconds": 0}))
        assert again == out
        waiting = asyncio.create_task(
            client.call_tool("get_answer", {"id": "mcp:q1", "wait_seconds": 60})
        )
        await asyncio.sleep(0.2)
        given = await answer(
            r,
            ElicitationKey("mcp:q1"),
            Attempt(respondent=ALICE, text="Because the tests pass.", via="web"),
        )
        assert isinstance(given, Answer)
        out = body(await asyncio.wait_for(waiting, 10))
        assert out["status"] == "answered"
        assert out["answer"]["text"] == "Because the tests pass."
        assert out["answer"]["option_ids"] == []


async def test_get_answer_waits_no_longer_than_the_servers_wait(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.5) as r, r.client() as client:
        body(await client.call_tool("ask", {"question": "Why?", "free_text": {}}))
        started = asyncio.get_running_loop().time()
        out = body(await client.call_tool("get_answer", {"id": "q1", "wait_seconds": 600}))
        assert out["status"] == "pending"
        assert asyncio.get_running_loop().time() - started < 5


@pytest.mark.parametrize("mode", MODES)
async def test_another_agent_can_neither_read_nor_cancel_the_question(
    sqlite_url: str, mode: str
) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r:
        async with r.client(mode=mode) as mine:
            body(await mine.call_tool("ask", {"question": "Ship it?", "options": YES_NO}))
        async with r.client(TOKENS["OTHER_TOKEN"], mode=mode) as theirs:
            read = error_text(await theirs.call_tool("get_answer", {"id": "q1"}))
            gone = error_text(await theirs.call_tool("cancel", {"id": "q1"}))
            unknown = error_text(await theirs.call_tool("get_answer", {"id": "q404"}))
        for text in (read, gone):
            assert "no question 'q1' asked by this agent" in text
        assert "no question 'q404' asked by this agent" in unknown
        view = await r.service.view(ElicitationKey("mcp:q1"))
        assert view is not None
        assert view.status is Status.PENDING


async def test_cancel_withdraws_the_question_everywhere(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r, r.client() as client:
        body(await client.call_tool("ask", {"question": "Ship it?", "options": YES_NO}))
        out = body(await client.call_tool("cancel", {"id": "q1"}))
        assert out == {"id": "q1", "status": "cancelled", "answer": None}
        assert body(await client.call_tool("cancel", {"id": "q1"}))["status"] == "cancelled"
        late = await answer(
            r,
            ElicitationKey("mcp:q1"),
            Attempt(respondent=ALICE, option_ids=("no",), via="web", shown=SHOWN_WHOLE),
        )
        assert isinstance(late, Refusal)


async def test_the_asking_agent_is_refused_as_a_respondent(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r, r.client() as client:
        body(await client.call_tool("ask", {"question": "Ship it?", "options": YES_NO}))
        itself = Identity(platform="mcp", user="ci-agent")
        refused = await answer(
            r,
            ElicitationKey("mcp:q1"),
            Attempt(respondent=itself, option_ids=("yes",), via="web", shown=SHOWN_WHOLE),
        )
        assert isinstance(refused, Refusal)
        assert refused.code is RefusalCode.ASKER
        assert (
            body(await client.call_tool("get_answer", {"id": "q1", "wait_seconds": 0}))["status"]
            == "pending"
        )


async def test_a_request_without_a_valid_token_is_401_before_mcp(sqlite_url: str) -> None:
    async with rig(sqlite_url) as r, httpx.AsyncClient() as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            response = await http.post(r.url, json=init, headers=headers)
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer")
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's own error for a 401
            async with Client_for(r, "wrong-token") as client:
                await client.list_tools()


def Client_for(r: Rig, token: str) -> Client:  # noqa: N802 - reads as the client it makes
    return r.client(token)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"question": "x"}, "options"),
        ({"question": " ", "free_text": {}}, "question"),
        (
            {"question": "x", "options": [{"id": "a", "label": "A"}, {"id": "a", "label": "B"}]},
            "options[1].id",
        ),
        ({"question": "x", "options": [{"id": "a", "label": "A", "meaning": "maybe"}]}, "meaning"),
        (
            {"question": "x", "options": YES_NO, "on_timeout": "later", "timeout_seconds": 5},
            "on_timeout",
        ),
        ({"question": "x", "options": YES_NO, "on_timeout": "no"}, "on_timeout"),
        ({"question": "x", "options": YES_NO, "timeout_seconds": 0}, "timeout_seconds"),
        (
            {"question": "x", "options": YES_NO, "destinations": ["slack:C0ELSEWHERE"]},
            "destinations[0]",
        ),
        (
            {"question": "x", "form": {"type": "object", "properties": {"a": {"type": "object"}}}},
            "form.properties.a.type",
        ),
        ({"question": "x", "form": {"properties": {}}}, "form.properties"),
        (
            {"question": "x", "options": YES_NO, "form": {"properties": {"a": {"type": "string"}}}},
            "form",
        ),
        ({"question": "x", "free_text": {}, "workspace": "bad\nworkspace"}, "workspace"),
        ({"question": "x", "free_text": {}, "previews": [{"type": "video"}]}, "type"),
    ],
)
async def test_bad_input_is_a_tool_error_naming_the_field(
    sqlite_url: str, arguments: dict[str, Any], field: str
) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r, r.client() as client:
        text = error_text(await client.call_tool("ask", arguments))
        assert field in text
        assert await r.service.view(ElicitationKey("mcp:q1")) is None


async def test_destinations_and_routes(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.1) as r, r.client() as client:
        for arguments in (
            {"question": "a", "free_text": {}},  # the agent's own destinations
            {"question": "b", "free_text": {}, "destinations": ["slack:C0APPROVALS"]},
            {"question": "c", "free_text": {}, "workspace": "acme"},  # the config's routes
        ):
            body(await client.call_tool("ask", arguments))
        where = {
            key: sorted({d.destination for d in await r.service.deliveries(key)})
            for key in map(ElicitationKey, ("mcp:q1", "mcp:q2", "mcp:q3"))
        }
        assert where == {
            "mcp:q1": ["slack:C0APPROVALS", "web"],
            "mcp:q2": ["slack:C0APPROVALS"],
            "mcp:q3": ["slack:C0ACME"],
        }


async def test_a_form_answer_comes_back_typed_by_its_schema(sqlite_url: str) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Release name", "minLength": 2},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
            "canary": {"type": "boolean"},
            "region": {
                "type": "string",
                "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "USA"}],
            },
            "notes": {"type": "string"},
        },
        "required": ["name", "replicas", "canary", "region"],
    }
    async with rig(sqlite_url, wait_seconds=0.1) as r, r.client() as client:
        body(await client.call_tool("ask", {"question": "Release details?", "form": schema}))
        view = await r.service.view(ElicitationKey("mcp:q1"))
        assert view is not None
        assert [q.id for q in view.elicitation.form] == [
            "name",
            "replicas",
            "canary",
            "region",
            "notes",
        ]
        # What the schema refuses is refused to the person, naming the question; nothing is
        # recorded and nothing goes back to the agent.
        for replicas, why in (("twelve", "must be a whole number"), ("12", "must be at most 9")):
            wrong = {
                "name": {"selected": [], "text": "v2.4"},
                "replicas": {"selected": [], "text": replicas},
                "canary": {"selected": ["Yes"], "text": None},
                "region": {"selected": ["Europe"], "text": None},
                "notes": {"selected": ["(leave empty)"], "text": None},
            }
            refused = await answer(
                r,
                ElicitationKey("mcp:q1"),
                Attempt(respondent=ALICE, via="web", fields={"answers": wrong}),
            )
            assert isinstance(refused, Refusal), refused
            assert refused.message == f"The answer to question 2 (replicas) {why}."
        assert body(await client.call_tool("get_answer", {"id": "q1"}))["status"] == "pending"
        answers = {
            "name": {"selected": [], "text": "v2.4"},
            "replicas": {"selected": [], "text": "3"},
            "canary": {"selected": ["Yes"], "text": None},
            "region": {"selected": ["Europe"], "text": None},
            "notes": {"selected": ["(leave empty)"], "text": None},
        }
        given = await answer(
            r,
            ElicitationKey("mcp:q1"),
            Attempt(respondent=ALICE, via="web", fields={"answers": answers}),
        )
        assert isinstance(given, Answer), given
        out = body(await client.call_tool("get_answer", {"id": "q1"}))
        assert out["status"] == "answered"
        assert out["answer"]["fields"] == {
            "name": "v2.4",
            "replicas": 3,
            "canary": True,
            "region": "eu",
        }


async def test_shutdown_returns_every_waiting_call_as_pending_at_once(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=60) as r, r.client() as client:
        assert r.part.ready() is None
        call = asyncio.create_task(client.call_tool("ask", {"question": "Why?", "free_text": {}}))
        await pending(r, ElicitationKey("mcp:q1"))
        r.part.shutdown()
        out = body(await asyncio.wait_for(call, 5))
        assert out["status"] == "pending"


async def test_a_session_answers_only_the_token_that_opened_it(sqlite_url: str) -> None:
    """2025-11-25 sessions are bound to the agent: another agent's token with the session id is
    answered as if the session did not exist."""
    async with rig(sqlite_url, wait_seconds=0.2) as r, httpx.AsyncClient() as http:
        accept = {"Accept": "application/json, text/event-stream"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        mine = {**accept, "Authorization": f"Bearer {TOKENS['CI_TOKEN']}"}
        opened = await http.post(r.url, json=init, headers=mine)
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        theirs = {
            **accept,
            "Authorization": f"Bearer {TOKENS['OTHER_TOKEN']}",
            "mcp-session-id": session,
            "mcp-protocol-version": "2025-11-25",
        }
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        refused = await http.post(r.url, json=listed, headers=theirs)
        assert refused.status_code == 404


async def test_expiry_with_on_timeout_is_the_systems_answer(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r, r.client() as client:
        arguments = {"question": "Ship?", "options": YES_NO, "timeout_seconds": 60}
        body(await client.call_tool("ask", {**arguments, "on_timeout": "no"}))
        body(await client.call_tool("ask", arguments))
        r.clock.advance(61)
        await Timekeeper(r.store, r.clock, People()).tick()
        chose = body(await client.call_tool("get_answer", {"id": "q1"}))
        assert chose["status"] == "expired"
        assert chose["answer"]["option_ids"] == ["no"]
        assert chose["answer"]["by"] == "system"
        lapsed = body(await client.call_tool("get_answer", {"id": "q2"}))
        assert lapsed == {"id": "q2", "status": "expired", "answer": None}


async def test_an_ask_retried_with_its_idempotency_key_asks_nothing_new(sqlite_url: str) -> None:
    async with rig(sqlite_url, wait_seconds=0.2) as r, r.client() as client:
        arguments = {"question": "Ship?", "options": YES_NO, "idempotency_key": "run-7/ship"}
        first = body(await client.call_tool("ask", arguments))
        again = body(await client.call_tool("ask", arguments))
        assert first == again
        assert first["id"].startswith("k")
        async with r.client(TOKENS["OTHER_TOKEN"]) as other:
            theirs = body(await other.call_tool("ask", {**arguments, "question": "Other?"}))
        assert theirs["id"] != first["id"]
        view = await r.service.view(ElicitationKey(f"mcp:{first['id']}"))
        assert view is not None
        assert view.elicitation.question == "Ship?"


async def test_the_tools_and_their_arguments_are_the_contracts(sqlite_url: str) -> None:
    async with rig(sqlite_url) as r, r.client() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"ask", "get_answer", "cancel"}
        ask = tools["ask"].input_schema
        assert set(ask["properties"]) == {
            "question",
            "options",
            "free_text",
            "form",
            "previews",
            "workspace",
            "board",
            "destinations",
            "timeout_seconds",
            "on_timeout",
            "idempotency_key",
            "url",
        }
        assert ask["required"] == ["question"]
        assert ask["properties"]["question"]["description"]
        assert set(tools["get_answer"].input_schema["properties"]) == {"id", "wait_seconds"}
        assert set(tools["cancel"].input_schema["properties"]) == {"id"}

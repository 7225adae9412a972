"""``elicitbot mcp-proxy``: a stdio MCP server in front of another, whose elicitations people
answer through elicitbot's ``/mcp`` tools (everything else passes through unchanged).

URL mode's ``accept`` means only "delivered". Elicitbot is spoken to at 2026-07-28 (no session),
so its restart mid-question costs one retried ``get_answer``, not the question.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import ProgressFnT

from adapters.sources.mcp.config import McpConfig, agent_token
from bot.domain.errors import ConfigError

ACCEPT = "accept"
DECLINE = "decline"
MODERN = "2026-07-28"
RETRIES = 5  # get_answer calls that may fail in a row (elicitbot restarting) before cancelling
_CONFIRM = [
    {"id": ACCEPT, "label": "Accept", "meaning": "approve"},
    {"id": DECLINE, "label": "Decline", "meaning": "reject"},
]


def proxy_agent(
    config: McpConfig, environ: Mapping[str, str], agent: str | None
) -> tuple[str, str]:
    """``(agent name, token)`` for ``--agent NAME`` (optional when the config names one agent)."""
    if agent is None:
        if len(config.agents) != 1:
            msg = "mcp.agents: name the agent with --agent (the config names " + (
                "none)" if not config.agents else f"{', '.join(sorted(config.agents))})"
            )
            raise ConfigError(msg)
        agent = next(iter(config.agents))
    if (found := config.agents.get(agent)) is None:
        msg = f"mcp.agents.{agent}: no such agent in the config"
        raise ConfigError(msg)
    return agent, agent_token(agent, found, environ)


def ask_arguments(params: types.ElicitRequestParams) -> dict[str, Any]:
    if isinstance(params, types.ElicitRequestURLParams):
        return {"question": params.message, "url": params.url}
    schema = params.model_dump(mode="json", by_alias=True, exclude_none=True)["requestedSchema"]
    if not schema.get("properties"):
        return {"question": params.message, "options": _CONFIRM}
    return {"question": params.message, "form": schema}


def elicit_result(params: types.ElicitRequestParams, body: Mapping[str, Any]) -> types.ElicitResult:
    """What to answer the server, from the question's final state."""
    if isinstance(params, types.ElicitRequestURLParams):
        # Accept says only that the address reached the person (their direct message).
        reached = body.get("delivered") or body.get("status") == "answered"
        return types.ElicitResult(action="accept" if reached else "cancel")
    answer = body.get("answer")
    if body.get("status") != "answered" or not isinstance(answer, Mapping):
        return types.ElicitResult(action="cancel")
    chosen = answer.get("option_ids") or []
    if DECLINE in chosen:
        return types.ElicitResult(action="decline")
    if ACCEPT in chosen:
        return types.ElicitResult(action="accept", content={})
    if answer.get("problems"):
        _say(f"elicitbot mcp-proxy: the answer does not fit the form: {answer['problems']}")
        return types.ElicitResult(action="cancel")
    return types.ElicitResult(action="accept", content=dict(answer.get("fields") or {}))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # stdout is the MCP wire


class Call:
    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.last = 0.0

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Progress must increase per call: a value not above the last goes one step above it."""
        if progress <= self.last:
            progress, total = self.last + 1, None
        self.last = progress
        await self.ctx.session.report_progress(progress, total, message)


class Calls:
    """The tool calls in flight, each told elicitbot's progress (so a client keeps waiting)."""

    def __init__(self) -> None:
        self.open: set[Call] = set()

    async def waiting(self, progress: float, total: float | None, message: str | None) -> None:
        for call in list(self.open):
            with suppress(Exception):  # a call that ended meanwhile
                await call.progress(0.0, None, f"elicitbot: {message}" if message else None)


class Elicitbot:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    def client(self) -> Client:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"}, timeout=httpx2.Timeout(30, read=900)
        )
        return Client(streamable_http_client(self.url, http_client=http), mode=MODERN)

    async def _call(
        self,
        client: Client,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        result = await client.call_tool(tool, arguments, progress_callback=progress)
        if result.is_error or not isinstance(result.structured_content, dict):
            text = " ".join(getattr(c, "text", "") for c in result.content)
            raise RuntimeError(f"elicitbot {tool}: {text}")
        return dict(result.structured_content)

    async def answer(
        self, params: types.ElicitRequestParams, progress: ProgressFnT | None = None
    ) -> types.ElicitResult:
        """Ask, then wait until answered or closed; cancel it if the server stops waiting first."""
        async with self.client() as client:
            try:
                body = await self._call(client, "ask", ask_arguments(params), progress)
            except RuntimeError as exc:  # elicitbot refused the question: nobody was asked
                _say(f"elicitbot mcp-proxy: {exc}")
                return types.ElicitResult(action="cancel")
            question_id = str(body["id"])
            try:
                failures = 0
                while body.get("status") == "pending" and not body.get("delivered"):
                    try:
                        body = await self._call(client, "get_answer", {"id": question_id}, progress)
                        failures = 0
                    # elicitbot restarting (or unreachable for a while): retry
                    except Exception as exc:
                        failures += 1
                        if failures >= RETRIES:
                            raise
                        _say(f"elicitbot mcp-proxy: get_answer failed ({exc}); retrying")
                        await anyio.sleep(min(2.0**failures, 30.0))
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await self._call(client, "cancel", {"id": question_id})
                raise
        return elicit_result(params, body)


def _upstream(command: Sequence[str] | None, url: str | None) -> StdioServerParameters | str:
    if (command is None) == (url is None):
        msg = "mcp-proxy: give either a command (after --) or --url"
        raise ConfigError(msg)
    if url is not None:
        return url
    assert command is not None  # noqa: S101 - checked just above, for the type checker
    if not command:
        msg = "mcp-proxy: the command after -- is empty"
        raise ConfigError(msg)
    return StdioServerParameters(command=command[0], args=list(command[1:]))


def passthrough(upstream: Client, name: str, in_flight: Calls) -> Server[Any]:
    """The upstream's tools, resources and prompts, with its progress passed on."""

    def paged(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def handler(_: Any, params: types.PaginatedRequestParams | None) -> Any:
            return await method(cursor=params.cursor if params else None)

        return handler

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call = Call(ctx)
        in_flight.open.add(call)
        try:
            return await upstream.call_tool(
                params.name, params.arguments, progress_callback=call.progress
            )
        finally:
            in_flight.open.discard(call)

    async def read_resource(
        _: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await upstream.read_resource(str(params.uri))

    async def get_prompt(_: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return await upstream.get_prompt(params.name, params.arguments)

    caps = upstream.server_capabilities
    # A version pin (no discover) knows no capabilities: then everything is passed through.
    unknown = caps.tools is None and caps.resources is None and caps.prompts is None
    tools = unknown or caps.tools is not None
    resources = unknown or caps.resources is not None
    prompts = unknown or caps.prompts is not None
    return Server(
        name,
        instructions=upstream.instructions,
        on_list_tools=paged(upstream.list_tools) if tools else None,
        on_call_tool=call_tool if tools else None,
        on_list_resources=paged(upstream.list_resources) if resources else None,
        on_list_resource_templates=paged(upstream.list_resource_templates) if resources else None,
        on_read_resource=read_resource if resources else None,
        on_list_prompts=paged(upstream.list_prompts) if prompts else None,
        on_get_prompt=get_prompt if prompts else None,
    )


async def run_proxy(
    *,
    elicitbot_url: str,
    token: str,
    command: Sequence[str] | None = None,
    url: str | None = None,
    upstream_mode: str = "legacy",
) -> None:
    """Serve MCP on stdio in front of ``command`` (argv) or ``url`` until stdin closes.

    ``upstream_mode`` is ``mcp.Client``'s ``mode``: ``legacy`` (2025-11-25, ``elicitation/create``),
    or ``auto`` / ``2026-07-28`` for a server that answers ``input_required``."""
    target = _upstream(command, url)
    elicitbot = Elicitbot(elicitbot_url, token)
    calls = Calls()

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        try:
            return await elicitbot.answer(params, calls.waiting)
        except RuntimeError as exc:
            _say(f"elicitbot mcp-proxy: {exc}")
            return types.ElicitResult(action="cancel")

    async with Client(target, mode=upstream_mode, elicitation_callback=on_elicit) as upstream:
        info = upstream.server_info
        name = f"elicitbot-proxy/{info.name if info else 'upstream'}"
        server = passthrough(upstream, name, calls)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

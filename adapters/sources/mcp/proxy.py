"""``elicitbot mcp-proxy``: a stdio MCP server in front of another MCP server, whose elicitations
people answer through elicitbot.

The agent's MCP client starts the proxy (stdio) instead of the server; the proxy starts that
server (a command) or connects to it (a URL) and passes its tools, resources and prompts through
unchanged. When the server elicits (``elicitation/create``, or a 2026-07-28 ``input_required``
round, which the SDK turns into the same callback), the proxy asks elicitbot with the ``ask`` tool
at ``/mcp`` under the agent's token, waits with ``get_answer`` until a person answers or the
question closes, and answers the server:

- form mode: ``ask`` with the ``requestedSchema`` as ``form``; an answer whose content the schema
  accepts is ``accept`` with that content; one it refuses is ``cancel`` (the reason on stderr);
- a form with no properties (a confirmation): the options Accept / Decline → ``accept`` (empty
  content) / ``decline``;
- URL mode: ``ask`` with ``url``: a direct message to the one person among the agent's
  destinations, the whole address shown as text, never previewed or fetched; ``accept`` as soon
  as it is delivered (that is all it means), ``cancel`` if it could not be;
- expired or cancelled (in elicitbot, or by the agent's ``cancel`` at ``/mcp``) → ``cancel``.

When the server gives up on its elicitation (the tool call is cancelled), the question is
cancelled in elicitbot too. While a person answers, elicitbot's progress is relayed to the
agent's tool calls in flight (:class:`Calls`). The proxy talks to elicitbot at protocol 2026-07-28
(no session), so an elicitbot restart mid-question costs one retried ``get_answer``, not the
question.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any, TextIO

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

from adapters.sources.mcp.config import McpConfig
from bot.domain.errors import ConfigError

ACCEPT = "accept"
DECLINE = "decline"
MODERN = "2026-07-28"
RETRIES = 5
"""``get_answer`` calls that may fail in a row (elicitbot restarting) before the proxy cancels."""
_CONFIRM = [
    {"id": ACCEPT, "label": "Accept", "meaning": "approve"},
    {"id": DECLINE, "label": "Decline", "meaning": "reject"},
]


def proxy_agent(
    config: McpConfig, environ: Mapping[str, str], agent: str | None
) -> tuple[str, str]:
    """``(agent name, token)`` for ``--agent NAME`` (which may be left out when the config names
    one agent); ConfigError naming what is missing."""
    if agent is None:
        if len(config.agents) != 1:
            msg = "mcp.agents: name the agent with --agent (the config names " + (
                "none)" if not config.agents else f"{', '.join(sorted(config.agents))})"
            )
            raise ConfigError(msg)
        agent = next(iter(config.agents))
    found = config.agents.get(agent)
    if found is None:
        msg = f"mcp.agents.{agent}: no such agent in the config"
        raise ConfigError(msg)
    token = environ.get(found.token_env, "")
    if not token.strip():
        msg = f"mcp.agents.{agent}.token_env: the variable {found.token_env} is not set"
        raise ConfigError(msg)
    return agent, token


# --- the mapping (pure) ---------------------------------------------------------------------------


def ask_arguments(params: types.ElicitRequestParams) -> dict[str, Any]:
    """The ``ask`` arguments for one elicitation."""
    if isinstance(params, types.ElicitRequestURLParams):
        return {"question": params.message, "url": params.url}
    schema = params.model_dump(mode="json", by_alias=True, exclude_none=True)["requestedSchema"]
    if not schema.get("properties"):
        return {"question": params.message, "options": _CONFIRM}
    return {"question": params.message, "form": schema}


def elicit_result(params: types.ElicitRequestParams, body: Mapping[str, Any]) -> types.ElicitResult:
    """What to answer the server, from the question's final state (``ask``'s result shape)."""
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


def _say(text: str, stream: TextIO | None = None) -> None:
    print(text, file=stream or sys.stderr, flush=True)  # stdout is the MCP wire


class Call:
    """One tool call of the agent's, in flight through the proxy."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.last = 0.0

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Progress must increase per call: a value not above the last one sent is sent as one
        step above it (without a total)."""
        if progress <= self.last:
            progress, total = self.last + 1, None
        self.last = progress
        await self.ctx.session.report_progress(progress, total, message)


class Calls:
    """The agent's tool calls in flight, told how a question stands: while a person answers,
    elicitbot's progress is relayed to every call in flight (most clients make one at a time),
    so a client that resets its timeout on progress keeps waiting."""

    def __init__(self) -> None:
        self.open: set[Call] = set()

    async def waiting(self, progress: float, total: float | None, message: str | None) -> None:
        for call in list(self.open):
            with suppress(Exception):  # a call that ended meanwhile
                await call.progress(0.0, None, f"elicitbot: {message}" if message else None)


# --- elicitbot's side -----------------------------------------------------------------------------


class Elicitbot:
    """Asks elicitbot's ``/mcp`` tools under one agent's token."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token

    def client(self) -> Client:
        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=httpx2.Timeout(30, read=900),
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
        """Ask, then wait until the question is answered or closed (elicitbot's progress to
        ``progress``); cancel it if the server stops waiting first."""
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
                    except (
                        Exception
                    ) as exc:  # elicitbot restarting (or unreachable for a while): retry
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


# --- the proxy ------------------------------------------------------------------------------------


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


def passthrough(upstream: Client, name: str, calls: Calls | None = None) -> Server[Any]:
    """A server whose tools, resources and prompts are the upstream's (tool calls in flight
    kept in ``calls``, with the upstream's progress passed on)."""
    in_flight = calls or Calls()

    async def list_tools(
        _: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await upstream.list_tools(cursor=params.cursor if params else None)

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

    async def list_resources(
        _: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return await upstream.list_resources(cursor=params.cursor if params else None)

    async def list_templates(
        _: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return await upstream.list_resource_templates(cursor=params.cursor if params else None)

    async def read_resource(
        _: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await upstream.read_resource(str(params.uri))

    async def list_prompts(
        _: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return await upstream.list_prompts(cursor=params.cursor if params else None)

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
        on_list_tools=list_tools if tools else None,
        on_call_tool=call_tool if tools else None,
        on_list_resources=list_resources if resources else None,
        on_list_resource_templates=list_templates if resources else None,
        on_read_resource=read_resource if resources else None,
        on_list_prompts=list_prompts if prompts else None,
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
    """Serve MCP on stdin/stdout in front of ``command`` (argv) or ``url``, asking every
    elicitation of it at ``elicitbot_url`` (the ``/mcp`` endpoint) with the agent's ``token``.
    Returns when stdin closes. ConfigError when neither or both of command and url are given.

    ``upstream_mode``: how the upstream is spoken to, as ``mcp.Client``'s ``mode`` (``legacy``:
    the 2025-11-25 handshake, where servers elicit with ``elicitation/create``; ``auto`` or
    ``2026-07-28`` for a server that answers ``input_required``)."""
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

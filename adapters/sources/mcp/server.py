"""The MCP server at ``/mcp``: ``ask``, ``get_answer`` and ``cancel`` over Streamable HTTP.

The agent (``mcp:<name>``) is the asker, so it may never answer, and sees only its own questions.
A call waits with progress notifications (clients that reset their timeout on progress then wait
as long as a person takes).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field, ValidationError
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from adapters.sources.mcp import ask as asks
from adapters.sources.mcp.config import McpConfig, agent_tokens
from bot.domain.bounds import lookup_problem
from bot.domain.model import ElicitationKey, Status
from bot.domain.ports import Clock, Elicitations, Inbound, PromptView

log = structlog.get_logger("elicitbot.mcp")

POLL_SECONDS = 0.5  # how often a waiting call reads its question's state
PROGRESS_SECONDS = 5.0  # how often it notifies progress (when the client asked for it)
NAME = "elicitbot"
INSTRUCTIONS = (
    "Ask people a question and get their answer: `ask` posts it where the people who answer "
    "are (Slack, Matrix, the web inbox) and waits a while; when it returns status 'pending', "
    "call `get_answer` with the id until the status is 'answered', 'expired' or 'cancelled'. "
    "`cancel` withdraws a question nobody needs answered any more."
)


@dataclass
class McpPart:
    """``lifespan()`` runs the session manager (inside the HTTP app's); ``ready()`` is None or what
    is not ready; ``shutdown()`` (on SIGTERM) makes waiting calls return ``pending`` at once."""

    route: Route
    lifespan: Callable[[], AbstractAsyncContextManager[None]]
    ready: Callable[[], str | None]
    shutdown: Callable[[], None]


def _bearer(headers: Mapping[str, str] | None) -> str:
    if headers is None:
        return ""
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def agent_for(token: str, tokens: Mapping[str, str]) -> str | None:
    """Compared with every token in constant time, as SHA-256 digests (so neither a token's
    content nor its length shows in the time taken)."""
    given = hashlib.sha256(token.encode()).digest()
    found = None
    for known, agent in tokens.items():
        if hmac.compare_digest(given, hashlib.sha256(known.encode()).digest()):
            found = agent
    return found if token else None


class _AgentGate:
    """401 without an agent's bearer token, else the MCP transport with the agent as the user
    (a 2025-11-25 session stays bound to its token). A class: Starlette's ``Route`` would take a
    plain function for a request handler, not an ASGI app."""

    def __init__(self, tokens: Mapping[str, str], inner: ASGIApp) -> None:
        self.tokens = tokens
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if (agent := agent_for(_bearer(headers), self.tokens)) is None:
            response = JSONResponse(
                {"error": "unauthorized", "detail": "a valid agent bearer token is required"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="elicitbot-mcp"'},
            )
            await response(scope, receive, send)
            return
        user = AuthenticatedUser(AccessToken(token="", client_id=f"mcp:{agent}", scopes=[]))
        await self.inner({**scope, "user": user}, receive, send)


def _not_found(question_id: str) -> ToolError:
    return ToolError(f"id: no question {question_id!r} asked by this agent")


class McpTools:
    def __init__(
        self,
        config: McpConfig,
        tokens: Mapping[str, str],
        elicitations: Elicitations,
        clock: Clock,
        *,
        new_id: Callable[[], str],
        poll_seconds: float,
    ) -> None:
        self.config = config
        self.tokens = tokens
        self.elicitations = elicitations
        self.clock = clock
        self.new_id = new_id
        self.poll_seconds = poll_seconds
        self.stopping = anyio.Event()  # set at shutdown: waiting calls return
        self.running = False

    def agent_of(self, ctx: Context) -> str:
        agent = agent_for(_bearer(ctx.headers), self.tokens)
        if agent is None:  # the gate refused it already; a transport without headers
            raise ToolError("Authorization: a valid agent bearer token is required")
        return agent

    async def own_view(self, agent: str, question_id: str) -> PromptView:
        """The agent's own question; any other id (another agent's too) is "not found"."""
        key = asks.key_of(question_id)
        view = None if lookup_problem(key) else await self.elicitations.view(key)
        if view is None or view.elicitation.asker != asks.asker_of(agent):
            raise _not_found(question_id)
        return view

    async def result(self, view: PromptView, seconds: float, ctx: Context) -> dict[str, Any]:
        """The result after up to ``seconds`` waiting for an answer (URL mode: for its delivery)."""
        if "url" not in view.elicitation.extra:
            return asks.result_of(await self.wait(view, seconds, ctx))
        key = view.elicitation.key
        view = await self.wait(view, seconds, ctx, until=lambda: self.delivered(key))
        return asks.result_of(view, await self.delivered(key))

    async def delivered(self, key: ElicitationKey) -> bool:
        return any(d.state == "posted" for d in await self.elicitations.deliveries(key))

    async def wait(
        self,
        view: PromptView,
        seconds: float,
        ctx: Context,
        *,
        until: Callable[[], Awaitable[bool]] | None = None,
    ) -> PromptView:
        """Until not pending, ``seconds`` passed or the server stops; progress is notified
        after the first read, then every :data:`PROGRESS_SECONDS`."""
        key = view.elicitation.key
        started = time.monotonic()
        told = -PROGRESS_SECONDS  # the first read is told at once
        stopping = self.stopping
        while view.status is Status.PENDING and not stopping.is_set():
            left = seconds - (time.monotonic() - started)
            if left <= 0:
                break
            with anyio.move_on_after(min(self.poll_seconds, left)):
                await stopping.wait()
            if (fresh := await self.elicitations.view(key)) is None:
                break
            view = fresh
            if until is not None and await until():
                break
            elapsed = time.monotonic() - started
            if view.status is Status.PENDING and elapsed - told >= PROGRESS_SECONDS:
                told = elapsed
                await ctx.report_progress(
                    elapsed, seconds, f"Waiting for a person to answer ({elapsed:.0f}s)"
                )
        return view

    async def ask(
        self,
        question: Annotated[str, Field(description="The question, in Markdown")],
        ctx: Context,
        options: Annotated[
            list[asks.AskOption] | None, Field(description="Choices offered as buttons")
        ] = None,
        free_text: Annotated[
            asks.FreeText | None, Field(description="Take a written answer (with options: or)")
        ] = None,
        form: Annotated[
            dict[str, Any] | None,
            Field(description="An MCP requestedSchema: a flat form people fill in"),
        ] = None,
        previews: Annotated[
            list[asks.AskPreview] | None, Field(description="What the decision is about")
        ] = None,
        workspace: Annotated[str | None, Field(description="Route by workspace")] = None,
        board: Annotated[str | None, Field(description="Route by board")] = None,
        destinations: Annotated[
            list[str] | None,
            Field(description="Where to post it (slack:<channel>, matrix:<room>, web)"),
        ] = None,
        timeout_seconds: Annotated[
            int | None, Field(description="Expire the question after this many seconds")
        ] = None,
        on_timeout: Annotated[
            str | None, Field(description="The option id chosen when it expires")
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(min_length=1, max_length=200, description="Same key again: no new question"),
        ] = None,
        url: Annotated[
            str | None,
            Field(
                description="MCP URL mode: an address a person must open themselves. It goes "
                "as a direct message to the one person among the destinations, shown whole and "
                "never previewed; the result says delivered once it is there"
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Ask people a question (choose among options, write a text, or fill in a form).
        Waits for the answer up to the server's wait, then returns status 'pending' with the
        id to pass to get_answer. An ask repeated with the same idempotency_key (a retried
        call) asks nothing new: it waits for the first one's answer."""
        agent = self.agent_of(ctx)
        if idempotency_key is not None:
            question_id = asks.keyed_id(agent, idempotency_key)
            if (asked := await self.elicitations.view(asks.key_of(question_id))) is not None:
                return await self.result(asked, self.config.wait_seconds, ctx)
        else:
            question_id = self.new_id()
        try:
            allowed = self.config.agents[agent].destinations
            route = (
                asks.url_route(url, destinations, allowed)
                if url is not None
                else asks.route_for(
                    workspace=workspace, board=board, destinations=destinations, allowed=allowed
                )
            )
            e = asks.to_elicitation(
                question_id=question_id,
                agent=agent,
                question=question,
                options=options or (),
                free_text=free_text,
                form=form,
                previews=previews or (),
                workspace=workspace,
                board=board,
                timeout_seconds=timeout_seconds,
                on_timeout=on_timeout,
                url=url,
                now=self.clock.now(),
            )
        except (asks.AskError, ValidationError) as exc:  # a model refused a value
            raise ToolError(str(exc)) from None
        audit = {"agent": agent, "tool": "ask"}
        await self.elicitations.intake([Inbound(asks.SOURCE, question_id, e, audit, route=route)])
        log.info("mcp.asked", key=e.key, agent=agent)
        view = await self.own_view(agent, question_id)
        return await self.result(view, self.config.wait_seconds, ctx)

    async def get_answer(
        self,
        id: Annotated[str, Field(description="The id ask returned")],
        ctx: Context,
        wait_seconds: Annotated[
            float | None, Field(description="Wait this long at most while it is pending")
        ] = None,
    ) -> dict[str, Any]:
        """The question's status and answer; while it is pending, waits up to wait_seconds
        (at most the server's wait, which is also the default)."""
        agent = self.agent_of(ctx)
        view = await self.own_view(agent, id)
        most = self.config.wait_seconds
        seconds = most if wait_seconds is None else max(0.0, min(float(wait_seconds), most))
        return await self.result(view, seconds, ctx)

    async def cancel(
        self, id: Annotated[str, Field(description="The id ask returned")], ctx: Context
    ) -> dict[str, Any]:
        """Withdraw a pending question: every copy people see says it was cancelled."""
        agent = self.agent_of(ctx)
        view = await self.own_view(agent, id)
        key = view.elicitation.key
        if view.status is Status.PENDING:
            reason = f"cancelled by {asks.asker_of(agent)}"
            await self.elicitations.close(key, Status.CANCELLED, answer=None, reason=reason)
            log.info("mcp.cancelled", key=key, agent=agent)
        return asks.result_of(await self.own_view(agent, id))


def _server() -> MCPServer:
    """Without the root handler its constructor installs (``logging.basicConfig`` is a no-op
    while the root logger has one): elicitbot alone configures the process's logging."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        return MCPServer(NAME, instructions=INSTRUCTIONS, log_level="WARNING")
    finally:
        root.removeHandler(guard)


def mcp_part(
    config: McpConfig,
    environ: Mapping[str, str],
    elicitations: Elicitations,
    clock: Clock,
    *,
    new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    poll_seconds: float = POLL_SECONDS,
) -> McpPart:
    """ConfigError when an agent's token variable is unset or two agents share a token."""
    tokens = agent_tokens(config, environ)
    tools = McpTools(config, tokens, elicitations, clock, new_id=new_id, poll_seconds=poll_seconds)
    server = _server()
    for tool in (tools.ask, tools.get_answer, tools.cancel):
        server.add_tool(tool, name=tool.__name__, structured_output=True)
    # Built for the session manager it makes. A browser page cannot add a bearer token, so the
    # DNS rebinding check (a Host allowlist) would only refuse a reverse proxy's Host.
    server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    manager = server.session_manager

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with manager.run():
            tools.running = True
            try:
                yield
            finally:
                tools.running = False
                tools.stopping.set()

    def ready() -> str | None:
        return None if tools.running else "mcp: the session manager is not running"

    app = _AgentGate(tokens, manager.handle_request)
    return McpPart(
        route=Route("/mcp", app, methods=["GET", "POST", "DELETE"]),
        lifespan=lifespan,
        ready=ready,
        shutdown=tools.stopping.set,
    )

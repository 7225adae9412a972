"""The chat surfaces' parts: the web inbox, Slack (HTTP or Socket Mode) and Matrix."""

from __future__ import annotations

import asyncio

from slack_sdk.web.async_client import AsyncWebClient

from adapters.matrix import MatrixListener, lease_fence, matrix_chat
from adapters.matrix.e2ee.state import pickle_key_from_env
from adapters.slack.api.groups import SlackGroups, SlackStanding, check_scope
from adapters.slack.api.pacing import Pacer
from adapters.slack.api.people import SlackNames
from adapters.slack.chat import SlackChat
from adapters.slack.intake.routes import slack_router
from adapters.slack.intake.socket import SlackSocket
from adapters.slack.listener import build_app
from adapters.web.chat import WebChat
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from bot.app.config import secret
from bot.app.parts import Context, Part, lease_keeper
from bot.domain.errors import ConfigError, DeliveryError, PermanentDeliveryError


def web(ctx: Context, identity: IdentityPolicy) -> Part:
    return Part(
        "web",
        chats={"web": WebChat()},
        routers=[
            inbox_router(
                ctx.elicitations,
                ctx.store,
                identity,
                clock=ctx.clock,
                secure_cookies=ctx.config.server.base_url.startswith("https://"),
            )
        ],
    )


def slack(ctx: Context) -> list[Part]:
    config = ctx.config.slack
    if config is None:
        return []
    # No SDK retries: the outbox retries, and the SDK's connection-error retry can post a message
    # twice; a retried post looks for its message first.
    chat = SlackChat(
        AsyncWebClient(
            token=ctx.environ[config.bot_token_env],
            base_url=str(config.api_url),
            retry_handlers=[],
        ),
        pacer=Pacer(),
        # Slack's rates are per channel and per workspace, not per process: on PostgreSQL every
        # replica takes its turn from the store. A SQLite file has one process: the Pacer alone.
        slots=None if ctx.store.single_process else ctx.store,
    )
    # Interactions are recorded in the store before their ack (durable before ack).
    app = build_app(
        chat,
        ctx.elicitations,
        signing_secret=secret(ctx.environ, config.signing_secret_env),
        raw=ctx.store,
        clock=ctx.clock,
    )
    # People by name on every copy ("Answered by Alice"): users.info, cached; without the
    # users:read scope, their ids.
    names = SlackNames(chat.client, clock=ctx.clock)
    app.identify = names.identify
    # Slack user groups among a route's approvers (slack:S…): usergroups.users.list, cached a
    # minute; a group that could not be read counts for nobody, and the person is told why.
    # The refusal names the route's approvers: people by those names, groups by their handle.
    groups = SlackGroups(chat.client, clock=ctx.clock)
    app.standing = SlackStanding(groups, ctx.elicitations, names)
    app_token = ctx.environ[config.app_token_env] if config.app_token_env else None
    socket = SlackSocket(app.app, app_token) if app_token else None
    ctx.views.slack, ctx.views.slack_app, ctx.views.slack_socket = chat, app, socket
    # Socket Mode: one replica holds the connection (a lease): Slack hands each envelope to one
    # open connection, and one on a replica that died would swallow clicks until Slack noticed.
    socket_keeper = (
        lease_keeper(ctx, socket.lease, lambda: socket.hold(config.app_token_env or "?"))
        if socket is not None and app_token
        else None
    )

    async def prepare() -> None:
        await _verify_slack(chat, config.bot_token_env)
        await check_scope(chat.scopes, ctx.elicitations)  # logged once, here
        ctx.learn_identities({f"slack:{i}" for i in (chat.bot_user_id, chat.bot_id) if i})
        if socket is not None and app_token:
            # Every replica checks the app-level token; only the lease holder connects.
            await socket.check_token(config.app_token_env or "?")

    async def stop() -> None:
        if replay_keeper is not None:
            await replay_keeper.stop()
        if socket_keeper is not None:
            await socket_keeper.stop()
        if socket is not None:
            await socket.stop()
        await app.aclose(grace=5.0)

    def ready() -> dict[str, bool]:
        standby = socket_keeper is not None and socket_keeper.standby
        connected = socket is None or socket.connected() or standby
        return {"slack": chat.bot_user_id is not None and connected}

    async def replays(stop_event: asyncio.Event) -> None:
        # What a killed process recorded and never handled: at once on SQLite (one process owns
        # it), after a grace on PostgreSQL (another replica may still be handling it), there by
        # one replica at a time (a lease), so two sweeps never replay one event twice.
        await app.run_replays(stop_event, ours=ctx.store.single_process)

    replay_keeper = (
        None
        if ctx.store.single_process
        else lease_keeper(ctx, "slack-replay", lambda: app.run_replays(asyncio.Event(), ours=False))
    )

    return [
        Part(
            "slack",
            chats={"slack": chat},
            routers=[] if socket is not None else [slack_router(app.app)],
            tasks={
                "slack-replay": replays if replay_keeper is None else replay_keeper.run,
                **({"slack-socket": socket_keeper.run} if socket_keeper is not None else {}),
            },
            ready=ready,
            prepare=prepare,
            stop=stop,
        )
    ]


def matrix(ctx: Context) -> list[Part]:
    m = ctx.config.matrix
    if m is None:
        return []
    lease = f"matrix:{m.user_id}"
    # matrix.pickle_key_env set: end-to-end encryption. The device's crypto state lives in the
    # store and is live only on the lease holder (the listener restores it, snapshots it after
    # each batch, fenced on the lease, and saves it last on stop); prepare checks the key.
    pickle_key = ctx.environ.get(m.pickle_key_env, "") if m.pickle_key_env else None
    chat = matrix_chat(
        str(m.homeserver),
        m.user_id,
        m.device_id,
        ctx.environ[m.access_token_env],
        pickle_key=pickle_key,
        states=ctx.store,
        clock=ctx.clock,
        fence=lease_fence(ctx.store, lease, ctx.owner, ctx.clock),
        lease=(lease, ctx.owner),  # the LeaseKeeper's (name, holder) below: saves fenced on it
    )
    listener = MatrixListener(chat, ctx.elicitations, ctx.store, device_id=m.device_id)
    ctx.views.matrix_chat, ctx.views.matrix = chat, listener
    # One replica syncs the account (a lease: it moves within 15 s of its holder's death); every
    # replica posts (to an encrypted room only the holder can). The token check (prepare) runs
    # on each, so a bad token stops any start.
    keeper = lease_keeper(ctx, lease, listener.run)

    async def prepare() -> None:
        if m.pickle_key_env:
            pickle_key_from_env(ctx.environ, m.pickle_key_env)  # names the key if unusable
        await listener.connect()

    async def stop() -> None:
        await keeper.stop()
        await listener.stop()

    async def close() -> None:
        await chat.client.close()

    return [
        Part(
            "matrix",
            chats={"matrix": chat},
            tasks={f"matrix:{m.user_id}": keeper.run},
            ready=lambda: {"matrix": listener.ready or keeper.standby},
            prepare=prepare,
            stop=stop,
            close=close,
        )
    ]


async def _verify_slack(slack: SlackChat, env: str) -> None:
    """``auth.test`` at start, never lazily: a refused token stops the start, named."""
    try:
        await slack.verify()
    except PermanentDeliveryError as exc:
        raise ConfigError(
            f"slack.bot_token_env: Slack refused the token in {env} ({exc})"
        ) from None
    except DeliveryError as exc:
        raise ConfigError(f"slack.api_url: Slack did not answer auth.test ({exc})") from None

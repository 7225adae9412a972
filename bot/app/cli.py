"""The ``elicitbot`` command: serve, check-config, db upgrade, list, show, mcp-proxy."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from bot.app import logs
from bot.app.config import AppConfig, check_startable, load_config
from bot.app.shapes import detail_json
from bot.domain.bounds import lookup_problem
from bot.domain.errors import ConfigError

EXIT_USAGE = 2
"""argparse's status for a bad argument: ``show`` with an id no elicitation could have."""


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-c", "--config", type=Path, default=None, help="config file (default ./elicitbot.toml)"
    )
    parser = argparse.ArgumentParser(
        prog="elicitbot", description="Puts agents' pending questions in front of people."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", parents=[common], help="run everything the config enables")
    sub.add_parser(
        "check-config", parents=[common], help="validate the config; exit 1 names each bad key"
    )
    db = sub.add_parser("db", help="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("upgrade", parents=[common], help="apply migrations")
    listing = sub.add_parser("list", parents=[common], help="list elicitations, newest first")
    listing.add_argument("--status", choices=["pending", "answered", "expired", "cancelled"])
    listing.add_argument("--limit", type=int, default=50)
    show = sub.add_parser(
        "show", parents=[common], help="one elicitation with deliveries, deadlines, audit"
    )
    show.add_argument("id", help="<source>:<id> or the source's own id")
    proxy = sub.add_parser(
        "mcp-proxy",
        parents=[common],
        help="a stdio MCP server in front of another; its elicitations are asked through elicitbot",
        description="Serve MCP on stdin/stdout in front of COMMAND (or --url): everything passes "
        "through, except that the server's elicitations are asked of people through elicitbot "
        "(at server.public_url, as the agent [mcp.agents.NAME]).",
    )
    proxy.add_argument("--agent", help="the [mcp.agents.NAME] to ask as (optional with one agent)")
    proxy.add_argument("--url", help="the MCP server's Streamable HTTP URL, instead of a command")
    proxy.add_argument(
        "--upstream-mode",
        choices=["legacy", "auto", "2026-07-28"],
        default="legacy",
        help="how to speak to the server (legacy: the 2025-11-25 handshake)",
    )
    proxy.add_argument("upstream", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    level = os.environ.get("ELICITBOT_LOG_LEVEL", "INFO")
    logs.configure(level)  # before the config is read, so its errors are logged too
    try:
        config, origin = load_config(args.config)
        logs.configure(level, config.server.log_format)
        if args.command == "check-config":
            check_startable(config, os.environ)
            print(f"{origin or 'embedded default'}: ok")
            return 0
        if args.command == "serve":
            import uvloop  # noqa: PLC0415 - the server's event loop, as uvicorn's own default

            from bot.app.wiring import serve  # noqa: PLC0415 - heavy imports only for serve

            uvloop.run(serve(config))
            return 0
        if args.command == "mcp-proxy":
            return _mcp_proxy(args, config)
        if args.command == "db":
            from store.db import upgrade  # noqa: PLC0415 - the migrations' imports only for db

            upgrade(config.store.url)
            print("database is at the latest revision")
            return 0
        return asyncio.run(_inspect(args, config))
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"config error: {line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _mcp_proxy(args: argparse.Namespace, config: AppConfig) -> int:
    """``elicitbot mcp-proxy``: stdout is the MCP channel, so the logs stay on stderr."""
    from adapters.sources.mcp.proxy import proxy_agent, run_proxy  # noqa: PLC0415 - the SDK

    if config.mcp is None:
        raise ConfigError("mcp: mcp-proxy needs [mcp] with the agent it asks as")
    _, token = proxy_agent(config.mcp, os.environ, args.agent)
    upstream: list[str] = args.upstream
    command = upstream[1:] if upstream[:1] == ["--"] else upstream
    asyncio.run(
        run_proxy(
            elicitbot_url=f"{config.server.base_url}/mcp",
            token=token,
            command=command or None,
            url=args.url,
            upstream_mode=args.upstream_mode,
        )
    )
    return 0


async def _inspect(args: argparse.Namespace, config: AppConfig) -> int:
    if args.command == "show" and (found := lookup_problem(args.id)) is not None:
        print(f"elicitbot show: id: {found}", file=sys.stderr)  # asked of no store
        return EXIT_USAGE
    from store.sql import SqlStore  # noqa: PLC0415 - the store's imports only for list/show

    store = SqlStore.from_url(config.store.url)
    try:
        if args.command == "list":
            rows = await store.list_elicitations(status=args.status, limit=args.limit)
            for s in rows:
                e = s.elicitation
                text = (e.question or e.title).replace("\n", " ")[:60]
                print(f"{e.key}\t{s.status.value}\t{s.created_at:%Y-%m-%d %H:%M}\t{text}")
            return 0
        key = await store.resolve_key(args.id)
        stored = await store.get(key) if key else None
        if key is None or stored is None:
            print(f"no elicitation {args.id!r}", file=sys.stderr)
            return 1
        body = await detail_json(store, key, stored)
        body["audit"] = [
            {
                "at": a.at.isoformat(),
                "action": a.action,
                "actor": a.actor,
                "code": a.code,
                "detail": a.detail,
            }
            for a in await store.audit(key)
        ]
        print(json.dumps(body, indent=2))
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    raise SystemExit(main())

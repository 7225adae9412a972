"""``elicitbot mcp-proxy`` as the CLI will run it, for the proxy's tests:
``python proxy_main.py <elicitbot /mcp url> -- <command…>``, the token in ELICITBOT_MCP_TOKEN."""

from __future__ import annotations

import os
import sys

import anyio

from adapters.sources.mcp.proxy import run_proxy


def main(argv: list[str]) -> None:
    url, separator, *command = argv
    assert separator == "--"
    token = os.environ["ELICITBOT_MCP_TOKEN"]

    async def run() -> None:
        mode = os.environ.get("ELICITBOT_PROXY_UPSTREAM_MODE", "legacy")
        await run_proxy(elicitbot_url=url, token=token, command=command, upstream_mode=mode)

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1:])

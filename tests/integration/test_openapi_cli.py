"""The contract as a user checks it (issue 27): ``schemathesis run <url>/openapi.json --checks
all`` against a real ``elicitbot serve``, the CLI and not the Python API of
test_openapi_contract.py, so that what the command line does differently (its coverage phase,
undeclared methods and their ``Allow``, the stateful links, real HTTP) is covered too.

Every check, ``positive_data_acceptance`` included: the command as the README gives it, run from
the repository root. Seeded and bounded: the same requests on every run, about a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_crash import Server, free_port

pytestmark = pytest.mark.slow

TOKEN = "cli-contract-token-3e9a"
SEED = 27
MAX_EXAMPLES = 10
RUN_TIMEOUT_S = 150

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the command runs there, so schemathesis reads its ``schemathesis.toml``
(which loads tests/schemathesis_hooks.py: the rules the document cannot write, made true of a
generated request, and the one failure the tool invents), as README and docs/openapi.md say."""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Server]:
    port = free_port()
    config = tmp_path / "cfg.toml"
    config.write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\nintake_token_env = "CLI_INTAKE_TOKEN"\n\n'
        f'[store]\nurl = "sqlite:///{tmp_path / "st.db"}"\n',
        encoding="utf-8",
    )
    server = Server(tmp_path, config, port, {"CLI_INTAKE_TOKEN": TOKEN})
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def test_schemathesis_cli_finds_nothing_with_every_check(served: Server) -> None:
    async with httpx.AsyncClient() as client:
        await served.wait_healthy(client)
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{served.base}/openapi.json",
        "-H",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        "all",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_TELEMETRY": "false"}
    run = subprocess.run(  # noqa: ASYNC221 - the server is another process; nothing to await
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis exited {run.returncode}:\n{output}\n{served.logs()}"

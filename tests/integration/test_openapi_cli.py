"""The contract as a user checks it (issue 27): ``schemathesis run <url>/openapi.json --checks
all`` against a real ``elicitbot serve``, the CLI and not the Python API of
test_openapi_contract.py, so that what the command line does differently (its coverage phase,
undeclared methods and their ``Allow``, the stateful links, real HTTP) is covered too.

Seeded and bounded: the same requests on every run, well under a minute.
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

# Every check but one: ``positive_data_acceptance`` ("a schema-valid request is accepted") is
# left to test_openapi_contract.py, which runs it on every operation, having first made a
# generated body true of what JSON Schema cannot state (see its ``unsayable``,
# ``in_this_deployment`` and ``excluded_for``). On the command line a body cannot be changed
# before it is sent, and a per-operation ``enabled = false`` in a config file does not hold
# against ``--checks all`` (schemathesis 4.32), so it is left out here for all of them. What it
# would find, and why: POST /v1/deliveries (``ask.expires_at`` within 90 days of now, Slack and
# Matrix destinations a 422 where neither runs, NUL at any depth of ``ask.target``),
# POST /v1/events (``approvalRequestId`` equal to ``elicitationId``, option ids distinct by
# value, the ce-* headers of binary mode, ``1.0`` for an integer), POST /v1/handup/requests
# (ids distinct, ``recommended`` indexing its options, the ``timeout`` grammar and one-year
# bound).
LEFT_TO_THE_PYTHON_TEST = "positive_data_acceptance"


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


async def test_schemathesis_cli_finds_nothing_with_every_check(
    served: Server, tmp_path: Path
) -> None:
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
        "--exclude-checks",
        LEFT_TO_THE_PYTHON_TEST,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_TELEMETRY": "false"}
    run = subprocess.run(  # noqa: ASYNC221 - the server is another process; nothing to await
        command,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis exited {run.returncode}:\n{output}\n{served.logs()}"

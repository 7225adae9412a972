"""The ``elicitbot`` command line, run as a real process (``python -m bot``) in a temporary cwd."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.superpipeline import CE_TYPE
from bot.app.config import AppConfig, StoreConfig
from bot.app.wiring import Elicitbot
from tests.unit.sources.superpipeline_fixtures import VALID

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config.example.toml"
EXAMPLE_SECRETS = {
    "ELICITBOT_INTAKE_TOKEN": "intake-token-0001",
    "SLACK_BOT_TOKEN": "xoxb-test-0001",
    "SLACK_APP_TOKEN": "xapp-test-0001",
    "MATRIX_ACCESS_TOKEN": "syt_test_0001",
    "MATRIX_PICKLE_KEY": "pickle-key-test-0001",
    "PINEWORK_TOKEN": "pinework-test-0001",
    "ELICITBOT_MCP_TOKEN_CI": "mcp-token-test-0001",
}
EXAMPLE_SECRET_KEYS = {
    "server.intake_token_env": "ELICITBOT_INTAKE_TOKEN",
    "slack.bot_token_env": "SLACK_BOT_TOKEN",
    "slack.app_token_env": "SLACK_APP_TOKEN",
    "matrix.access_token_env": "MATRIX_ACCESS_TOKEN",
    "matrix.pickle_key_env": "MATRIX_PICKLE_KEY",
    "sources.pinework[0].token_env": "PINEWORK_TOKEN",
    "mcp.agents.ci-agent.token_env": "ELICITBOT_MCP_TOKEN_CI",
}
STRUCTURED = "application/cloudevents+json"
SUBJECT = "evt.acme.superpipeline.elicitation.pending"
COMMAND_TIMEOUT_S = 60
STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 15.0


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any secret the example config names, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in EXAMPLE_SECRETS and k != "SLACK_SIGNING_SECRET"
    }
    env["ELICITBOT_LOG_LEVEL"] = "INFO"
    env.update(extra)
    return env


def elicitbot(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env=clean_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def event(case: str = "options", ce_id: str | None = None) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": ce_id or f"ce-{case}",
        "source": "https://superpipeline.example.org",
        "type": CE_TYPE,
        "subject": SUBJECT,
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "data": VALID[case],
    }


# --- check-config ------------------------------------------------------------------------------


def test_check_config_accepts_the_example_with_its_secrets(tmp_path: Path) -> None:
    done = elicitbot(tmp_path, "check-config", "-c", str(EXAMPLE), env=clean_env(**EXAMPLE_SECRETS))
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout
    assert str(EXAMPLE) in done.stdout


def test_check_config_names_each_missing_secret(tmp_path: Path) -> None:
    done = elicitbot(tmp_path, "check-config", "-c", str(EXAMPLE))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("config error:")]
    assert len(errors) == len(EXAMPLE_SECRET_KEYS), done.stderr
    for key, env in EXAMPLE_SECRET_KEYS.items():
        assert any(f"{key}:" in line and env in line for line in errors), (key, done.stderr)
    for value in EXAMPLE_SECRETS.values():
        assert value not in done.stderr


def test_check_config_names_the_one_missing_secret(tmp_path: Path) -> None:
    env = clean_env(**{k: v for k, v in EXAMPLE_SECRETS.items() if k != "MATRIX_ACCESS_TOKEN"})
    done = elicitbot(tmp_path, "check-config", "-c", str(EXAMPLE), env=env)
    assert done.returncode == 1
    assert "matrix.access_token_env" in done.stderr
    assert "slack.bot_token_env" not in done.stderr


def test_check_config_names_an_unknown_key(tmp_path: Path) -> None:
    config = write(tmp_path / "bad.toml", '[server]\nlisen = "127.0.0.1:8787"\n')
    done = elicitbot(tmp_path, "check-config", "-c", str(config))
    assert done.returncode == 1
    assert "server.lisen" in done.stderr


def test_check_config_names_a_followup_out_of_range(tmp_path: Path) -> None:
    config = write(
        tmp_path / "bad.toml",
        '[[routes]]\ndestinations = ["web"]\nfollowup_seconds = 3\n',
    )
    done = elicitbot(tmp_path, "check-config", "-c", str(config))
    assert done.returncode == 1, done.stdout
    assert "routes[0].followup_seconds" in done.stderr


def test_check_config_names_every_bad_key_at_once(tmp_path: Path) -> None:
    config = write(
        tmp_path / "bad.toml",
        '[server]\nlisen = "x"\n[store]\nurl = "mysql://db"\n[people]\nadmins = ["bob"]\n',
    )
    done = elicitbot(tmp_path, "check-config", "-c", str(config))
    assert done.returncode == 1
    for key in ("server.lisen", "store.url", "people.admins"):
        assert key in done.stderr, done.stderr


def test_check_config_names_the_scope_a_slack_user_group_needs(tmp_path: Path) -> None:
    """A ``slack:S…`` approver with an app made from a manifest (here: in the working directory,
    where it is looked for) that lacks ``usergroups:read``: named; with the repository's, ok."""
    config = write(
        tmp_path / "groups.toml",
        '[slack]\napp_token_env = "SLACK_APP_TOKEN"\n'
        '[[routes]]\ndestinations = ["slack:C0DEPLOYS"]\napprovers = ["slack:S0DEPLOY"]\n',
    )
    manifest = (REPO / "slack-app-manifest.yaml").read_text(encoding="utf-8")
    old = manifest.replace("      - usergroups:read", "      # -")
    write(tmp_path / "slack-app-manifest.yaml", old)
    env = clean_env(SLACK_BOT_TOKEN="xoxb-test-0001", SLACK_APP_TOKEN="xapp-test-0001")
    done = elicitbot(tmp_path, "check-config", "-c", str(config), env=env)
    print(done.stderr)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "config error: slack.manifest: slack-app-manifest.yaml lacks the bot scope "
        "usergroups:read, which routes[0].approvers needs to read who is in slack:S0DEPLOY "
        "(usergroups.users.list): add it under oauth_config.scopes.bot and reinstall the app"
    ]
    write(tmp_path / "slack-app-manifest.yaml", manifest)
    done = elicitbot(tmp_path, "check-config", "-c", str(config), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{config}: ok"


def test_check_config_refuses_a_file_that_is_not_toml(tmp_path: Path) -> None:
    config = write(tmp_path / "bad.toml", "[server\nlisten = \n")
    done = elicitbot(tmp_path, "check-config", "-c", str(config))
    assert done.returncode == 1
    assert "not valid TOML" in done.stderr


def test_check_config_refuses_a_missing_file(tmp_path: Path) -> None:
    done = elicitbot(tmp_path, "check-config", "-c", "nowhere.toml")
    assert done.returncode == 1
    assert "nowhere.toml" in done.stderr


def test_check_config_without_a_file_checks_the_embedded_default(tmp_path: Path) -> None:
    done = elicitbot(tmp_path, "check-config")
    assert done.returncode == 0, done.stderr
    assert "embedded default" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_check_config_without_c_reads_elicitbot_toml(tmp_path: Path) -> None:
    write(tmp_path / "elicitbot.toml", '[server]\nlisen = "127.0.0.1:8787"\n')
    done = elicitbot(tmp_path, "check-config")
    assert done.returncode == 1
    assert "server.lisen" in done.stderr


def test_the_console_script_is_installed(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "elicitbot"
    done = subprocess.run(
        [str(script), "check-config"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "embedded default" in done.stdout


# --- db upgrade --------------------------------------------------------------------------------


@pytest.mark.slow
def test_db_upgrade_creates_the_tables_in_a_fresh_sqlite_file(tmp_path: Path) -> None:
    config = write(tmp_path / "cfg.toml", '[store]\nurl = "sqlite:///fresh.db"\n')
    database = tmp_path / "fresh.db"
    assert not database.exists()

    done = elicitbot(tmp_path, "db", "upgrade", "-c", str(config))
    assert done.returncode == 0, done.stderr
    assert database.is_file(), "a relative SQLite path is relative to the working directory"
    with sqlite3.connect(database) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    expected = {"elicitation", "inbound", "delivery", "deadline", "answer", "audit", "outbox"}
    assert expected <= tables
    assert len(version) == 1

    again = elicitbot(tmp_path, "db", "upgrade", "-c", str(config))
    assert again.returncode == 0, again.stderr


# --- list and show -----------------------------------------------------------------------------


async def _seed(url: str) -> list[str]:
    """Two elicitations stored through the HTTP API of an in-process Elicitbot."""
    bot = Elicitbot(AppConfig(store=StoreConfig(url=url)), environ={})
    await bot.start()
    keys = []
    try:
        transport = httpx.ASGITransport(app=bot.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for case in ("options", "free-text"):
                response = await client.post(
                    "/v1/events",
                    content=json.dumps(event(case)),
                    headers={"Content-Type": STRUCTURED},
                )
                assert response.status_code == 202, response.text
                keys.append(response.json()["elicitation"])
    finally:
        await bot.stop()
    return keys


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Path, list[str]]:
    config = write(tmp_path / "cfg.toml", '[store]\nurl = "sqlite:///seeded.db"\n')
    keys = asyncio.run(_seed(f"sqlite:///{tmp_path / 'seeded.db'}"))
    return config, keys


@pytest.mark.slow
def test_list_prints_each_elicitation(tmp_path: Path, seeded: tuple[Path, list[str]]) -> None:
    config, keys = seeded
    done = elicitbot(tmp_path, "list", "-c", str(config))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line.split("\t")[0] for line in lines) == sorted(keys)
    assert all(line.split("\t")[1] == "pending" for line in lines)
    assert any("May I run the migration?" in line for line in lines)

    pending = elicitbot(tmp_path, "list", "--status", "pending", "-c", str(config))
    assert pending.stdout == done.stdout
    answered = elicitbot(tmp_path, "list", "--status", "answered", "-c", str(config))
    assert answered.returncode == 0
    assert answered.stdout == ""


def test_list_refuses_an_unknown_status(tmp_path: Path, seeded: tuple[Path, list[str]]) -> None:
    config, _ = seeded
    done = elicitbot(tmp_path, "list", "--status", "open", "-c", str(config))
    assert done.returncode == 2
    assert "--status" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("form", ["bare", "key"])
def test_show_prints_the_elicitation(
    tmp_path: Path, seeded: tuple[Path, list[str]], form: str
) -> None:
    config, keys = seeded
    source_id = VALID["options"]["elicitationId"]
    ident = source_id if form == "bare" else f"superpipeline:{source_id}"
    done = elicitbot(tmp_path, "show", ident, "-c", str(config))
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["id"] == f"superpipeline:{source_id}" in keys
    assert shown["sourceId"] == source_id
    assert shown["status"] == "pending"
    assert shown["workspace"] == "acme"
    assert shown["question"] == "May I run the migration?"
    assert [d["destination"] for d in shown["deliveries"]] == ["web"]
    assert isinstance(shown["deadlines"], list)
    assert [a["action"] for a in shown["audit"]] == ["intake"]


@pytest.mark.slow
def test_show_of_an_unknown_id_exits_1(tmp_path: Path, seeded: tuple[Path, list[str]]) -> None:
    config, _ = seeded
    done = elicitbot(tmp_path, "show", "eli_nope", "-c", str(config))
    assert done.returncode == 1
    assert "eli_nope" in done.stderr
    assert done.stdout == ""


# --- serve -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_healthy(base: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"serve exited early with {process.returncode}"
        try:
            if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{base}/healthz never answered 200 within {STARTUP_TIMEOUT_S} s")


@pytest.mark.slow
def test_serve_takes_events_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = write(
        tmp_path / "cfg.toml",
        f'[server]\nlisten = "127.0.0.1:{port}"\nintake_token_env = "SERVE_TEST_TOKEN"\n'
        '[store]\nurl = "sqlite:///serve.db"\n',
    )
    token = "serve-test-token-42"
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "serve", "-c", str(config)],
        cwd=tmp_path,
        env=clean_env(SERVE_TEST_TOKEN=token),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, process)
        assert (tmp_path / "serve.db").is_file()
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200

        body = json.dumps(event()).encode()
        headers = {"Content-Type": STRUCTURED}
        refused = httpx.post(f"{base}/v1/events", content=body, headers=headers, timeout=5)
        assert refused.status_code == 401

        auth = {"Authorization": f"Bearer {token}"}
        posted = httpx.post(
            f"{base}/v1/events", content=body, headers={**headers, **auth}, timeout=5
        )
        assert posted.status_code == 202, posted.text
        key = posted.json()["elicitation"]
        read = httpx.get(f"{base}/v1/elicitations/{key}", headers=auth, timeout=5)
        assert read.status_code == 200, read.text
        assert read.json()["status"] == "pending"
        assert read.json()["sourceId"] == VALID["options"]["elicitationId"]

        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    output = (tmp_path / "serve.log").read_text(encoding="utf-8", errors="replace")
    assert returncode == 0, output
    assert "elicitbot.started" in output
    assert "elicitbot.stopped" in output
    assert token not in output
    with sqlite3.connect(tmp_path / "serve.db") as conn:
        assert conn.execute("SELECT count(*) FROM elicitation").fetchone() == (1,)


@pytest.mark.slow
def test_serve_refuses_a_public_listen_without_an_intake_token(tmp_path: Path) -> None:
    config = write(
        tmp_path / "cfg.toml",
        f'[server]\nlisten = "0.0.0.0:{free_port()}"\n[store]\nurl = "sqlite:///x.db"\n',
    )
    done = elicitbot(tmp_path, "serve", "-c", str(config))
    assert done.returncode == 1
    assert "server.intake_token_env" in done.stderr


@pytest.mark.slow
def test_serve_refuses_to_start_without_a_named_secret(tmp_path: Path) -> None:
    config = write(
        tmp_path / "cfg.toml",
        f'[server]\nlisten = "127.0.0.1:{free_port()}"\nintake_token_env = "SERVE_TEST_TOKEN"\n'
        '[store]\nurl = "sqlite:///x.db"\n',
    )
    done = elicitbot(tmp_path, "serve", "-c", str(config))
    assert done.returncode == 1
    assert "server.intake_token_env" in done.stderr
    assert "SERVE_TEST_TOKEN" in done.stderr

"""``elicitbot check-config`` and ``elicitbot serve`` agree on every config (issue 15: check-config
printed "ok" for a config serve refused).

For each config file below, good and bad, the test runs the command ``check-config`` in process
and, for ``serve``, what it does before it listens: load the file, build ``Elicitbot`` (its
startup checks) and, for configs with no chat platform, ``prepare()`` (the migrations; with Slack or
Matrix it would ask the platform to accept the token, which is the outside world's verdict, not
the config's). The two verdicts must be the same, and so must the keys each one names. No
uvicorn is started.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from bot.app import cli
from bot.app.config import load_config
from bot.app.wiring import Elicitbot
from bot.domain.errors import ConfigError

SECRETS = {
    "AGREE_INTAKE": "intake-token-0001",
    "AGREE_SLACK_BOT": "xoxb-agree-0001",
    "AGREE_SLACK_SIGNING": "signing-agree-0001",
    "AGREE_SLACK_APP": "xapp-agree-0001",
    "AGREE_MATRIX": "syt-agree-0001",
    "AGREE_PINEWORK": "pinework-agree-0001",
}
SLACK_HTTP = (
    '[slack]\nbot_token_env = "AGREE_SLACK_BOT"\nsigning_secret_env = "AGREE_SLACK_SIGNING"\n'
)
SLACK_SOCKET = '[slack]\nbot_token_env = "AGREE_SLACK_BOT"\napp_token_env = "AGREE_SLACK_APP"\n'
MATRIX = (
    '[matrix]\nhomeserver = "http://127.0.0.1:9"\nuser_id = "@bot:example.org"\n'
    'access_token_env = "AGREE_MATRIX"\ndevice_id = "AGREE"\n'
)
PINEWORK = (
    '[[sources.pinework]]\nbase_url = "https://pinework.example"\ntoken_env = "AGREE_PINEWORK"\n'
    'workspace = "acme"\n'
)
PUBLIC = '[server]\nlisten = "0.0.0.0:8787"\n'
PUBLIC_WITH_TOKEN = '[server]\nlisten = "0.0.0.0:8787"\nintake_token_env = "AGREE_INTAKE"\n'
PROXIED = (
    '[server]\nlisten = "0.0.0.0:8787"\nintake_token_env = "AGREE_INTAKE"\n'
    'trusted_proxies = ["10.0.0.5", "fd00::/8"]\n[web]\nuser_header = "X-Forwarded-User"\n'
)

GROUP_ROUTE = '[[routes]]\ndestinations = ["slack:C0DEPLOYS"]\napprovers = ["slack:S0DEPLOY"]\n'
SLACK_SECRETS = ("AGREE_SLACK_BOT", "AGREE_SLACK_APP")

GOOD = 9
"""The first cases are configs serve takes; the rest it refuses."""
CASES: list[tuple[str, str, tuple[str, ...]]] = [
    # name, the config (beside its [store]), the secrets set
    ("the embedded default", "", ()),
    ("public listen with a token", PUBLIC_WITH_TOKEN, ("AGREE_INTAKE",)),
    ("behind a sign-in proxy", PROXIED, ("AGREE_INTAKE",)),
    ("slack over HTTP", SLACK_HTTP, ("AGREE_SLACK_BOT", "AGREE_SLACK_SIGNING")),
    ("slack in socket mode", SLACK_SOCKET, ("AGREE_SLACK_BOT", "AGREE_SLACK_APP")),
    ("matrix", MATRIX, ("AGREE_MATRIX",)),
    ("pinework", PINEWORK, ("AGREE_PINEWORK",)),
    ("nats", '[nats]\nurl = "nats://127.0.0.1:9"\n', ()),
    ("a slack user group approver", SLACK_SOCKET + GROUP_ROUTE, SLACK_SECRETS),
    ("public listen, no token", PUBLIC, ()),
    ("public v6 listen, no token", '[server]\nlisten = "[::]:8787"\n', ()),
    ("token named, not set", '[server]\nintake_token_env = "AGREE_INTAKE"\n', ()),
    ("user header, no trusted proxies", '[web]\nuser_header = "X-Forwarded-User"\n', ()),
    ("user header, public, no token", PUBLIC + '[web]\nuser_header = "X-Forwarded-User"\n', ()),
    ("slack without its secrets", SLACK_HTTP, ()),
    ("slack socket without the app token", SLACK_SOCKET, ("AGREE_SLACK_BOT",)),
    ("matrix without its token", MATRIX, ()),
    ("pinework without its token", PINEWORK, ()),
    ("a proxy with host bits set", '[server]\ntrusted_proxies = ["10.0.0.5/8"]\n', ()),
    ("an unknown key", '[server]\nlisen = "127.0.0.1:8787"\n', ()),
    ("listen without a port", '[server]\nlisten = "127.0.0.1"\n', ()),
    ("not TOML", "[server\n", ()),
    (
        "a slack user group, its manifest missing",
        SLACK_SOCKET + 'manifest = "no-such-manifest.yaml"\n' + GROUP_ROUTE,
        SLACK_SECRETS,
    ),
    ("a slack user group without slack", GROUP_ROUTE, ()),
]


@pytest.fixture(autouse=True)
def isolated_logging() -> Iterator[None]:
    """``cli.main`` configures logging for the process: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)


def keys(lines: str) -> list[str]:
    """The dotted key each problem line names (``key: message``)."""
    return sorted(line.split(": ", 1)[0] for line in lines.splitlines() if line.strip())


async def serve_verdict(path: Path) -> list[str]:
    """What ``serve`` refuses before it listens, as problem lines ([]: it would listen)."""
    try:
        config, _ = load_config(path)
        bot = Elicitbot(config)  # the process environment, as serve reads it
    except ConfigError as exc:
        return str(exc).splitlines()
    try:
        if config.slack is None and config.matrix is None:
            await bot.prepare()
    except ConfigError as exc:
        return str(exc).splitlines()
    finally:
        await bot.http_client.aclose()
        await bot.store.close()
    return []


@pytest.mark.parametrize(
    ("text", "secrets", "good"),
    [pytest.param(t, s, i < GOOD, id=n) for i, (n, t, s) in enumerate(CASES)],
)
async def test_check_config_says_what_serve_will_say(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    secrets: tuple[str, ...],
    good: bool,
) -> None:
    for name, value in SECRETS.items():
        if name in secrets:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)
    path = tmp_path / "elicitbot.toml"
    store = f'\n[store]\nurl = "sqlite:///{tmp_path / "agree.db"}"\n'
    path.write_text(text + store, encoding="utf-8")

    status = cli.main(["check-config", "-c", str(path)])
    out, err = capsys.readouterr()
    refused = await serve_verdict(path)

    assert (status == 0) == (not refused), (out, err, refused)
    assert (status == 0) == good, (out, err)  # the set holds both kinds: a real comparison
    if refused:
        assert status == 1
        named = [line.removeprefix("config error: ") for line in err.splitlines()]
        assert keys("\n".join(named)) == keys("\n".join(refused))
    else:
        assert out.strip().endswith(": ok")

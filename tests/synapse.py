"""A real Synapse homeserver for the Matrix tests.

One Synapse per test run, started by the session-scoped :func:`synapse` fixture: PyPI
``matrix-synapse`` run as a separate process (``SYNAPSE_PYTHON``, default this interpreter) on a
free loopback port, SQLite, no federation, every rate limit raised. Users are registered through the
shared-secret admin API. Tests stay independent through fresh rooms (:meth:`Homeserver.make_room`),
not by restarting the server; :meth:`Synapse.stop` / :meth:`Synapse.start` exist for the outage
test, which must leave it running.

Synapse is AGPL: it is only ever run as a separate test process, never imported, so none of its
code becomes part of elicitbot.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SHARED_SECRET = "test-shared-secret"  # a throw-away test server's, never a real one
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

_RATE_LIMITS = [
    "rc_message",
    "rc_registration",
    "rc_registration_token_validity",
    "rc_login.address",
    "rc_login.account",
    "rc_login.failed_attempts",
    "rc_joins.local",
    "rc_joins.remote",
    "rc_joins_per_room",
    "rc_invites.per_room",
    "rc_invites.per_user",
    "rc_invites.per_issuer",
    "rc_room_creation",
    "rc_3pid_validation",
    "rc_admin_redaction",
    "rc_presence.per_user",
    "rc_delayed_event_mgmt",
    "rc_reports",
    "rc_user_directory",
    "rc_profile",
    "rc_key_requests",
]


def _rate_limit_yaml() -> str:
    """``per_second: 0`` does not turn a limiter off in Synapse: huge numbers instead."""
    big = "{per_second: 100000, burst_count: 100000}"
    lines: list[str] = []
    groups: dict[str, list[str]] = {}
    for key in _RATE_LIMITS:
        top, _, sub = key.partition(".")
        if sub:
            groups.setdefault(top, []).append(sub)
        else:
            lines.append(f"{top}: {big}")
    for top, subs in groups.items():
        lines.append(f"{top}:")
        lines.extend(f"  {sub}: {big}" for sub in subs)
    return "\n".join(lines)


def _homeserver_yaml(port: int, workdir: Path) -> str:
    return f"""\
server_name: "localhost"
public_baseurl: "http://127.0.0.1:{port}/"
pid_file: "{workdir}/homeserver.pid"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{workdir}/homeserver.db"
signing_key_path: "{workdir}/localhost.signing.key"
media_store_path: "{workdir}/media_store"
enable_media_repo: false
report_stats: false
enable_metrics: false
registration_shared_secret: "{SHARED_SECRET}"
macaroon_secret_key: "test-macaroon-secret"
form_secret: "test-form-secret"
enable_registration: false
bcrypt_rounds: 4
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
log_config: "{workdir}/log.config"
{_rate_limit_yaml()}
"""


def _log_config(workdir: Path) -> str:
    return f"""\
version: 1
formatters:
  precise:
    format: '%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - %(request)s - %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: precise
    filename: {workdir}/homeserver.log
    encoding: utf8
root:
  level: INFO
  handlers: [file]
disable_existing_loggers: false
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(
    url: str, body: Any = None, *, token: str | None = None, method: str | None = None
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(  # noqa: S310 - a loopback test server
        url, data=data, method=method or ("GET" if body is None else "POST"), headers=headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.load(response)


@dataclass(frozen=True)
class MatrixUser:
    user_id: str
    password: str
    access_token: str
    device_id: str

    @property
    def key(self) -> str:
        """The identity key elicitbot uses: ``matrix:@name:localhost``."""
        return f"matrix:{self.user_id}"


class Synapse:
    """One Synapse process; ``start()`` waits for ``/versions``, ``stop()`` sends SIGTERM."""

    def __init__(self, workdir: Path, python: str | None = None) -> None:
        self.workdir = workdir
        self.python = python or os.environ.get("SYNAPSE_PYTHON") or sys.executable
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "homeserver.yaml"
        self.config.write_text(_homeserver_yaml(self.port, workdir), encoding="utf-8")
        (workdir / "log.config").write_text(_log_config(workdir), encoding="utf-8")
        self.output = workdir / "synapse.out"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.running:
            return
        with self.output.open("ab") as out:
            self.process = subprocess.Popen(
                [self.python, "-m", "synapse.app.homeserver", "-c", str(self.config)],
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self._fail(f"exited with {self.process.returncode}")
            try:
                http_json(f"{self.base_url}/_matrix/client/versions")
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    self.stop()
                    self._fail(f"not ready after {START_TIMEOUT:.0f} s")
                time.sleep(0.05)
            else:
                return

    def _fail(self, why: str) -> None:
        tail = self.output.read_text(encoding="utf-8", errors="replace")[-3000:]
        pytest.fail(f"synapse did not start: {why}\n{tail}", pytrace=False)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)

    def register(self, prefix: str, *, admin: bool = False) -> MatrixUser:
        """A new user with a uuid-suffixed name, through the shared-secret admin API."""
        username = f"{prefix}-{uuid.uuid4().hex[:8]}"
        password = uuid.uuid4().hex
        url = f"{self.base_url}/_synapse/admin/v1/register"
        nonce = http_json(url)["nonce"]
        message = "\0".join([nonce, username, password, "admin" if admin else "notadmin"])
        mac = hmac.new(SHARED_SECRET.encode(), message.encode(), hashlib.sha1).hexdigest()
        reply = http_json(
            url,
            {
                "nonce": nonce,
                "username": username,
                "password": password,
                "admin": admin,
                "mac": mac,
            },
        )
        return MatrixUser(reply["user_id"], password, reply["access_token"], reply["device_id"])

    def login(self, user: MatrixUser, device_id: str) -> MatrixUser:
        """A password login on ``device_id``: another access token (a new or the same device)."""
        reply = http_json(
            f"{self.base_url}/_matrix/client/v3/login",
            {
                "type": "m.login.password",
                "identifier": {"type": "m.id.user", "user": user.user_id},
                "password": user.password,
                "device_id": device_id,
            },
        )
        return MatrixUser(user.user_id, user.password, reply["access_token"], reply["device_id"])


class Homeserver:
    """Async helpers acting as people on the test server (raw client-server API over httpx)."""

    def __init__(self, synapse: Synapse, client: httpx.AsyncClient) -> None:
        self.synapse = synapse
        self.http = client

    @property
    def base_url(self) -> str:
        return self.synapse.base_url

    async def call(
        self, user: MatrixUser, method: str, path: str, body: Any = None, **params: Any
    ) -> Any:
        response = await self.http.request(
            method,
            f"{self.base_url}/_matrix/client/v3{path}",
            json=body,
            params=params or None,
            headers={"Authorization": f"Bearer {user.access_token}"},
            timeout=15,
        )
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json()

    async def make_room(
        self,
        creator: MatrixUser,
        members: list[MatrixUser],
        *,
        invite_only: list[MatrixUser] | None = None,
        encrypted: bool = False,
        power: dict[str, int] | None = None,
        name: str | None = None,
    ) -> str:
        """A fresh room made by ``creator``; ``members`` are invited and join, ``invite_only``
        are invited and left to answer the invite themselves."""
        invited = [u.user_id for u in [*members, *(invite_only or [])]]
        body: dict[str, Any] = {
            "preset": "private_chat",
            "invite": invited,
            "name": name or f"elicitbot test {uuid.uuid4().hex[:6]}",
        }
        state: list[dict[str, Any]] = []
        if encrypted:
            state.append(
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            )
        if state:
            body["initial_state"] = state
        if power:
            # Room version 12 gives the creator power of its own: it may not be listed.
            body["power_level_content_override"] = {"users": dict(power)}
        room_id: str = (await self.call(creator, "POST", "/createRoom", body))["room_id"]
        for member in members:
            await self.call(member, "POST", f"/join/{urllib.parse.quote(room_id)}", {})
        return room_id

    async def send(
        self, user: MatrixUser, room_id: str, event_type: str, content: dict[str, Any]
    ) -> str:
        txn = uuid.uuid4().hex
        path = f"/rooms/{urllib.parse.quote(room_id)}/send/{event_type}/{txn}"
        return str((await self.call(user, "PUT", path, content))["event_id"])

    async def say(self, user: MatrixUser, room_id: str, text: str) -> str:
        return await self.send(user, room_id, "m.room.message", {"msgtype": "m.text", "body": text})

    async def react(self, user: MatrixUser, room_id: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return await self.send(user, room_id, "m.reaction", content)

    async def reply_in_thread(
        self, user: MatrixUser, room_id: str, root: str, text: str, *, fallback: str | None = None
    ) -> str:
        """A thread reply as Element sends it (``is_falling_back``); ``fallback`` adds an old-style
        ``> quoted`` rich-reply fallback to the body."""
        body = text if fallback is None else f"> <{user.user_id}> {fallback}\n\n{text}"
        content = {
            "msgtype": "m.text",
            "body": body,
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": root},
            },
        }
        return await self.send(user, room_id, "m.room.message", content)

    async def edit(self, user: MatrixUser, room_id: str, original: str, text: str) -> str:
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": {"msgtype": "m.text", "body": text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": original},
        }
        return await self.send(user, room_id, "m.room.message", content)

    async def redact(self, user: MatrixUser, room_id: str, event_id: str) -> None:
        txn = uuid.uuid4().hex
        path = f"/rooms/{urllib.parse.quote(room_id)}/redact/{urllib.parse.quote(event_id)}/{txn}"
        await self.call(user, "PUT", path, {"reason": "test"})

    async def messages(
        self, user: MatrixUser, room_id: str, limit: int = 500
    ) -> list[dict[str, Any]]:
        """The room's timeline, oldest first (one page of up to ``limit`` events)."""
        path = f"/rooms/{urllib.parse.quote(room_id)}/messages"
        chunk = (await self.call(user, "GET", path, dir="b", limit=limit))["chunk"]
        return list(reversed(chunk))

    async def event(self, user: MatrixUser, room_id: str, event_id: str) -> dict[str, Any]:
        path = f"/rooms/{urllib.parse.quote(room_id)}/event/{urllib.parse.quote(event_id)}"
        return dict(await self.call(user, "GET", path))

    async def leave(self, user: MatrixUser, room_id: str) -> None:
        with contextlib.suppress(AssertionError):
            await self.call(user, "POST", f"/rooms/{urllib.parse.quote(room_id)}/leave", {})


@dataclass(frozen=True)
class Cast:
    """The accounts every Matrix test shares: the bot, alice (a workspace admin), bob, an agent."""

    bot: MatrixUser
    alice: MatrixUser
    bob: MatrixUser
    agent: MatrixUser


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    server = Synapse(tmp_path_factory.mktemp("synapse"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def cast(synapse: Synapse) -> Cast:
    return Cast(
        bot=synapse.register("elicitbot"),
        alice=synapse.register("alice"),
        bob=synapse.register("bob"),
        agent=synapse.register("agent"),
    )


@pytest.fixture
async def homeserver(synapse: Synapse) -> AsyncIterator[Homeserver]:
    synapse.start()  # a test that stopped it and failed before restarting must not break the next
    async with httpx.AsyncClient() as client:
        yield Homeserver(synapse, client)

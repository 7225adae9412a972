"""A local fake of the Slack Web API (aiohttp on 127.0.0.1, its own thread and event loop).

Point slack_sdk at it with ``AsyncWebClient(token=fake.token, base_url=fake.api_url)``: it serves
the same client from the test's event loop and from a subprocess. It

- checks ``Authorization: Bearer <token>`` (``not_authed`` / ``invalid_auth``);
- answers ``auth.test``, ``chat.postMessage`` (a unique, increasing ``ts``; the message is stored
  with its metadata), ``chat.update``, ``chat.postEphemeral``, ``conversations.open`` (a DM
  channel ``D<user>``), ``conversations.history`` and ``conversations.replies`` (see below),
  ``views.open`` (a modal, checked against the modal limits, with a
  ``trigger_id`` from :meth:`FakeSlack.issue_trigger`: single use, expired after 3 s; the view
  gets an ``id`` and a ``hash``), ``views.update`` (by ``view_id`` or ``external_id``; a ``hash``
  that is not the view's current one answers ``hash_conflict``; a new hash each time),
  ``views.push`` (a trigger id, as ``views.open``), the upload flow
  ``files.getUploadURLExternal`` → a POST of the bytes to the ``upload_url`` it gives →
  ``files.completeUploadExternal`` (with ``channel_id``/``thread_ts`` it shares the file as a
  message from the bot in that thread, a ``files`` entry naming it; the content is kept, see
  :meth:`FakeSlack.files`) and
  ``apps.connections.open`` (the app-level ``xapp-`` token only; the URL of its Socket Mode
  websocket, see below), ``usergroups.users.list`` (the members of a group given with
  :meth:`FakeSlack.add_usergroup`; an unknown id answers ``no_such_subteam``, none
  ``invalid_arguments``), ``usergroups.list`` (every such group with its ``handle``);
- answers as Slack does for the token's scopes (:attr:`FakeSlack.scopes`, every scope the
  manifest asks for unless a test takes one away): every answer carries ``x-oauth-scopes``, a
  method that needs a scope says so in ``x-accepted-oauth-scopes``, and without it answers
  ``missing_scope`` with ``needed`` and ``provided``;
- serves response URLs (:meth:`FakeSlack.issue_response_url`: at most 5 uses in 30 minutes);
- serves Socket Mode at ``/link``: says ``hello``, pushes the envelopes given to
  :meth:`FakeSlack.socket_send`, records the acks (:meth:`FakeSlack.socket_acks`);
- enforces the Block Kit limits with ``invalid_blocks`` and the violations
  in ``response_metadata.messages`` (:func:`block_kit_problems` is the same check, for unit
  tests), plus an approximation of the undocumented cumulative limit, ``msg_blocks_too_long``
  past :data:`MAX_TOTAL_TEXT` characters of block text;
- keeps a channel's timeline as Slack does: every ``ts`` is the wall-clock time it was taken
  (``<epoch seconds>.<microseconds>``, unique and increasing; ``clock=`` to follow a test's
  clock), so ``oldest`` means what it means to Slack. ``conversations.history`` lists the
  top-level messages (not thread replies), newest first; ``conversations.replies`` a thread,
  its parent then the replies, oldest first. Both take ``oldest``/``latest`` (exclusive unless
  ``inclusive``), ``limit`` (default 100, at most 999), ``cursor`` (from
  ``response_metadata.next_cursor``, given with ``has_more``), and show ``metadata`` only with
  ``include_all_metadata``. :meth:`FakeSlack.add_message` is somebody else talking in a channel;
- records every call (:class:`SlackCall`: method, parameters from query, form or JSON body,
  headers, what it answered);
- can be scripted (:meth:`FakeSlack.script`): an HTTP status with ``Retry-After`` (429), a Slack
  error code, ``drop=True``: carry the call out (a post is stored), then drop the connection
  without answering (the double-post experiment), or ``delay=N``: carry it out and answer
  only N seconds later (a client killed meanwhile never learns its ``ts``);
- rate limits on demand: :meth:`FakeSlack.storm` (every call of a method answers 429 with a
  ``Retry-After`` for a while) and :meth:`FakeSlack.limit` (a token bucket per channel, like
  Slack's one post per second per channel with a small burst; over it, 429 with the seconds until
  the next token as ``Retry-After``).

Standalone: ``python -m tests.slack_fake --port N --record FILE [--token T]`` serves until killed
and appends every call to FILE as a JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.slack_blocks import (
    MAX_MESSAGE_TEXT,
    block_kit_problems,
    block_text_length,
    view_problems,
)
from tests.slack_fake_base import (
    BOT_ID,
    BOT_USER,
    DEFAULT_TOKEN,
    TEAM_ID,
    SlackCall,
    _Script,
)
from tests.slack_fake_messages import Messages
from tests.slack_fake_modals import Modals

__all__ = [
    "BOT_ID",
    "BOT_USER",
    "MAX_MESSAGE_TEXT",
    "TEAM_ID",
    "FakeSlack",
    "SlackCall",
    "block_kit_problems",
    "block_text_length",
    "view_problems",
]

_JSON_PARAMS = ("blocks", "metadata", "attachments", "view", "files")
NEEDS_SCOPE = {
    "users.info": "users:read",
    "usergroups.users.list": "usergroups:read",
    "usergroups.list": "usergroups:read",
}
"""The bot scope a method needs, for the ones whose scope a test takes away."""


class FakeSlack(Messages, Modals):
    """The fake Web API. Use as a context manager (or ``start()``/``stop()``)."""

    def start(self) -> FakeSlack:
        self._thread = threading.Thread(target=self._serve, name="fake-slack", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake Slack API did not start in 10 s")
        if self._failed is not None:
            raise RuntimeError(f"the fake Slack API failed to start: {self._failed!r}")
        return self

    def stop(self) -> None:
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_sockets(), loop).result(timeout=10)
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._open())
        except BaseException as exc:
            self._failed = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _open(self) -> None:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._handle)
        app.router.add_post("/hooks/{hook}", self._hook)
        app.router.add_post("/upload/{file}", self._upload)
        app.router.add_get("/link", self._socket)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._port)
        await site.start()
        self._port = int(runner.addresses[0][1])
        self._runner = runner

    def script(
        self,
        method: str,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: float | None = None,
        drop: bool = False,
        delay: float = 0.0,
        times: int = 1,
        where: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        """The next ``times`` calls of ``method`` answer ``status`` (429 adds ``Retry-After``)
        with ``error``; with ``drop`` they are carried out and then left without an answer (the
        connection is cut); with ``delay`` they are carried out at once and answered only after
        ``delay`` seconds (a client killed meanwhile never learns the outcome). ``where``
        picks the calls it applies to by their parameters (a question, not a thread reply)."""
        if status == 429 and error is None:
            error = "ratelimited"
        with self._lock:
            self._scripts.append(
                _Script(method, status, error, retry_after, drop, delay, times, where)
            )

    def clear_scripts(self) -> None:
        """Forget every scripted answer not used yet."""
        with self._lock:
            self._scripts.clear()

    def storm(self, method: str, seconds: float, *, retry_after: float) -> None:
        """Every ``method`` call answers 429 with ``Retry-After: retry_after`` for ``seconds``."""
        with self._lock:
            self._storms[method] = (time.monotonic() + seconds, retry_after)

    def limit(self, method: str, *, per_second: float, burst: int) -> None:
        """A token bucket per channel for ``method`` (``burst`` tokens, ``per_second`` refill);
        a call finding it empty answers 429 with the seconds to the next token, rounded up."""
        with self._lock:
            self._limits[method] = (per_second, burst)
            self._buckets = {k: v for k, v in self._buckets.items() if k[0] != method}

    def calls_to(self, method: str) -> list[SlackCall]:
        return [c for c in self.calls() if c.method == method]

    def wait_for(
        self, predicate: Callable[[list[SlackCall]], bool], timeout: float = 15.0
    ) -> list[SlackCall]:
        """Poll (blocking) until ``predicate(calls)`` holds; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            calls = self.calls()
            if predicate(calls):
                return calls
            if time.monotonic() > deadline:
                methods = [c.method for c in calls]
                raise AssertionError(f"fake Slack: condition not met in {timeout} s; {methods}")
            time.sleep(0.02)

    def _take_script(self, method: str, params: Mapping[str, Any]) -> _Script | None:
        with self._lock:
            for script in self._scripts:
                if script.method == method and (script.where is None or script.where(params)):
                    script.times -= 1
                    if script.times <= 0:
                        self._scripts.remove(script)
                    return script
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await _params(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        script = self._take_script(method, params)
        status, extra_headers = 200, {}
        body: dict[str, Any] | None
        auth = self._auth(headers, method)
        limited = self._rate_limited(method, params) if auth is None else None
        if auth is not None:
            body = {"ok": False, "error": auth}
        elif limited is not None:
            status, body = 429, {"ok": False, "error": "ratelimited"}
            extra_headers["Retry-After"] = str(limited)
        elif script is not None and (script.status != 200 or script.error):
            status = script.status
            body = {"ok": False, "error": script.error or "internal_error"}
            if script.retry_after is not None:
                extra_headers["Retry-After"] = str(int(script.retry_after))
        else:
            body = self._answer(method, params)
        if script is not None and script.drop:
            self._log(SlackCall(method, params, headers, status, None))
            transport = request.transport
            if transport is not None:
                transport.abort()
            raise asyncio.CancelledError
        self._log(SlackCall(method, params, headers, status, body))
        if script is not None and script.delay > 0:
            await asyncio.sleep(script.delay)
        extra_headers["x-oauth-scopes"] = ",".join(sorted(self.scopes))
        if method in NEEDS_SCOPE:
            extra_headers["x-accepted-oauth-scopes"] = NEEDS_SCOPE[method]
        return web.json_response(body, status=status, headers=extra_headers)

    def _auth(self, headers: Mapping[str, str], method: str = "") -> str | None:
        given = headers.get("authorization", "")
        if not given:
            return "not_authed"
        scheme, _, token = given.partition(" ")
        if method == "apps.connections.open":
            return None if token == self.app_token else "not_allowed_token_type"
        if scheme.lower() != "bearer" or token != self.token:
            return "invalid_auth"
        return None

    def _rate_limited(self, method: str, params: Mapping[str, Any]) -> int | None:
        """Seconds for ``Retry-After`` when this call is over a storm or a limit, else None."""
        now = time.monotonic()
        with self._lock:
            storm = self._storms.get(method)
            if storm is not None:
                until, retry_after = storm
                if now < until:
                    return max(1, math.ceil(retry_after))
                del self._storms[method]
            limit = self._limits.get(method)
            if limit is None:
                return None
            per_second, burst = limit
            slot = (method, str(params.get("channel", "")))
            tokens, at = self._buckets.get(slot, (float(burst), now))
            tokens = min(float(burst), tokens + (now - at) * per_second)
            if tokens >= 1.0:
                self._buckets[slot] = (tokens - 1.0, now)
                return None
            self._buckets[slot] = (tokens, now)
            return max(1, math.ceil((1.0 - tokens) / per_second))

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        needed = NEEDS_SCOPE.get(method)
        if needed is not None and needed not in self.scopes:
            provided = ",".join(sorted(self.scopes))
            return {"ok": False, "error": "missing_scope", "needed": needed, "provided": provided}
        handler = {
            "auth.test": self._auth_test,
            "api.test": lambda p: {"ok": True, "args": p},
            "chat.postMessage": self._post,
            "chat.update": self._update,
            "chat.postEphemeral": self._ephemeral,
            "conversations.open": self._open_dm,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "views.open": self._open_view,
            "views.update": self._update_view,
            "views.push": self._push_view,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
            "users.info": self._users_info,
            "usergroups.users.list": self._usergroup_users,
            "usergroups.list": self._usergroups_list,
            "apps.connections.open": self._connections_open,
        }.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        return handler(params)

    def add_user(
        self,
        user: str,
        *,
        display_name: str = "",
        real_name: str = "",
        name: str | None = None,
        is_bot: bool = False,
    ) -> None:
        """A workspace member ``users.info`` knows (any other id answers ``user_not_found``).
        An app installed without ``users:read``:
        ``script("users.info", error="missing_scope", times=N)``."""
        member = {
            "id": user,
            "team_id": TEAM_ID,
            "name": name or user.lower(),
            "deleted": False,
            "real_name": real_name,
            "is_bot": is_bot,
            "profile": {
                "display_name": display_name,
                "display_name_normalized": display_name,
                "real_name": real_name,
                "real_name_normalized": real_name,
            },
        }
        with self._lock:
            # Made on first use: the rest of the fake's state is set up in __init__.
            self._users: dict[str, dict[str, Any]] = {**getattr(self, "_users", {}), user: member}

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            member = getattr(self, "_users", {}).get(str(params.get("user") or ""))
        if member is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": {**member, "profile": dict(member["profile"])}}

    def add_usergroup(self, group: str, users: Iterable[str], *, handle: str = "") -> None:
        """A user group (``S…``) and its members, as ``usergroups.users.list`` lists them; again:
        its members changed. ``handle``: what ``usergroups.list`` calls it (default: the id in
        lower case). Without ``usergroups:read``: ``fake.scopes.discard(...)``."""
        with self._lock:
            self._usergroups[group] = list(users)
            self._handles[group] = handle or group.lower()

    def _usergroups_list(self, _: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            groups = [
                {"id": g, "team_id": TEAM_ID, "handle": h, "name": h.replace("-", " ").title(),
                 "user_count": len(self._usergroups.get(g, []))}
                for g, h in self._handles.items()
            ]  # fmt: skip
        return {"ok": True, "usergroups": groups}

    def _usergroup_users(self, params: dict[str, Any]) -> dict[str, Any]:
        group = params.get("usergroup")
        if not isinstance(group, str) or not group:
            return {
                "ok": False,
                "error": "invalid_arguments",
                "response_metadata": {"messages": ["[ERROR] missing required field: usergroup"]},
            }
        with self._lock:
            found = self._usergroups.get(group)
        if found is None:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(found)}

    def _auth_test(self, _: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://acme.slack.com/",
            "team": "Acme",
            "user": "elicitbot",
            "team_id": TEAM_ID,
            "user_id": BOT_USER,
            "bot_id": BOT_ID,
        }


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
    for name in _JSON_PARAMS:
        value = params.get(name)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                params[name] = json.loads(value)
    return params


def _main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", type=Path, default=None)
    parser.add_argument("--token", default=DEFAULT_TOKEN)
    args = parser.parse_args(list(argv) if argv is not None else None)
    fake = FakeSlack(args.token, port=args.port, record=args.record).start()
    print(f"fake Slack API at {fake.api_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    _main()

"""A local fake of the Slack Web API (aiohttp on 127.0.0.1, its own thread and event loop).

Over 500 lines on purpose: one fake server whose handlers share its state and scripts.

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
  websocket, see below);
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
import base64
import binascii
import contextlib
import json
import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_TOKEN = "xoxb-test-elicitbot"
DEFAULT_APP_TOKEN = "xapp-1-test-elicitbot"
BOT_USER = "U0ELICITBOT"
BOT_ID = "B0ELICITBOT"
TEAM_ID = "T0ACME"

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
MAX_ID = 255
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_TEXT_OBJECT = 3000
MAX_OPTIONS = 100
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_PLACEHOLDER = 150
MAX_MESSAGE_TEXT = 40_000
MAX_TOTAL_TEXT = 12_000
"""Slack rejects messages whose blocks hold about this much text in all (bolt-js #2509, #2867)."""
MAX_MODAL_BLOCKS = 100
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_INPUT_LENGTH = 3000
MAX_LABEL = 2000
TRIGGER_SECONDS = 3.0
RESPONSE_URL_USES = 5
RESPONSE_URL_SECONDS = 30 * 60
HISTORY_LIMIT = 100
MAX_HISTORY_LIMIT = 999

_JSON_PARAMS = ("blocks", "metadata", "attachments", "view", "files")
_SELECTS = ("static_select", "multi_static_select")


# --------------------------------------------------------------------------- Block Kit checks


def _text_object(obj: Any, where: str, limit: int, problems: list[str]) -> int:
    """Check a text object; returns its length (0 when malformed)."""
    if not isinstance(obj, Mapping) or obj.get("type") not in ("plain_text", "mrkdwn"):
        problems.append(f"{where}: must be a plain_text or mrkdwn text object")
        return 0
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        problems.append(f"{where}.text: must be a non-empty string")
        return 0
    if len(text) > limit:
        problems.append(f"{where}.text: {len(text)} characters, more than {limit}")
    return len(text)


def _plain(obj: Any, where: str, limit: int, problems: list[str]) -> int:
    if isinstance(obj, Mapping) and obj.get("type") != "plain_text":
        problems.append(f"{where}: must be plain_text")
    return _text_object(obj, where, limit, problems)


def _check_id(value: Any, where: str, problems: list[str]) -> None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > MAX_ID):
        problems.append(f"{where}: must be a string of 1 to {MAX_ID} characters")


def _element(el: Any, where: str, problems: list[str]) -> int:
    if not isinstance(el, Mapping):
        problems.append(f"{where}: must be an object")
        return 0
    kind = el.get("type")
    _check_id(el.get("action_id"), f"{where}.action_id", problems)
    if kind == "button":
        total = _plain(el.get("text"), f"{where}.text", MAX_BUTTON_TEXT, problems)
        value = el.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > MAX_BUTTON_VALUE):
            problems.append(f"{where}.value: must be a string of at most {MAX_BUTTON_VALUE}")
        url = el.get("url")
        if url is not None and (not isinstance(url, str) or len(url) > MAX_URL):
            problems.append(f"{where}.url: must be a string of at most {MAX_URL}")
        if el.get("style") not in (None, "primary", "danger"):
            problems.append(f"{where}.style: must be primary or danger")
        return total
    if kind in _SELECTS:
        total = 0
        if "placeholder" in el:
            total += _plain(el["placeholder"], f"{where}.placeholder", MAX_PLACEHOLDER, problems)
        options = el.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= MAX_OPTIONS:
            problems.append(f"{where}.options: must hold 1 to {MAX_OPTIONS} options")
            return total
        for i, option in enumerate(options):
            at = f"{where}.options[{i}]"
            if not isinstance(option, Mapping):
                problems.append(f"{at}: must be an object")
                continue
            total += _plain(option.get("text"), f"{at}.text", MAX_OPTION_TEXT, problems)
            if option.get("description") is not None:
                total += _plain(
                    option["description"], f"{at}.description", MAX_OPTION_TEXT, problems
                )
            value = option.get("value")
            if not isinstance(value, str) or not value or len(value) > MAX_OPTION_VALUE:
                problems.append(f"{at}.value: must be a string of 1 to {MAX_OPTION_VALUE}")
        values = [o.get("value") for o in options if isinstance(o, Mapping)]
        if len(values) != len(set(map(str, values))):
            problems.append(f"{where}.options: option values must be unique")
        initial = list(el.get("initial_options") or [])
        if el.get("initial_option") is not None:
            initial.append(el["initial_option"])
        if kind == "static_select" and "initial_options" in el:
            problems.append(f"{where}.initial_options: only a multi-select has them")
        for i, chosen in enumerate(initial):
            if chosen not in options:
                problems.append(f"{where}.initial_option[{i}]: must match one of its options")
        return total
    if kind in ("overflow", "datepicker", "image", "users_select", "conversations_select"):
        return 0
    problems.append(f"{where}.type: unsupported element {kind!r}")
    return 0


def _block(block: Any, where: str, problems: list[str]) -> int:
    """Check one block; returns the length of its text."""
    if not isinstance(block, Mapping):
        problems.append(f"{where}: must be an object")
        return 0
    _check_id(block.get("block_id"), f"{where}.block_id", problems)
    kind = block.get("type")
    total = 0
    if kind == "header":
        total += _plain(block.get("text"), f"{where}.text", MAX_HEADER_TEXT, problems)
    elif kind == "section":
        text, fields = block.get("text"), block.get("fields")
        if text is None and not fields:
            problems.append(f"{where}: needs text or fields")
        if text is not None:
            total += _text_object(text, f"{where}.text", MAX_SECTION_TEXT, problems)
        if fields is not None:
            if not isinstance(fields, list) or len(fields) > MAX_FIELDS:
                problems.append(f"{where}.fields: at most {MAX_FIELDS}")
            else:
                for i, f in enumerate(fields):
                    total += _text_object(f, f"{where}.fields[{i}]", MAX_FIELD_TEXT, problems)
        if block.get("accessory") is not None:
            total += _element(block["accessory"], f"{where}.accessory", problems)
    elif kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_CONTEXT_ELEMENTS:
            problems.append(f"{where}.elements: must hold 1 to {MAX_CONTEXT_ELEMENTS}")
        else:
            for i, el in enumerate(elements):
                if isinstance(el, Mapping) and el.get("type") == "image":
                    continue
                total += _text_object(el, f"{where}.elements[{i}]", MAX_TEXT_OBJECT, problems)
    elif kind == "actions":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_ACTIONS_ELEMENTS:
            problems.append(f"{where}.elements: must hold 1 to {MAX_ACTIONS_ELEMENTS}")
        else:
            for i, el in enumerate(elements):
                total += _element(el, f"{where}.elements[{i}]", problems)
    elif kind not in ("divider", "image", "rich_text"):
        problems.append(f"{where}.type: unsupported block {kind!r}")
    return total


def block_kit_problems(blocks: Any, text: Any = None) -> list[str]:
    """Every Block Kit limit a message breaks (empty: Slack would take it)."""
    problems: list[str] = []
    if isinstance(text, str) and len(text) > MAX_MESSAGE_TEXT:
        problems.append(f"text: {len(text)} characters, more than {MAX_MESSAGE_TEXT}")
    if blocks is None:
        return problems
    if not isinstance(blocks, list):
        return [*problems, "blocks: must be an array"]
    if len(blocks) > MAX_BLOCKS:
        problems.append(f"blocks: {len(blocks)} blocks, more than {MAX_BLOCKS}")
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, Mapping) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("blocks: block_id values must be unique")
    for i, block in enumerate(blocks):
        _block(block, f"blocks[{i}]", problems)
    return problems


def block_text_length(blocks: Any) -> int:
    """All the text in the blocks, in code points (what the cumulative limit counts)."""
    probe: list[str] = []
    return sum(_block(b, "", probe) for b in blocks) if isinstance(blocks, list) else 0


def _input_block(block: Mapping[str, Any], where: str, problems: list[str]) -> None:
    _plain(block.get("label"), f"{where}.label", MAX_LABEL, problems)
    if block.get("hint") is not None:
        _plain(block.get("hint"), f"{where}.hint", MAX_LABEL, problems)
    el = block.get("element")
    if not isinstance(el, Mapping):
        problems.append(f"{where}.element: required")
        return
    _check_id(el.get("action_id"), f"{where}.element.action_id", problems)
    if el.get("type") == "plain_text_input":
        for name in ("max_length", "min_length"):
            value = el.get(name)
            low = 1 if name == "max_length" else 0
            if value is not None and (not isinstance(value, int) or not low <= value <= 3000):
                problems.append(f"{where}.element.{name}: must be {low} to {MAX_INPUT_LENGTH}")
    elif el.get("type") in _SELECTS:
        _element(el, f"{where}.element", problems)
    else:
        problems.append(f"{where}.element.type: unsupported {el.get('type')!r}")


def view_problems(view: Any) -> list[str]:
    """Every modal limit a ``views.open`` view breaks (empty: Slack would open it)."""
    if not isinstance(view, Mapping) or view.get("type") != "modal":
        return ["view.type: must be modal"]
    problems: list[str] = []
    _plain(view.get("title"), "view.title", MAX_MODAL_TITLE, problems)
    for name in ("submit", "close"):
        if view.get(name) is not None:
            _plain(view[name], f"view.{name}", MAX_MODAL_TITLE, problems)
    _check_id(view.get("callback_id"), "view.callback_id", problems)
    meta = view.get("private_metadata")
    if meta is not None and (not isinstance(meta, str) or len(meta) > MAX_PRIVATE_METADATA):
        problems.append(f"view.private_metadata: at most {MAX_PRIVATE_METADATA} characters")
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= MAX_MODAL_BLOCKS:
        return [*problems, f"view.blocks: must hold 1 to {MAX_MODAL_BLOCKS} blocks"]
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, Mapping) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("view.blocks: block_id values must be unique")
    has_input = False
    for i, block in enumerate(blocks):
        if isinstance(block, Mapping) and block.get("type") == "input":
            has_input = True
            _check_id(block.get("block_id"), f"view.blocks[{i}].block_id", problems)
            _input_block(block, f"view.blocks[{i}]", problems)
        else:
            _block(block, f"view.blocks[{i}]", problems)
    if has_input and view.get("submit") is None:
        problems.append("view.submit: required with input blocks")
    return problems


# --------------------------------------------------------------------------- the fake


@dataclass(frozen=True)
class SlackCall:
    """One request to the fake, and what it answered."""

    method: str
    params: dict[str, Any]
    """Query, form and JSON parameters together; ``blocks``/``metadata`` strings parsed."""
    headers: dict[str, str]
    """Header names lower-cased."""
    status: int
    response: dict[str, Any] | None
    """None when the connection was dropped."""
    at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.response is not None and bool(self.response.get("ok"))


@dataclass
class _Script:
    method: str
    status: int
    error: str | None
    retry_after: float | None
    drop: bool
    delay: float
    times: int
    where: Callable[[Mapping[str, Any]], bool] | None = None
    """Only calls whose parameters this accepts take the script (None: every call)."""


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _ts_value(value: Any) -> Decimal | None:
    """A ``ts``-like parameter as an exact number (None: not given); ValueError if malformed."""
    if value is None or value == "":
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation as exc:
        raise ValueError(value) from exc
    if not number.is_finite():
        raise ValueError(value)
    return number


def _cursor(ts: str) -> str:
    """An opaque cursor, as Slack's look (``next_ts:<ts>`` in base64)."""
    return base64.b64encode(f"next_ts:{ts}".encode()).decode()


def _from_cursor(cursor: str) -> Decimal:
    try:
        text = base64.b64decode(cursor.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(cursor) from exc
    prefix, _, ts = text.partition(":")
    value = _ts_value(ts) if prefix == "next_ts" else None
    if value is None:
        raise ValueError(cursor)
    return value


def _is_reply(message: Mapping[str, Any]) -> bool:
    """In a thread and not its parent (a broadcast reply shows in the channel too)."""
    thread = message.get("thread_ts")
    return bool(thread) and thread != message["ts"] and message.get("subtype") != "thread_broadcast"


class FakeSlack:
    """The fake Web API. Use as a context manager (or ``start()``/``stop()``)."""

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        app_token: str = DEFAULT_APP_TOKEN,
        port: int = 0,
        record: Path | None = None,
        on_call: Callable[[SlackCall], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.token = token
        self._clock = clock
        self._last_micros = 0
        self.app_token = app_token
        self._views: list[dict[str, Any]] = []
        self._current_views: dict[str, dict[str, Any]] = {}
        """Every view by id as it stands now (opened, pushed, updated)."""
        self._view_updates: list[dict[str, Any]] = []
        self._pushed: list[dict[str, Any]] = []
        self._files: dict[str, dict[str, Any]] = {}
        self._triggers: dict[str, float] = {}
        self._hooks: dict[str, dict[str, Any]] = {}
        self._storms: dict[str, tuple[float, float]] = {}
        self._limits: dict[str, tuple[float, int]] = {}
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_acks: list[dict[str, Any]] = []
        self._socket_connects = 0
        self._port = port
        self._record = record
        self._on_call = on_call
        self._lock = threading.Lock()
        self._calls: list[SlackCall] = []
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._ephemerals: list[dict[str, Any]] = []
        self._scripts: list[_Script] = []
        self.unknown_channels: set[str] = set()
        """Channels that answer ``channel_not_found``."""
        self.archived_channels: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def api_url(self) -> str:
        """What ``base_url`` of the SDK client must be (with the trailing slash)."""
        return f"{self.base_url}/api/"

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

    # ------------------------------------------------------------------ scripting and reading

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

    def issue_trigger(self, age: float = 0.0) -> str:
        """A trigger id as Slack puts in an interaction payload (``age`` seconds old)."""
        trigger = f"{int(time.time())}.{secrets.token_hex(6)}"
        with self._lock:
            self._triggers[trigger] = time.monotonic() - age
        return trigger

    def issue_response_url(self, age: float = 0.0) -> str:
        hook = secrets.token_hex(8)
        with self._lock:
            self._hooks[hook] = {"issued": time.monotonic() - age, "uses": 0, "posts": []}
        return f"{self.base_url}/hooks/{hook}"

    def responses(self) -> list[dict[str, Any]]:
        """What was posted to response URLs, in order."""
        with self._lock:
            posts = [p for h in self._hooks.values() for p in h["posts"]]
        return sorted(posts, key=lambda p: p["at"])

    def views(self) -> list[dict[str, Any]]:
        """Modals opened with ``views.open`` (as opened)."""
        with self._lock:
            return [dict(v) for v in self._views]

    def view(self, view_id: str) -> dict[str, Any] | None:
        """A view as it stands now (after its updates)."""
        with self._lock:
            found = self._current_views.get(view_id)
            return dict(found) if found is not None else None

    def view_updates(self) -> list[dict[str, Any]]:
        """Views as ``views.update`` set them, in order (each with its ``id`` and new ``hash``)."""
        with self._lock:
            return [dict(v) for v in self._view_updates]

    def pushed_views(self) -> list[dict[str, Any]]:
        """Modals pushed with ``views.push``."""
        with self._lock:
            return [dict(v) for v in self._pushed]

    def files(self) -> list[dict[str, Any]]:
        """Files uploaded and completed: ``id``, ``filename``, ``title``, ``content`` (the bytes
        as text), ``channel``, ``thread_ts``."""
        with self._lock:
            done = [dict(f) for f in self._files.values() if f["completed"]]
        return [
            {**f, "content": f["content"].decode("utf-8", "replace") if f["content"] else ""}
            for f in done
        ]

    def socket_send(self, envelope: Mapping[str, Any], timeout: float = 10.0) -> None:
        """Push an envelope to every open Socket Mode connection (blocking until sent)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the fake is not running")

        async def send() -> None:
            for ws in list(self._sockets):
                await ws.send_json(dict(envelope))

        asyncio.run_coroutine_threadsafe(send(), loop).result(timeout=timeout)

    def socket_acks(self) -> list[dict[str, Any]]:
        """Messages the Socket Mode client sent back (acks carry ``envelope_id``)."""
        with self._lock:
            return [dict(a) for a in self._socket_acks]

    @property
    def socket_connections(self) -> int:
        """Socket Mode connections opened so far."""
        with self._lock:
            return self._socket_connects

    def calls(self) -> list[SlackCall]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[SlackCall]:
        return [c for c in self.calls() if c.method == method]

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """The channel's stored messages, oldest first."""
        with self._lock:
            return [dict(m) for m in self._messages.get(channel, [])]

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages(channel) if m["ts"] == ts), None)

    def add_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U0SOMEONE",
        thread_ts: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> str:
        """Somebody else says ``text`` in ``channel`` (or in a thread): stored as a post would
        be, with no call recorded; returns its ts."""
        with self._lock:
            message: dict[str, Any] = {
                "type": "message",
                "ts": self._stamp(),
                "user": user,
                "text": text,
                "blocks": [],
            }
            if thread_ts:
                message["thread_ts"] = thread_ts
            if metadata is not None:
                message["metadata"] = dict(metadata)
            self._messages.setdefault(channel, []).append(message)
            return str(message["ts"])

    def ephemerals(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for m in self._ephemerals]

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

    # ------------------------------------------------------------------ serving

    def _take_script(self, method: str, params: Mapping[str, Any]) -> _Script | None:
        with self._lock:
            for script in self._scripts:
                if script.method == method and (script.where is None or script.where(params)):
                    script.times -= 1
                    if script.times <= 0:
                        self._scripts.remove(script)
                    return script
        return None

    def _next_ts(self) -> str:
        with self._lock:
            return self._stamp()

    def _stamp(self) -> str:
        """Now as a ``ts``, later than every one before (call it under the lock)."""
        micros = max(round(self._clock() * 1_000_000), self._last_micros + 1)
        self._last_micros = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

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
        return web.json_response(body, status=status, headers=extra_headers)

    def _log(self, call: SlackCall) -> None:
        with self._lock:
            self._calls.append(call)
        if self._record is not None:
            with self._record.open("a", encoding="utf-8") as out:
                out.write(json.dumps(asdict(call), ensure_ascii=False) + "\n")
        if self._on_call is not None:
            self._on_call(call)

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

    def _channel_error(self, channel: Any) -> str | None:
        if not isinstance(channel, str) or not channel or channel in self.unknown_channels:
            return "channel_not_found"
        if channel in self.archived_channels:
            return "is_archived"
        return None

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
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

    def _content_error(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        blocks, text = params.get("blocks"), params.get("text")
        if not blocks and not text:
            return {"ok": False, "error": "no_text"}
        problems = block_kit_problems(blocks, text)
        if problems:
            return {
                "ok": False,
                "error": "invalid_blocks",
                "response_metadata": {"messages": [f"[ERROR] {p}" for p in problems]},
            }
        if block_text_length(blocks) > MAX_TOTAL_TEXT:
            return {"ok": False, "error": "msg_blocks_too_long"}
        return None

    def _post(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if (problem := self._content_error(params)) is not None:
            return problem
        message = {
            "type": "message",
            "ts": self._next_ts(),
            "user": BOT_USER,
            "bot_id": BOT_ID,
            "text": params.get("text", ""),
            "blocks": params.get("blocks") or [],
        }
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        if isinstance(params.get("metadata"), Mapping):
            message["metadata"] = dict(params["metadata"])
        with self._lock:
            self._messages.setdefault(str(channel), []).append(message)
        shown = {k: v for k, v in message.items() if k != "metadata"}
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": shown}

    def _update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), params.get("ts")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if (problem := self._content_error(params)) is not None:
            return problem
        with self._lock:
            stored = next((m for m in self._messages.get(str(channel), []) if m["ts"] == ts), None)
            if stored is None:
                return {"ok": False, "error": "message_not_found"}
            stored["text"] = params.get("text", "")
            stored["blocks"] = params.get("blocks") or []
            stored["edited"] = {"user": BOT_USER, "ts": self._stamp()}
            if isinstance(params.get("metadata"), Mapping):
                stored["metadata"] = dict(params["metadata"])
        return {"ok": True, "channel": channel, "ts": ts, "text": params.get("text", "")}

    def _ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, user = params.get("channel"), params.get("user")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        if not isinstance(user, str) or not user:
            return {"ok": False, "error": "user_not_found"}
        if (problem := self._content_error(params)) is not None:
            return problem
        ts = self._next_ts()
        with self._lock:
            self._ephemerals.append({**params, "message_ts": ts})
        return {"ok": True, "message_ts": ts}

    def _open_dm(self, params: dict[str, Any]) -> dict[str, Any]:
        users = str(params.get("users") or "")
        if not users or "," in users:
            return {"ok": False, "error": "user_not_found" if not users else "not_implemented"}
        return {"ok": True, "channel": {"id": f"D{users}"}}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        with self._lock:
            stored = [dict(m) for m in self._messages.get(str(channel), []) if not _is_reply(m)]
        return _timeline(stored, params, newest_first=True)

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = params.get("channel"), params.get("ts")
        if (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        with self._lock:
            stored = self._messages.get(str(channel), [])
            thread = [dict(m) for m in stored if m["ts"] == ts or m.get("thread_ts") == ts]
        if not ts or not any(m["ts"] == ts for m in thread):
            return {"ok": False, "error": "thread_not_found"}
        return _timeline(thread, params, newest_first=False)

    def _take_trigger(self, params: Mapping[str, Any]) -> str | None:
        """The error of a ``trigger_id`` (None: good, and used up now)."""
        trigger = params.get("trigger_id")
        with self._lock:
            issued = self._triggers.pop(str(trigger), None) if trigger else None
        if issued is None:
            return "invalid_trigger_id" if trigger else "invalid_arguments"
        if time.monotonic() - issued > TRIGGER_SECONDS:
            return "expired_trigger_id"
        return None

    def _checked_view(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the view given, an error answer or {}), checked against the modal limits."""
        view = params.get("view")
        if isinstance(view, str):
            with contextlib.suppress(ValueError):
                view = json.loads(view)
        problems = view_problems(view)
        if problems:
            return {}, {
                "ok": False,
                "error": "invalid_arguments",
                "response_metadata": {"messages": [f"[ERROR] {p}" for p in problems]},
            }
        return dict(view) if isinstance(view, Mapping) else {}, {}

    def _new_view(self, view: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Store a new view (call it under the lock): an id and a hash."""
        opened = {
            **view,
            **extra,
            "id": f"V{len(self._current_views) + 1:08d}",
            "hash": f"{time.time():.6f}.{secrets.token_hex(4)}",
        }
        self._current_views[opened["id"]] = opened
        return opened

    def _open_view(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._add_view(params, self._views)

    def _push_view(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._add_view(params, self._pushed)

    def _add_view(self, params: dict[str, Any], into: list[dict[str, Any]]) -> dict[str, Any]:
        """``views.open`` / ``views.push``: a fresh trigger, a view within the limits, recorded."""
        if (error := self._take_trigger(params)) is not None:
            return {"ok": False, "error": error}
        view, problem = self._checked_view(params)
        if problem:
            return problem
        with self._lock:
            added = self._new_view(view)
            into.append(added)
        return {"ok": True, "view": added}

    def _update_view(self, params: dict[str, Any]) -> dict[str, Any]:
        view_id, external = params.get("view_id"), params.get("external_id")
        view, problem = self._checked_view(params)
        if problem:
            return problem
        with self._lock:
            if view_id:
                current = self._current_views.get(str(view_id))
            else:
                current = next(
                    (
                        v
                        for v in self._current_views.values()
                        if external and v.get("external_id") == external
                    ),
                    None,
                )
            if current is None:
                return {"ok": False, "error": "not_found"}
            given = params.get("hash")
            if given and given != current["hash"]:
                return {"ok": False, "error": "hash_conflict"}
            updated = {
                **view,
                "id": current["id"],
                "hash": f"{time.time():.6f}.{secrets.token_hex(4)}",
            }
            self._current_views[current["id"]] = updated
            self._view_updates.append(updated)
        return {"ok": True, "view": updated}

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = params.get("filename")
        try:
            length = int(params.get("length") or 0)
        except ValueError:
            length = 0
        if not isinstance(filename, str) or not filename or length <= 0:
            return {"ok": False, "error": "invalid_arguments"}
        with self._lock:
            file_id = f"F{len(self._files) + 1:08d}"
            self._files[file_id] = {
                "id": file_id,
                "filename": filename,
                "length": length,
                "snippet_type": params.get("snippet_type"),
                "content": None,
                "title": None,
                "completed": False,
                "channel": None,
                "thread_ts": None,
            }
        return {"ok": True, "upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        """The upload URL: the file's bytes, raw (as slack_sdk sends them) or as a form's
        ``file``; they must be as long as ``files.getUploadURLExternal`` was told."""
        file_id = request.match_info["file"]
        if request.content_type == "multipart/form-data":
            form = await request.post()
            part = form.get("file")
            if isinstance(part, web.FileField):
                data = part.file.read()
            else:
                data = part.encode() if isinstance(part, str) else bytes(part or b"")
        else:
            data = await request.read()
        with self._lock:
            stored = self._files.get(file_id)
            status = 404 if stored is None else 200
            if stored is not None:
                if len(data) != stored["length"]:
                    status = 400
                else:
                    stored["content"] = data
        self._log(
            SlackCall(
                "upload",
                {"file_id": file_id, "length": len(data)},
                {k.lower(): v for k, v in request.headers.items()},
                status,
                {"ok": status == 200},
            )
        )
        if status != 200:
            return web.Response(status=status, text="invalid_upload")
        return web.Response(status=200, text=f"OK - {len(data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        channel, thread_ts = params.get("channel_id"), params.get("thread_ts")
        if channel and (error := self._channel_error(channel)) is not None:
            return {"ok": False, "error": error}
        shared: list[dict[str, Any]] = []
        with self._lock:
            for f in files:
                stored = self._files.get(str(f.get("id"))) if isinstance(f, Mapping) else None
                if stored is None or stored["content"] is None:
                    return {"ok": False, "error": "file_not_found"}
                stored["title"] = f.get("title") or stored["filename"]
            for f in files:
                stored = self._files[str(f["id"])]
                stored.update(completed=True, channel=channel, thread_ts=thread_ts)
                shared.append(
                    {
                        "id": stored["id"],
                        "name": stored["filename"],
                        "title": stored["title"],
                        "size": stored["length"],
                    }
                )
            if channel:
                message: dict[str, Any] = {
                    "type": "message",
                    "ts": self._stamp(),
                    "user": BOT_USER,
                    "bot_id": BOT_ID,
                    "text": params.get("initial_comment") or "",
                    "blocks": [],
                    "files": shared,
                    "upload": True,
                }
                if thread_ts:
                    message["thread_ts"] = thread_ts
                self._messages.setdefault(str(channel), []).append(message)
        return {"ok": True, "files": shared}

    def _connections_open(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self._port}/link"}

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        hook = request.match_info["hook"]
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        with self._lock:
            state = self._hooks.get(hook)
            if state is None:
                return web.Response(status=404, text="no_such_url")
            if time.monotonic() - state["issued"] > RESPONSE_URL_SECONDS:
                return web.Response(status=404, text="expired_url")
            if state["uses"] >= RESPONSE_URL_USES:
                return web.Response(status=404, text="used_url")
            state["uses"] += 1
            state["posts"].append({"hook": hook, "body": body, "at": time.time()})
        return web.Response(status=200, text="ok")

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        with self._lock:
            self._socket_connects += 1
        self._sockets.append(ws)
        await ws.send_json(
            {"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0ELICITBOT"}}
        )
        try:
            async for message in ws:
                if message.type.name == "TEXT":
                    with contextlib.suppress(ValueError), self._lock:
                        self._socket_acks.append(json.loads(message.data))
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
        return ws

    async def _close_sockets(self) -> None:
        for ws in list(self._sockets):
            await ws.close()


def _timeline(
    messages: list[dict[str, Any]], params: Mapping[str, Any], *, newest_first: bool
) -> dict[str, Any]:
    """One page of ``messages`` as conversations.history/replies answer it: the range
    ``oldest``..``latest`` (bounds excluded unless ``inclusive``), ordered, from ``cursor`` on,
    ``limit`` long; ``next_cursor`` and ``has_more`` when more remain."""
    bounds: dict[str, Decimal | None] = {}
    for name in ("oldest", "latest"):
        try:
            bounds[name] = _ts_value(params.get(name))
        except ValueError:
            return {"ok": False, "error": f"invalid_ts_{name}"}
    try:
        limit = int(params.get("limit") or HISTORY_LIMIT)
    except ValueError:
        return {"ok": False, "error": "invalid_limit"}
    limit = max(1, min(limit, MAX_HISTORY_LIMIT))
    inclusive = _truthy(params.get("inclusive"))
    oldest, latest = bounds["oldest"], bounds["latest"]

    def inside(ts: Decimal) -> bool:
        if oldest is not None and (ts < oldest or (ts == oldest and not inclusive)):
            return False
        return latest is None or ts < latest or (ts == latest and inclusive)

    ordered = sorted(
        (m for m in messages if inside(Decimal(m["ts"]))),
        key=lambda m: Decimal(m["ts"]),
        reverse=newest_first,
    )
    if params.get("cursor"):
        try:
            start = _from_cursor(str(params["cursor"]))
        except ValueError:
            return {"ok": False, "error": "invalid_cursor"}
        ordered = [
            m
            for m in ordered
            if (Decimal(m["ts"]) <= start if newest_first else Decimal(m["ts"]) >= start)
        ]
    page, rest = ordered[:limit], ordered[limit:]
    with_metadata = _truthy(params.get("include_all_metadata"))
    body: dict[str, Any] = {
        "ok": True,
        "messages": [
            {k: v for k, v in m.items() if with_metadata or k != "metadata"} for m in page
        ],
        "has_more": bool(rest),
    }
    if rest:
        body["response_metadata"] = {"next_cursor": _cursor(rest[0]["ts"])}
    return body


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

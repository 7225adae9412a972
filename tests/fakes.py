"""Recording fakes for the outbound ports, and a real local webhook server.

- :class:`FakeChat` is a :class:`~bot.domain.ports.ChatAdapter` returning typed refs: it records
  every post, update and notice, and a post is idempotent by its key (like a Matrix txn id: the
  same key returns the same ref and records nothing new). ``fail_next(n, exc)`` makes the next
  ``n`` calls raise. ``tests/contract/test_chat_contract.py`` holds it to what the real adapters do.
- :class:`FakeSink` is an :class:`~bot.domain.ports.AnswerSink` recording each ``deliver``.
- :class:`FakeWebhook` is an HTTP server on 127.0.0.1 (its own thread, so it serves a subprocess
  as well as the test's event loop) that records each request and answers with scripted statuses.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.ports import Notice, PromptView
from bot.domain.refs import MatrixRef, MessageRef, SlackRef


@dataclass(frozen=True)
class Post:
    destination: str
    view: PromptView
    idempotency_key: str
    uncertain: datetime | None
    ref: MessageRef


@dataclass(frozen=True)
class Update:
    destination: str
    ref: MessageRef
    view: PromptView
    idempotency_key: str


@dataclass(frozen=True)
class Notified:
    destination: str
    notice: Notice
    idempotency_key: str


@dataclass(frozen=True)
class Call:
    """Any call the fake received, including those it failed on purpose."""

    method: str
    destination: str
    idempotency_key: str
    failed: DeliveryError | None
    uncertain: datetime | None = None
    """A post's ``uncertain`` flag (None for other methods)."""


class _Failures:
    """A queue of scripted failures: ``fail_next(n, exc)`` raises ``exc`` on the next n calls."""

    def __init__(self) -> None:
        self._queue: list[tuple[DeliveryError, frozenset[str] | None]] = []

    def add(self, n: int, exc: DeliveryError, methods: Iterable[str] | None) -> None:
        only = frozenset(methods) if methods is not None else None
        self._queue.extend([(exc, only)] * n)

    def take(self, method: str) -> DeliveryError | None:
        for index, (exc, only) in enumerate(self._queue):
            if only is None or method in only:
                del self._queue[index]
                return exc
        return None

    def __len__(self) -> int:
        return len(self._queue)


class FakeChat:
    """A recording chat platform speaking the typed port, like the real adapters.

    - ``post`` returns the platform's ref: a :class:`~bot.domain.refs.SlackRef` (``ts``
      ``1700000000.NNNNNN``) for ``slack``, a :class:`~bot.domain.refs.MatrixRef` (event id
      ``$fakeNNNNNN``) for ``matrix``; the ref's channel or room is the destination's.
    - A post is idempotent by (destination, idempotency key): posting the same key again returns
      the same ref and records nothing new in ``posted`` (Matrix's transaction ids do this; Slack
      finds the first message by its metadata when the repeat is ``uncertain``), but the message
      then shows the later view, as both real adapters bring an adopted message up to date.
    - Posting to a destination, or updating a ref, of another platform is a
      PermanentDeliveryError, as for the real ones.
    - ``current(ref)`` is the view a posted message shows now (after its latest post or update).
    """

    def __init__(self, platform: str = "slack") -> None:
        if platform not in ("slack", "matrix"):
            raise ValueError(f"FakeChat: no refs for platform {platform!r}")
        self.platform = platform
        self.post_interval = 0.0
        self.seeds = platform == "matrix"
        """As the real adapters: a Matrix copy gets a ``seed`` effect after its post."""
        self.posted: list[Post] = []
        self.updated: list[Update] = []
        self.seeded: list[Update] = []
        self.notified: list[Notified] = []
        self.calls: list[Call] = []
        self._refs: dict[tuple[str, str], MessageRef] = {}
        self._shown: dict[MessageRef, PromptView] = {}
        self._failures = _Failures()
        self._counter = 0

    def fail_next(
        self, n: int, exc: DeliveryError, *, methods: Iterable[str] | None = None
    ) -> None:
        """The next ``n`` calls (of ``methods``, default any) raise ``exc``."""
        self._failures.add(n, exc, methods)

    @property
    def pending_failures(self) -> int:
        return len(self._failures)

    def current(self, ref: MessageRef) -> PromptView | None:
        """What the message ``ref`` shows now; None when this fake never posted it."""
        return self._shown.get(ref)

    def _call(
        self, method: str, destination: str, idempotency_key: str, uncertain: datetime | None = None
    ) -> None:
        exc = self._failures.take(method)
        self.calls.append(Call(method, destination, idempotency_key, exc, uncertain))
        if exc is not None:
            raise exc

    def _target(self, destination: str) -> str:
        platform, _, target = destination.partition(":")
        if platform != self.platform or not target:
            raise PermanentDeliveryError(f"{destination!r} is not a {self.platform} destination")
        return target

    def _new_ref(self, target: str) -> MessageRef:
        self._counter += 1
        if self.platform == "matrix":
            return MatrixRef(room_id=target, event_id=f"$fake{self._counter:06d}")
        return SlackRef(channel=target, ts=f"1700000000.{self._counter:06d}")

    def _own(self, ref: MessageRef) -> bool:
        return isinstance(ref, MatrixRef if self.platform == "matrix" else SlackRef)

    async def post(
        self,
        destination: str,
        view: PromptView,
        *,
        idempotency_key: str,
        uncertain: datetime | None,
    ) -> MessageRef:
        self._call("post", destination, idempotency_key, uncertain)
        target = self._target(destination)
        known = self._refs.get((destination, idempotency_key))
        if known is not None:
            self._shown[known] = view
            return known
        ref = self._new_ref(target)
        self._refs[(destination, idempotency_key)] = ref
        self._shown[ref] = view
        self.posted.append(Post(destination, view, idempotency_key, uncertain, ref))
        return ref

    async def update(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        self._call("update", destination, idempotency_key)
        if not self._own(ref):
            raise PermanentDeliveryError(f"{self.platform} update: {ref!r} is not its message ref")
        self._shown[ref] = view
        self.updated.append(Update(destination, ref, view, idempotency_key))

    async def seed(
        self, destination: str, ref: MessageRef, view: PromptView, *, idempotency_key: str
    ) -> None:
        self._call("seed", destination, idempotency_key)
        if not self._own(ref):
            raise PermanentDeliveryError(f"{self.platform} seed: {ref!r} is not its message ref")
        self.seeded.append(Update(destination, ref, view, idempotency_key))

    async def notify(
        self,
        destination: str,
        notice: Notice,
        *,
        idempotency_key: str,
        uncertain: datetime | None = None,
    ) -> None:
        self._call("notify", destination, idempotency_key)
        self.notified.append(Notified(destination, notice, idempotency_key))


@dataclass(frozen=True)
class Delivered:
    view: PromptView
    idempotency_key: str


class FakeSink:
    """A recording answer sink; ``fail_next(n, exc)`` as for :class:`FakeChat`."""

    def __init__(self) -> None:
        self.delivered: list[Delivered] = []
        self.attempts: list[str] = []
        self._failures = _Failures()

    def fail_next(self, n: int, exc: DeliveryError) -> None:
        self._failures.add(n, exc, None)

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        self.attempts.append(idempotency_key)
        exc = self._failures.take("deliver")
        if exc is not None:
            raise exc
        self.delivered.append(Delivered(view, idempotency_key))


@dataclass(frozen=True)
class WebhookRequest:
    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body (None when empty or not JSON)."""
    raw: bytes
    status: int
    """What the fake answered."""
    at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic()``)."""


class FakeWebhook:
    """A real HTTP server on 127.0.0.1 answering scripted statuses in order, then ``default``.

    Use as a context manager (or ``start()``/``stop()``); ``url`` is ``http://127.0.0.1:<port>/hook``.
    """

    def __init__(self, statuses: Iterable[int] = (), *, default: int = 200) -> None:
        self._lock = threading.Lock()
        self._script: list[int] = list(statuses)
        self.default = default
        self.requests: list[WebhookRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def script(self, statuses: Iterable[int], *, default: int | None = None) -> None:
        """Replace what the next requests get."""
        with self._lock:
            self._script = list(statuses)
            if default is not None:
                self.default = default

    def recorded(self) -> list[WebhookRequest]:
        with self._lock:
            return list(self.requests)

    def wait_for(
        self, predicate: Callable[[list[WebhookRequest]], bool], timeout: float = 15.0
    ) -> list[WebhookRequest]:
        """Poll (blocking) until ``predicate(requests)`` holds; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.recorded()
            if predicate(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"webhook: condition not met in {timeout} s; got {got}")
            time.sleep(0.02)

    def _next_status(self) -> int:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    def _record(self, request: WebhookRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                status = webhook._next_status()
                webhook._record(
                    WebhookRequest(
                        method="POST",
                        path=self.path,
                        headers={k.lower(): v for k, v in self.headers.items()},
                        body=body,
                        raw=raw,
                        status=status,
                    )
                )
                reply = json.dumps({"status": status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads ``requests`` instead."""

        return Handler

    def start(self) -> FakeWebhook:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeWebhook:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

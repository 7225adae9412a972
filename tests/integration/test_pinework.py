"""Pinework end to end: a fake Pinework on 127.0.0.1 <-> poller, Service, SqlStore, Dispatcher.

The fake serves the question API (list with cursor paging, get, answer, secret) with Pinework's
own rules and error codes, checks the bearer token, and records every request, so each test
asserts the exact requests elicitbot made. Store-backed tests run on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest
import structlog

from adapters.sources.pinework import (
    PineworkPoller,
    PineworkSecretSink,
    PineworkSink,
    PollError,
    account_key,
)
from adapters.sources.pinework.poller import NOT_FOUND_TEXT
from bot.app import logs
from bot.domain.actions import OutcomeKind, Reply
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.model import Answer, Attempt, ElicitationKey, Identity, People, Route, Status
from bot.domain.records import EffectView
from bot.domain.views import writeback_note
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "sources" / "pinework.json").read_text(
        encoding="utf-8"
    )
)
TOKEN = "pinework-token-CANARY-7d1e"
SECRET = "sk_live_SECRET-CANARY-9f3a"
WORKSPACE = "ws_main"
C1, C2 = "slack:C1", "slack:C2"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
PEOPLE = People(principals={"slack:U0ALICE": "usr_alice"})


# --- the fake Pinework --------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int


@dataclass
class Scripted:
    status: int
    body: Any = field(default_factory=dict)
    apply: bool = False
    """Carry the request out as usual but answer ``status`` (a reply lost after the fact)."""


class FakePinework:
    """Pinework's question API. ``style``: ``cursor`` pages are ``{"data", "nextCursor"}``;
    ``after`` pages are ``{"items"}`` only (the client continues after the last id)."""

    def __init__(self, style: str = "cursor") -> None:
        self.style = style
        self.questions: dict[str, dict[str, Any]] = {}
        self.seen: list[Seen] = []
        self.scripts: dict[str, list[Scripted]] = {"list": [], "answer": [], "secret": []}
        self.remember_keys = True
        self._replies: dict[str, tuple[int, Any]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, case: str, **changes: Any) -> dict[str, Any]:
        q: dict[str, Any] = copy.deepcopy(FIXTURES["valid"][case])
        q.update(changes)
        with self._lock:
            self.questions[q["id"]] = q
        return q

    def change(self, question_id: str, **changes: Any) -> None:
        with self._lock:
            self.questions[question_id].update(changes)

    def requests(self, method: str | None = None, suffix: str = "") -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if (method is None or s.method == method) and s.path.endswith(suffix)
            ]

    # -- the API -----------------------------------------------------------------------------

    def _list(self, query: dict[str, str]) -> tuple[int, Any]:
        limit = min(int(query.get("limit", "25")), 100)
        rows = [q for q in reversed(self.questions.values()) if q["status"] == query["status"]]
        after = query.get("startingAfter")
        if after is not None:
            ids = [q["id"] for q in rows]
            rows = rows[ids.index(after) + 1 :] if after in ids else []
        page, more = rows[:limit], len(rows) > limit
        if self.style == "cursor":
            return 200, {
                "object": "list",
                "data": page,
                "nextCursor": page[-1]["id"] if more else None,
            }
        return 200, {"items": page}

    def _answer(self, q: dict[str, Any], body: Any, key: str | None) -> tuple[int, Any]:
        if not key:
            return 400, {"error": {"code": "idempotency_key_required"}}
        if q["status"] == "resolved":
            return 409, {"error": {"code": "question_resolved"}}
        if q["answerMode"] == "secret_input":
            return 409, {"error": {"code": "question_needs_secret"}}
        given = body.get("answer") if isinstance(body, dict) else None
        if not isinstance(given, dict):
            return 400, {"error": {"code": "answer_mode_mismatch"}}
        text, selected = given.get("text"), given.get("selected")
        keys = {o["key"] for o in q.get("options") or []}
        mode = q["answerMode"]
        if mode == "free_text":
            if selected:
                return 400, {"error": {"code": "answer_mode_mismatch"}}
            if not text:
                return 400, {"error": {"code": "invalid_answer"}}
        elif selected is not None:
            if any(k not in keys for k in selected):
                return 400, {"error": {"code": "invalid_option_key"}}
            if (mode == "single_select" and len(selected) != 1) or not selected:
                return 400, {"error": {"code": "answer_mode_mismatch"}}
        else:  # the answer route takes no written answer alone on a select question
            return 400, {"error": {"code": "answer_mode_mismatch"}}
        self._resolve(q, {"text": text, "selected": selected})
        return 200, {"question": q}

    def _secret(self, q: dict[str, Any], body: Any) -> tuple[int, Any]:
        if q["answerMode"] != "secret_input":
            return 409, {"error": {"code": "question_not_secret_input"}}
        if q["status"] == "resolved":
            return 409, {"error": {"code": "question_resolved"}}
        value = body.get("value") if isinstance(body, dict) else None
        if not isinstance(value, str) or not 1 <= len(value) <= 10_000:
            return 400, {"error": {"code": "invalid_secret"}}
        self._resolve(q, {"text": None, "selected": None, "secretId": "sec_0001"})
        return 200, {"question": q}

    def _resolve(self, q: dict[str, Any], answer: dict[str, Any]) -> None:
        q.update(
            status="resolved",
            answer=answer,
            answeredBy={"type": "user", "id": "usr_elicitbot"},
            answeredAt="2026-11-10T09:40:00Z",
            updatedAt="2026-11-10T09:40:00Z",
        )

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]
    ) -> tuple[int, Any]:
        if headers.get("authorization") != f"Bearer {TOKEN}":
            return 401, {"error": {"code": "unauthorized"}}
        parts = path.strip("/").split("/")
        if parts[:3] != ["api", "v1", "questions"]:
            return 404, {"error": {"code": "not_found"}}
        if method == "GET" and len(parts) == 3:
            return self._scripted("list") or self._list(query)
        q = self.questions.get(parts[3]) if len(parts) > 3 else None
        if q is None:
            return 404, {"error": {"code": "question_not_found"}}
        if method == "GET" and len(parts) == 4:
            return 200, {"question": q}
        route = parts[4] if len(parts) == 5 else ""
        if method != "POST" or route not in ("answer", "secret"):
            return 404, {"error": {"code": "not_found"}}
        key = headers.get("idempotency-key")
        replay = self._replies.get(f"{route}:{key}")
        if replay is not None and self.remember_keys:
            return replay
        scripted = self.scripts[route].pop(0) if self.scripts[route] else None
        if scripted is not None and not scripted.apply:
            return scripted.status, scripted.body
        reply = self._answer(q, body, key) if route == "answer" else self._secret(q, body)
        if reply[0] < 300:
            self._replies[f"{route}:{key}"] = reply
        return (scripted.status, scripted.body) if scripted is not None else reply

    def _scripted(self, route: str) -> tuple[int, Any] | None:
        if not self.scripts[route]:
            return None
        scripted = self.scripts[route].pop(0)
        return scripted.status, scripted.body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                split = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(split.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with fake._lock:
                    status, reply = fake._route(method, split.path, query, body, headers)
                    fake.seen.append(Seen(method, split.path, query, headers, body, status))
                out = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read ``seen``."""

        return Handler

    def __enter__(self) -> FakePinework:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# --- the rig -----------------------------------------------------------------------------------


@dataclass
class Rig:
    store: SqlStore
    clock: FakeClock
    chat: FakeChat
    service: Service
    dispatcher: Dispatcher
    poller: PineworkPoller
    fake: FakePinework
    client: httpx.AsyncClient


def make_rig(
    store: SqlStore, clock: FakeClock, fake: FakePinework, client: httpx.AsyncClient
) -> Rig:
    tokens = {account_key(fake.url, WORKSPACE): TOKEN}
    chat = FakeChat("slack")
    dispatcher = Dispatcher(
        store,
        clock,
        {"slack": chat},
        {"pinework": PineworkSink(client, tokens)},
        lambda k: f"/#{k}",
    )
    service = Service(
        store,
        clock,
        PEOPLE,
        [Route(destinations=(C1, C2))],
        on_change=dispatcher.wake,
        secret_sinks={"pinework": PineworkSecretSink(client, tokens)},
    )
    poller = PineworkPoller(
        base_url=fake.url + "/",
        workspace=WORKSPACE,
        poll_seconds=0.05,
        client=client,
        elicitations=service,
        token=TOKEN,
        state=store,
        clock=clock,
    )
    return Rig(store, clock, chat, service, dispatcher, poller, fake, client)


@pytest.fixture
def fake() -> Iterator[FakePinework]:
    with FakePinework() as server:
        yield server


@pytest.fixture
async def rig(store: SqlStore, clock: FakeClock, fake: FakePinework) -> AsyncIterator[Rig]:
    async with httpx.AsyncClient() as client:
        yield make_rig(store, clock, fake, client)


async def posted(rig: Rig, case: str, **changes: Any) -> ElicitationKey:
    """A question put up in Pinework, polled in, and posted to both channels."""
    q = rig.fake.add(case, **changes)
    result = await rig.poller.poll_once()
    assert result["taken_in"] >= 1
    await rig.dispatcher.run_once()
    return ElicitationKey(f"pinework:{q['id']}")


async def outbox(store: SqlStore, key: ElicitationKey, kind: str) -> list[EffectView]:
    return [r for r in await store.outbox(key) if r.kind == kind]


# --- polling -----------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["cursor", "after"])
async def test_paging_lists_every_open_question_with_exact_requests(
    store: SqlStore, clock: FakeClock, style: str
) -> None:
    with FakePinework(style) as fake:
        for n in range(130):
            fake.add("free_text", id=f"qst_{n:016d}", text=f"Question {n}?")
        fake.add("free_text", id="qst_resolved00000000", status="resolved")
        fake.add("free_text", id="qst_otherwork0000000", workspaceId="ws_other")
        async with httpx.AsyncClient() as client:
            rig = make_rig(store, clock, fake, client)
            result = await rig.poller.poll_once()
            assert result == {"listed": 130, "taken_in": 130, "closed": 0}
            first, second = fake.requests("GET")
            assert (first.path, first.query) == (
                "/api/v1/questions",
                {"status": "open", "limit": "100"},
            )
            # Newest first: the first page ends with question 31 (of 131 open), cursor or last id.
            assert second.query == {
                "status": "open",
                "limit": "100",
                "startingAfter": "qst_0000000000000031",
            }
            assert all(s.headers["authorization"] == f"Bearer {TOKEN}" for s in fake.seen)
            assert all(s.status == 200 for s in fake.seen)
            assert await store.count("elicitation") == 130
            assert len([r for r in await store.outbox() if r.kind == "post"]) == 260
            inbound = await store.count("inbound")

            again = await rig.poller.poll_once()
            assert again == {"listed": 130, "taken_in": 0, "closed": 0}
            assert len(fake.requests("GET")) == 4, "a second round lists again, nothing else"
            assert await store.count("inbound") == inbound, "unchanged questions are not re-sent"
            assert rig.poller.connected


async def test_each_question_is_posted_once_and_changes_update_every_copy(rig: Rig) -> None:
    key = await posted(rig, "single_select")
    assert sorted(p.destination for p in rig.chat.posted) == [C1, C2]
    view = rig.chat.posted[0].view
    assert view.elicitation.question == "Which region should the canary go to?"
    assert [o.id for o in view.elicitation.options] == ["eu", "us"]

    assert (await rig.poller.poll_once())["taken_in"] == 0
    await rig.dispatcher.run_once()
    assert len(rig.chat.posted) == 2
    assert rig.chat.updated == []

    rig.fake.change("qst_Single0000000001", text="Which region gets the canary first?")
    assert (await rig.poller.poll_once())["taken_in"] == 1
    await rig.dispatcher.run_once()
    assert len(rig.chat.posted) == 2
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    assert all(
        u.view.elicitation.question == "Which region gets the canary first?"
        for u in rig.chat.updated
    )
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING


async def test_an_answer_given_in_pinework_closes_every_copy_and_is_not_written_back(
    rig: Rig,
) -> None:
    key = await posted(rig, "multi_select")
    rig.fake.change(
        "qst_Multi00000000001",
        status="resolved",
        answer={"text": "only b", "selected": ["b"]},
        answeredBy={"type": "user", "id": "usr_bob"},
        answeredAt="2026-11-10T09:35:00Z",
    )
    assert (await rig.poller.poll_once())["closed"] == 1
    # The write-back row goes first (Pinework has the answer: nothing is sent), then the copies.
    assert await rig.dispatcher.run_once() == 1
    assert rig.chat.updated == []
    assert await rig.dispatcher.run_once() == 2

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert (view.answer.respondent, view.answer.option_ids, view.answer.text) == (
        "pinework:usr_bob",
        ("b",),
        "only b",
    )
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    assert all(u.view.status is Status.ANSWERED for u in rig.chat.updated)
    assert [r.state for r in await outbox(rig.store, key, "writeback")] == ["done"]
    assert rig.fake.requests("POST") == [], "Pinework has this answer already"
    assert [a.action for a in await rig.store.audit(key)][-1] == "answered"

    assert (await rig.poller.poll_once())["closed"] == 0
    assert len(rig.fake.requests("GET", "/qst_Multi00000000001")) == 1, "read once, then dropped"


async def test_a_system_close_cancels_every_copy_with_its_reason(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    rig.fake.change(
        "qst_AbCdEfGh12345678",
        status="resolved",
        answer={"text": "[system:run_ended]", "selected": None},
        answeredBy=None,
    )
    assert (await rig.poller.poll_once())["closed"] == 1
    assert await rig.dispatcher.run_once() == 1  # the close's write-back: nothing to send
    assert rig.chat.updated == []
    assert await rig.dispatcher.run_once() == 2

    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.CANCELLED
    assert view.answer is not None
    assert view.answer.text == "[system:run_ended]"
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    for update in rig.chat.updated:
        assert update.view.status is Status.CANCELLED
        assert update.view.answer is not None
        assert update.view.answer.text == "[system:run_ended]"
    assert rig.fake.requests("POST") == []


async def test_a_question_resolved_while_elicitbot_was_down_is_closed_after_restart(
    db_url: str, clock: FakeClock, fake: FakePinework
) -> None:
    first_store = SqlStore.from_url(db_url)
    async with httpx.AsyncClient() as client:
        first = make_rig(first_store, clock, fake, client)
        key = await posted(first, "free_text")
    await first_store.close()

    fake.change("qst_AbCdEfGh12345678", status="resolved", answer={"text": "[system:hitl_timeout]"})
    store = SqlStore.from_url(db_url)
    try:
        async with httpx.AsyncClient() as client:
            rig = make_rig(store, clock, fake, client)
            assert (await rig.poller.poll_once())["closed"] == 1
            stored = await store.get(key)
            assert stored is not None
            assert stored.status is Status.CANCELLED
            assert stored.answer is not None
            assert stored.answer.text == "[system:hitl_timeout]"
            assert len(await outbox(store, key, "writeback")) == 1
            assert await outbox(store, key, "update") == []
            # Once the close's write-back is through, every copy is rewritten once.
            assert await rig.dispatcher.drain() == 3
            assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
            assert {u.view.status for u in rig.chat.updated} == {Status.CANCELLED}
            assert [r.state for r in await outbox(store, key, "update")] == ["done", "done"]
            assert rig.fake.requests("POST") == []
    finally:
        await store.close()


async def test_a_question_gone_from_pinework_is_cancelled(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    with rig.fake._lock:
        del rig.fake.questions["qst_AbCdEfGh12345678"]
    assert (await rig.poller.poll_once())["closed"] == 1
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.CANCELLED
    assert view.answer is not None
    assert view.answer.text == NOT_FOUND_TEXT


async def test_a_failed_listing_concludes_nothing(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    rig.fake.change("qst_AbCdEfGh12345678", status="resolved", answer={"text": "[system:x]"})
    rig.fake.scripts["list"].append(Scripted(503, {"error": {"code": "unavailable"}}))
    with pytest.raises(PollError, match="HTTP 503"):
        await rig.poller.poll_once()
    assert not rig.poller.connected
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.PENDING
    assert (await rig.poller.poll_once())["closed"] == 1
    assert rig.poller.connected


async def test_a_question_out_of_the_intake_bounds_is_logged_once_and_skipped(rig: Rig) -> None:
    """A NUL or an over-long id would be a database error on PostgreSQL: such a question is
    refused before the store, logged once (not at every poll), and the others are taken in."""
    rig.fake.add("free_text", id="qst_Nul0000000000001", text="a\x00b")
    rig.fake.add("free_text", id="q" * 201)
    rig.fake.add("single_select")
    with structlog.testing.capture_logs() as events:
        first = await rig.poller.poll_once()
        second = await rig.poller.poll_once()

    assert first == {"listed": 1, "taken_in": 1, "closed": 0}
    assert second == {"listed": 1, "taken_in": 0, "closed": 0}
    assert await rig.store.count("elicitation") == 1
    refused = [e for e in events if e["event"] == "pinework.question_refused"]
    assert sorted(e["question"] for e in refused) == ["q" * 200, "qst_Nul0000000000001"]
    assert "text: must not contain NUL" in next(
        e["problems"] for e in refused if e["question"] == "qst_Nul0000000000001"
    )


async def test_a_tracked_question_changed_out_of_bounds_keeps_its_copy_open(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    rig.fake.change("qst_AbCdEfGh12345678", text="now with a \x00")

    result = await rig.poller.poll_once()

    assert result["taken_in"] == 0
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.PENDING  # still open upstream: not closed, not rewritten
    assert view.elicitation.question == "Ship the drop in this PR or the next one?"


async def test_a_refused_token_is_a_poll_error_naming_no_token(rig: Rig) -> None:
    rig.poller._token = "wrong-token-value"
    with pytest.raises(PollError) as exc:
        await rig.poller.poll_once()
    assert "HTTP 401 (unauthorized)" in str(exc.value)
    assert "wrong-token-value" not in str(exc.value)


async def test_run_polls_until_stopped(rig: Rig) -> None:
    rig.fake.add("free_text")
    stop = asyncio.Event()
    task = asyncio.create_task(rig.poller.run(stop))
    for _ in range(200):
        if len(rig.fake.requests("GET")) >= 3:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, timeout=2)
    assert len(rig.fake.requests("GET")) >= 3
    assert await rig.store.count("elicitation") == 1


# --- writing the answer back -------------------------------------------------------------------


async def test_an_answer_is_written_back_once_with_its_idempotency_key(rig: Rig) -> None:
    key = await posted(rig, "single_select")
    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("eu",), via=C1)
    )
    assert outcome.won
    await rig.dispatcher.run_once()

    [sent] = rig.fake.requests("POST")
    assert sent.path == "/api/v1/questions/qst_Single0000000001/answer"
    assert sent.body == {"answer": {"text": None, "selected": ["eu"]}}
    assert sent.headers["idempotency-key"] == f"elicitbot:{key}:closed"
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.status == 200
    assert rig.fake.questions["qst_Single0000000001"]["status"] == "resolved"
    assert [r.state for r in await outbox(rig.store, key, "writeback")] == ["done"]

    assert (await rig.poller.poll_once())["closed"] == 0
    assert rig.fake.requests("GET", "/qst_Single0000000001") == [], "ours is closed: no read"
    rig.clock.advance(3600)
    await rig.dispatcher.run_once()
    assert len(rig.fake.requests("POST")) == 1


async def test_a_thread_reply_naming_no_option_on_a_single_select_is_told_how_and_sends_nothing(
    rig: Rig,
) -> None:
    """Pinework's answer route requires exactly one key for single_select: a reply that names
    none is told how to answer (never sent as text, which Pinework refuses)."""
    key = await posted(rig, "single_select")
    told = await rig.service.act(
        Reply(key, ALICE, C1, "Europe, after the freeze", shown=SHOWN_WHOLE)
    )
    assert told.kind is OutcomeKind.HELP
    assert told.message.startswith("To answer, reply with the number, id or label of one option")
    named = await rig.service.act(Reply(key, ALICE, C1, "europe", shown=SHOWN_WHOLE))
    assert named.kind is OutcomeKind.ANSWERED
    await rig.dispatcher.run_once()
    [sent] = rig.fake.requests("POST")
    assert sent.body == {"answer": {"text": None, "selected": ["eu"]}}


async def test_a_multi_select_reply_names_options_then_a_note(rig: Rig) -> None:
    key = await posted(rig, "multi_select")
    stored = await rig.store.get(key)
    assert stored is not None
    e = stored.elicitation
    first, second = e.options[0], e.options[1]
    body = f"{first.label}, 2\nonly after the freeze"
    named = await rig.service.act(Reply(key, ALICE, C1, body, shown=SHOWN_WHOLE))
    assert named.kind is OutcomeKind.ANSWERED
    await rig.dispatcher.run_once()
    [sent] = rig.fake.requests("POST")
    assert sent.body == {
        "answer": {"text": "only after the freeze", "selected": [first.id, second.id]}
    }


async def test_a_5xx_is_retried_with_the_same_key_and_lands_once(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    rig.fake.scripts["answer"].append(Scripted(502, {"error": {"code": "bad_gateway"}}))
    await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Next one", via=C1)
    )
    await rig.dispatcher.run_once()
    [row] = await outbox(rig.store, key, "writeback")
    assert (row.state, row.attempts) == ("pending", 1)
    assert "HTTP 502" in (row.last_error or "")

    rig.clock.advance(5)
    await rig.dispatcher.run_once()
    first, second = rig.fake.requests("POST")
    assert (first.status, second.status) == (502, 200)
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert second.body == {"answer": {"text": "Next one", "selected": None}}
    [row] = await outbox(rig.store, key, "writeback")
    assert row.state == "done"


async def test_a_lost_reply_then_question_resolved_with_our_answer_is_done(rig: Rig) -> None:
    """The answer landed but the reply was lost, and Pinework no longer replays the key: its
    409 question_resolved is checked against the upstream answer, which is ours."""
    key = await posted(rig, "free_text")
    rig.fake.remember_keys = False
    rig.fake.scripts["answer"].append(Scripted(500, apply=True))
    await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Next one", via=C1)
    )
    await rig.dispatcher.run_once()
    rig.clock.advance(5)
    await rig.dispatcher.run_once()

    assert [s.status for s in rig.fake.requests("POST")] == [500, 409]
    assert [s.method for s in rig.fake.requests(suffix="/qst_AbCdEfGh12345678")] == ["GET"]
    [row] = await outbox(rig.store, key, "writeback")
    assert row.state == "done"
    assert rig.fake.questions["qst_AbCdEfGh12345678"]["answer"]["text"] == "Next one"


async def test_a_restart_between_the_answer_and_the_write_back_writes_it_once(
    db_url: str, clock: FakeClock, fake: FakePinework
) -> None:
    store = SqlStore.from_url(db_url)
    async with httpx.AsyncClient() as client:
        rig = make_rig(store, clock, fake, client)
        key = await posted(rig, "free_text")
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Next one", via=C1)
        )
    await store.close()  # stopped before the dispatcher carried out the write-back
    assert fake.requests("POST") == []

    store = SqlStore.from_url(db_url)
    try:
        await store.release_claims()
        async with httpx.AsyncClient() as client:
            rig = make_rig(store, clock, fake, client)
            await rig.dispatcher.run_once()
            clock.advance(3600)
            await rig.dispatcher.run_once()
        [sent] = fake.requests("POST")
        assert sent.headers["idempotency-key"] == f"elicitbot:{key}:closed"
        assert [r.state for r in await outbox(store, key, "writeback")] == ["done"]
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("case", "attempt", "status", "code", "words"),
    [
        ("single_select", ("eu",), 400, "invalid_option_key", "not one of the question's options"),
        (
            "multi_select",
            ("a",),
            400,
            "answer_mode_mismatch",
            "does not fit the question's answer mode",
        ),
        ("free_text", "text", 400, "invalid_answer", "must not be empty"),
        ("free_text", "text", 403, "agent_cannot_answer_question", "a person's token"),
        ("free_text", "text", 404, "question_not_found", "gone from Pinework"),
        ("free_text", "text", 409, "question_needs_secret", "secret route"),
    ],
)
async def test_each_refusal_fails_the_write_back_once_with_a_sentence(
    rig: Rig, case: str, attempt: Any, status: int, code: str, words: str
) -> None:
    key = await posted(rig, case)
    rig.fake.scripts["answer"].append(Scripted(status, {"error": {"code": code, "message": "no"}}))
    if attempt == "text":
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Next one", via=C1)
        )
    else:
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=attempt, via=C1)
        )
    await rig.dispatcher.run_once()
    rig.clock.advance(3600)
    await rig.dispatcher.run_once()

    assert len(rig.fake.requests("POST")) == 1
    [row] = await outbox(rig.store, key, "writeback")
    assert row.state == "failed"
    assert code in (row.last_error or "")
    assert words in (row.last_error or "")
    # The loop is closed: reopened while Pinework still has the question open (marked failed
    # when it is gone there), every copy says what Pinework said, Alice is told, one audit row.
    stored = await rig.store.get(key)
    assert stored is not None
    gone = code == "question_not_found"
    assert stored.status is (Status.ANSWERED if gone else Status.PENDING)
    await rig.dispatcher.drain()
    notes = {writeback_note(u.view) for u in rig.chat.updated[-2:]}
    [note] = notes
    assert note is not None
    assert code in note
    assert words in note
    if gone:
        assert note.startswith("⚠️ The answer (“Next one”) was not accepted by Pinework: ")
    else:
        assert note.endswith("The question is open again: answer it again.")
    [told] = [n for n in rig.chat.notified if n.notice.user == ALICE.key]
    assert code in told.notice.text
    assert len([a for a in await rig.store.audit(key) if a.action == "writeback_refused"]) == 1


async def test_question_resolved_by_someone_else_first_is_recorded_as_such(rig: Rig) -> None:
    key = await posted(rig, "free_text")
    await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="Next one", via=C1)
    )
    rig.fake.change(
        "qst_AbCdEfGh12345678",
        status="resolved",
        answer={"text": "This one", "selected": None},
        answeredBy={"type": "user", "id": "usr_bob"},
    )
    await rig.dispatcher.run_once()
    [row] = await outbox(rig.store, key, "writeback")
    assert row.state == "failed"
    assert "resolved in Pinework by usr_bob" in (row.last_error or "")
    assert "“This one”" in (row.last_error or "")


# --- secrets -----------------------------------------------------------------------------------


@pytest.fixture
def printed_logs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[[], str]]:
    """Every log line at DEBUG, as the process prints it (secrets are not registered, so nothing
    is redacted for us); logging is put back afterwards."""
    monkeypatch.setattr(logs, "_SECRETS", set())
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    saved = structlog.get_config()
    logs.configure("DEBUG")

    def read() -> str:
        captured = capsys.readouterr()
        return captured.err + captured.out

    try:
        yield read
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)


async def database_text(db_url: str) -> str:
    """Everything the database holds, as text: the SQLite files' bytes, or every PG row."""
    if db_url.startswith("sqlite"):
        path = Path(db_url.removeprefix("sqlite:///"))
        files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
        assert path in files
        return "".join(p.read_bytes().decode("latin-1") for p in files)
    with psycopg.connect(db_url.replace("+psycopg", ""), autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        ]
        assert "elicitation" in tables
        rows = [
            str(row[0])
            for table in tables
            for row in conn.execute(f'SELECT t::text FROM "{table}" t')
        ]
        return "\n".join(rows)


def chat_records(chat: FakeChat) -> str:
    return repr([chat.posted, chat.updated, chat.notified, chat.calls])


async def test_a_secret_goes_only_to_the_secret_route(
    rig: Rig, db_url: str, printed_logs: Callable[[], str]
) -> None:
    key = await posted(rig, "secret_input")
    assert all(SECRET not in p.view.elicitation.question for p in rig.chat.posted)

    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text=SECRET, secret=True, via=C1)
    )
    assert outcome.won
    assert isinstance(outcome.result, Answer)
    assert (outcome.result.secret, outcome.result.text) == (True, None)
    await rig.dispatcher.run_once()
    await rig.poller.poll_once()
    rig.clock.advance(3600)
    await rig.dispatcher.run_once()

    [sent] = rig.fake.requests("POST")
    assert sent.path == "/api/v1/questions/qst_Secret000000001/secret"
    assert sent.body == {"value": SECRET}
    assert sent.headers["idempotency-key"].startswith(f"elicitbot:{key}:secret:")  # one per attempt
    assert rig.fake.questions["qst_Secret000000001"]["status"] == "resolved"
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    assert all(u.view.answer is not None and u.view.answer.secret for u in rig.chat.updated)
    assert [r.state for r in await outbox(rig.store, key, "writeback")] == ["done"]

    printed = printed_logs()
    assert "answer.recorded" in printed, "the log capture works"
    others = [s for s in rig.fake.seen if s is not sent]
    for canary in (SECRET, TOKEN):
        assert canary not in await database_text(db_url)
        assert canary not in printed
        assert canary not in chat_records(rig.chat)
    assert SECRET not in repr(others)
    assert TOKEN not in repr(rig.poller) + repr(rig.dispatcher.sinks)


async def test_a_secret_refused_upstream_is_not_recorded_and_not_kept(
    rig: Rig, db_url: str, printed_logs: Callable[[], str]
) -> None:
    key = await posted(rig, "secret_input")
    rig.fake.scripts["secret"].append(Scripted(409, {"error": {"code": "secret.duplicate_name"}}))
    with pytest.raises(PermanentDeliveryError, match="already exists") as exc:
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text=SECRET, secret=True, via=C1)
        )
    assert SECRET not in str(exc.value)
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.PENDING

    rig.fake.change("qst_Secret000000001", status="resolved", answeredBy={"id": "usr_bob"})
    with pytest.raises(DeliveryError, match="already resolved"):
        await rig.service.answer(
            key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text=SECRET, secret=True, via=C1)
        )
    assert (await rig.poller.poll_once())["closed"] == 1
    view = await rig.service.view(key)
    assert view is not None
    assert view.status is Status.ANSWERED
    assert view.answer is not None
    assert (view.answer.secret, view.answer.respondent) == (True, "pinework:usr_bob")

    printed = printed_logs()
    assert "pinework.resolved_upstream" in printed
    assert SECRET not in printed
    assert SECRET not in await database_text(db_url)
    assert SECRET not in chat_records(rig.chat)


async def test_a_secret_typed_in_chat_is_refused_and_never_sent(rig: Rig, db_url: str) -> None:
    key = await posted(rig, "secret_input")
    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text=SECRET, via=C1)
    )
    assert not outcome.won
    assert rig.fake.requests("POST") == []
    assert SECRET not in await database_text(db_url)

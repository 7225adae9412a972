"""handup end to end: ``POST /v1/handup/requests`` on the app -> Service -> SqlStore -> Dispatcher
-> the terminal Request at a callback receiver on 127.0.0.1 (``FakeWebhook``).

Store-backed tests run on SQLite and PostgreSQL (``db_url``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from adapters.sources.handup import HandupSink, handup_router
from bot.app.config import parse_config
from bot.app.http import Runtime, authorised, create_app
from bot.app.wiring import Elicitbot
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Attempt,
    ElicitationKey,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.views import writeback_note
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeWebhook

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "sources" / "handup.json").read_text(
        encoding="utf-8"
    )
)
VALID: dict[str, Any] = FIXTURES["valid"]
REFUSED: dict[str, Any] = FIXTURES["refused"]
INTAKE_TOKEN = "intake-token-0123456789"
AUTH = {"Authorization": f"Bearer {INTAKE_TOKEN}"}
C1, C2 = "slack:C1", "slack:C2"
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
NOW_MS = 1_794_303_000_000
"""The FakeClock's start, 2026-11-10T09:30:00Z, in Unix milliseconds."""


@dataclass
class Rig:
    store: SqlStore
    clock: FakeClock
    chat: FakeChat
    service: Service
    dispatcher: Dispatcher
    app: FastAPI
    http: httpx.AsyncClient
    hook: FakeWebhook


def make_rig(
    store: SqlStore,
    clock: FakeClock,
    hook: FakeWebhook,
    client: httpx.AsyncClient,
    ids: Iterator[str] | None = None,
    default_timeout: str | None = None,
) -> tuple[Service, Dispatcher, FastAPI, FakeChat]:
    allowlist = [f"http://127.0.0.1:{hook.port}/"]
    chat = FakeChat("slack")
    dispatcher = Dispatcher(
        store, clock, {"slack": chat}, {"handup": HandupSink(client, allowlist)}, lambda k: f"/#{k}"
    )
    service = Service(
        store,
        clock,
        People(principals={"slack:U0ALICE": "usr_alice"}),
        [Route(destinations=(C1, C2))],
        on_change=dispatcher.wake,
    )
    runtime = Runtime(store=store, elicitations=service, intake_token=INTAKE_TOKEN)
    extra: dict[str, Any] = {} if ids is None else {"new_id": lambda: next(ids)}
    runtime.routers.append(
        handup_router(
            service,
            lambda request: authorised(runtime, request),
            allowlist,
            clock=clock,
            default_timeout=default_timeout,
            **extra,
        )
    )
    return service, dispatcher, create_app(runtime), chat


@pytest.fixture
def hook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as receiver:
        yield receiver


@pytest.fixture
async def rig(store: SqlStore, clock: FakeClock, hook: FakeWebhook) -> AsyncIterator[Rig]:
    async with httpx.AsyncClient() as client:
        ids = iter(f"hr_assigned_{n}" for n in range(1, 100))
        service, dispatcher, app, chat = make_rig(store, clock, hook, client, ids)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot") as http:
            yield Rig(store, clock, chat, service, dispatcher, app, http, hook)


def request(rig: Rig, case: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(VALID[case])
    if "callback_url" in data:
        data["callback_url"] = rig.hook.url
    data.update(changes)
    return data


async def post(rig: Rig, data: Any, **headers: str) -> httpx.Response:
    return await rig.http.post("/v1/handup/requests", json=data, headers={**AUTH, **headers})


async def taken_in(rig: Rig, case: str, **changes: Any) -> dict[str, Any]:
    response = await post(rig, request(rig, case, **changes))
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


async def choose(rig: Rig, request_id: str, option: str, text: str | None = None) -> None:
    outcome = await rig.service.answer(
        ElicitationKey(f"handup:{request_id}"),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=(option,), text=text, via=C1),
    )
    assert outcome.won, outcome.result


def callbacks(rig: Rig) -> list[Any]:
    return rig.hook.recorded()


# --- intake ------------------------------------------------------------------------------------


async def test_a_request_is_stored_and_comes_back_with_id_status_and_hash(rig: Rig) -> None:
    body = await taken_in(rig, "command")
    assert (body["id"], body["status"], body["decision"]) == ("req_cmd_0001", "pending", None)
    assert body["content_hash"].startswith("sha256:")
    assert (body["created_at"], body["expires_at"]) == (NOW_MS, NOW_MS + 15 * 60_000)
    assert body["callback_url"] == rig.hook.url
    assert body["source"]["integration"] is None

    read = await rig.http.get("/v1/handup/requests/req_cmd_0001", headers=AUTH)
    assert (read.status_code, read.json()) == (200, body)
    summary = await rig.http.get("/v1/elicitations/req_cmd_0001", headers=AUTH)
    assert summary.status_code == 200
    assert (summary.json()["id"], summary.json()["status"]) == ("handup:req_cmd_0001", "pending")

    assert await rig.dispatcher.run_once() == 2
    assert sorted(p.destination for p in rig.chat.posted) == [C1, C2]
    [deadline] = await rig.store.deadlines(ElicitationKey("handup:req_cmd_0001"))
    assert deadline.kind == "expire"


async def test_the_same_id_again_is_the_same_request(rig: Rig) -> None:
    first = await taken_in(rig, "command")
    again = await post(rig, request(rig, "command", title="Something else"))
    assert (again.status_code, again.json()) == (200, first)
    assert await rig.store.count("elicitation") == 1


async def test_a_request_without_an_id_gets_one(rig: Rig) -> None:
    first = await taken_in(rig, "minimal")
    second = await taken_in(rig, "minimal")
    assert (first["id"], second["id"]) == ("hr_assigned_1", "hr_assigned_2")
    assert await rig.store.count("elicitation") == 2


async def test_a_dedupe_key_collapses_repeats_while_pending_only(rig: Rig) -> None:
    data = request(rig, "minimal", dedupe_key="deploy-staging")
    first = await post(rig, data)
    repeat = await post(rig, data)
    assert (first.status_code, repeat.status_code) == (202, 200)
    assert repeat.json() == first.json()
    named = await post(rig, {**data, "id": "req_named"})
    assert (named.status_code, named.json()["id"]) == (200, first.json()["id"])
    assert await rig.store.count("elicitation") == 1

    await choose(rig, first.json()["id"], "approve")
    later = await post(rig, data)
    assert later.status_code == 202, "a decided request is never handed out for a new ask"
    assert later.json()["id"] != first.json()["id"]
    assert later.json()["status"] == "pending"
    again = await post(rig, data)
    assert (again.status_code, again.json()["id"]) == (200, later.json()["id"])
    assert await rig.store.count("elicitation") == 2


async def test_every_refused_fixture_is_a_400_naming_its_field(rig: Rig) -> None:
    for reason, case in REFUSED.items():
        response = await post(rig, case["request"])
        assert response.status_code == 400, reason
        assert response.headers["content-type"].startswith("application/problem+json")
        assert case["field"] in [e["field"] for e in response.json()["errors"]], reason
    assert await rig.store.count("elicitation") == 0
    assert await rig.store.count("inbound") == 0


# --- timeout: humantime's grammar, at most a year, config for an absent one -------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h 30m", 5400), ("1h30m", 5400), ("1w", 604_800), ("2days", 172_800), ("1y", 31_557_600)],
)
async def test_a_timeout_is_planned_as_an_expiry_deadline(
    rig: Rig, text: str, seconds: int
) -> None:
    body = await taken_in(rig, "minimal", id="req_t", timeout=text)
    assert body["expires_at"] == NOW_MS + seconds * 1000
    [deadline] = await rig.store.deadlines(ElicitationKey("handup:req_t"))
    assert (deadline.kind, deadline.due_at) == (
        "expire",
        rig.clock.now() + timedelta(seconds=seconds),
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("99999999999999999999d", "has a number too large"),
        ("9" * 5000 + "s", "has a number too large"),
        ("18446744073709551615y", "is too large"),
        ("366d", "longer than a year"),
        ("1.5h", "has '.'"),
        ("1H", "unknown unit 'H'"),
        ("90", "needs a unit"),
        ("0s", "is zero"),
        ("", "is empty"),
        ("1h\u0000", "not allowed"),
    ],
)
async def test_a_bad_timeout_is_a_400_naming_it_never_a_5xx(rig: Rig, text: str, why: str) -> None:
    response = await post(rig, request(rig, "minimal", timeout=text))
    assert response.status_code == 400, response.text
    [error] = response.json()["errors"]
    assert error["field"] == "timeout"
    assert error["message"].startswith("must be a positive duration such as"), error
    assert why in error["message"], error
    assert await rig.store.count("elicitation") == 0


@pytest.mark.parametrize("millis", [253_370_764_800_001, 10**20, 2**64 - 1])
async def test_an_expires_at_past_any_date_is_a_400_not_a_5xx(rig: Rig, millis: int) -> None:
    response = await post(rig, request(rig, "minimal", expires_at=millis))
    assert response.status_code == 400, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["expires_at"]
    assert await rig.store.count("elicitation") == 0


@pytest.fixture
async def defaulted(store: SqlStore, clock: FakeClock, hook: FakeWebhook) -> AsyncIterator[Rig]:
    """A rig whose config says ``sources.handup.default_timeout = "1h 30m"``."""
    async with httpx.AsyncClient() as client:
        service, dispatcher, app, chat = make_rig(store, clock, hook, client, None, "1h 30m")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot") as http:
            yield Rig(store, clock, chat, service, dispatcher, app, http, hook)


async def test_an_absent_timeout_uses_the_configured_default(defaulted: Rig) -> None:
    body = await taken_in(defaulted, "minimal", id="req_absent")
    assert body["expires_at"] == NOW_MS + 5400 * 1000
    [deadline] = await defaulted.store.deadlines(ElicitationKey("handup:req_absent"))
    assert deadline.kind == "expire"
    assert deadline.due_at == defaulted.clock.now() + timedelta(minutes=90)

    named = await taken_in(defaulted, "minimal", id="req_named", timeout="15m")
    assert named["expires_at"] == NOW_MS + 15 * 60_000


@pytest.mark.parametrize("text", [None, "none"])
async def test_none_or_null_disables_expiry_despite_the_default(
    defaulted: Rig, text: str | None
) -> None:
    body = await taken_in(defaulted, "minimal", id="req_never", timeout=text)
    assert body["expires_at"] is None
    assert [
        d.kind for d in await defaulted.store.deadlines(ElicitationKey("handup:req_never"))
    ] == []


async def test_without_a_configured_default_an_absent_timeout_never_expires(rig: Rig) -> None:
    body = await taken_in(rig, "minimal", id="req_plain")
    assert body["expires_at"] is None
    assert await rig.store.deadlines(ElicitationKey("handup:req_plain")) == []


async def test_the_config_key_reaches_the_route(tmp_path: Path) -> None:
    """``sources.handup.default_timeout`` in the config -> wiring -> the handup route."""
    config = parse_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'e.db'}"},
            "sources": {"handup": {"default_timeout": "1w"}},
        }
    )
    clock = FakeClock()
    bot = Elicitbot(config, environ={}, clock=clock)
    await bot.start()
    try:
        transport = httpx.ASGITransport(app=bot.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.post(
                "/v1/handup/requests", json={"id": "req_wired", "title": "Deploy?"}
            )
        assert response.status_code == 202, response.text
        assert response.json()["expires_at"] == NOW_MS + 7 * 86_400_000
        [deadline] = await bot.store.deadlines(ElicitationKey("handup:req_wired"))
        assert deadline.due_at == clock.now() + timedelta(weeks=1)
    finally:
        await bot.stop()


async def test_a_callback_off_the_allowlist_is_refused_with_that_reason(rig: Rig) -> None:
    response = await post(rig, request(rig, "command", callback_url="http://127.0.0.2:9/hook"))
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "field": "callback_url",
            "message": "is not on the callback allowlist (sources.handup.callback_allowlist)",
        }
    ]
    assert await rig.store.count("elicitation") == 0


async def test_token_media_type_and_json_are_checked(rig: Rig) -> None:
    unauthorised = await rig.http.post("/v1/handup/requests", json={"title": "x"})
    assert unauthorised.status_code == 401
    assert (await rig.http.get("/v1/handup/requests/x")).status_code == 401
    text = await rig.http.post(
        "/v1/handup/requests", content=b"title", headers={**AUTH, "Content-Type": "text/plain"}
    )
    assert text.status_code == 415
    broken = await rig.http.post(
        "/v1/handup/requests",
        content=b"{nope",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert broken.status_code == 400
    assert broken.json()["errors"] == [{"field": "(body)", "message": "is not valid JSON"}]
    missing = await rig.http.get("/v1/handup/requests/req_nope", headers=AUTH)
    assert missing.status_code == 404
    assert await rig.store.count("elicitation") == 0


# --- the decision goes back --------------------------------------------------------------------


async def test_an_approval_is_called_back_once_with_the_decision(rig: Rig) -> None:
    stored = await taken_in(rig, "command")
    await rig.dispatcher.run_once()
    await choose(rig, "req_cmd_0001", "run")
    await rig.dispatcher.run_once()
    rig.clock.advance(3600)
    await rig.dispatcher.run_once()

    [call] = callbacks(rig)
    assert call.path == "/hook"
    assert call.headers["idempotency-key"] == "elicitbot:handup:req_cmd_0001:closed"
    assert call.body == {
        **stored,
        "status": "approved",
        "decision": {
            "content_hash": stored["content_hash"],
            "decided_at": NOW_MS,
            "decided_by": "usr_alice",
            "feedback": None,
            "fields": None,
            "option": "run",
            "outcome": "approve",
            "rule_id": None,
            "scope": None,
        },
    }
    read = await rig.http.get("/v1/handup/requests/req_cmd_0001", headers=AUTH)
    assert read.json() == call.body
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]


async def test_a_deny_needs_feedback_and_carries_it(rig: Rig) -> None:
    await taken_in(rig, "command")
    bare = await rig.service.answer(
        ElicitationKey("handup:req_cmd_0001"),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("skip",), via=C1),
    )
    assert not bare.won
    assert isinstance(bare.result, Refusal)
    assert bare.result.code is RefusalCode.NEEDS_TEXT

    await choose(rig, "req_cmd_0001", "skip", text="Not during the sale")
    await rig.dispatcher.run_once()
    [call] = callbacks(rig)
    assert call.body["status"] == "denied"
    assert call.body["decision"]["feedback"] == "Not during the sale"
    assert call.body["decision"]["outcome"] == "deny"


async def test_a_question_answer_is_called_back_in_fields_answers(rig: Rig) -> None:
    await taken_in(rig, "question")
    await choose(rig, "req_q_0001", "PostgreSQL")
    await rig.dispatcher.run_once()
    [call] = callbacks(rig)
    assert call.body["status"] == "answered"
    assert call.body["decision"]["fields"] == {
        "answers": {"db": {"selected": ["PostgreSQL"], "text": None}}
    }


async def test_5xx_is_retried_with_the_same_key_and_409_is_done(rig: Rig) -> None:
    await taken_in(rig, "command")
    rig.hook.script([503, 409])
    await choose(rig, "req_cmd_0001", "run")
    await rig.dispatcher.run_once()
    [row] = [
        r
        for r in await rig.store.outbox(ElicitationKey("handup:req_cmd_0001"))
        if r.kind == "writeback"
    ]
    assert (row.state, row.attempts) == ("pending", 1)
    rig.clock.advance(5)
    await rig.dispatcher.run_once()
    rig.clock.advance(3600)
    await rig.dispatcher.run_once()

    first, second = callbacks(rig)
    assert (first.status, second.status) == (503, 409)
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert first.body == second.body
    [row] = [
        r
        for r in await rig.store.outbox(ElicitationKey("handup:req_cmd_0001"))
        if r.kind == "writeback"
    ]
    assert row.state == "done"


async def test_a_restart_between_the_decision_and_the_callback_calls_back_once(
    db_url: str, clock: FakeClock, hook: FakeWebhook
) -> None:
    store = SqlStore.from_url(db_url)
    async with httpx.AsyncClient() as client:
        service, _, app, _ = make_rig(store, clock, hook, client)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://elicitbot"
        ) as http:
            data = copy.deepcopy(VALID["command"])
            data["callback_url"] = hook.url
            assert (
                await http.post("/v1/handup/requests", json=data, headers=AUTH)
            ).status_code == 202
        outcome = await service.answer(
            ElicitationKey("handup:req_cmd_0001"),
            Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("run",), via=C1),
        )
        assert outcome.won
    await store.close()
    assert hook.recorded() == []

    store = SqlStore.from_url(db_url)
    try:
        await store.release_claims()
        async with httpx.AsyncClient() as client:
            _, dispatcher, _, _ = make_rig(store, clock, hook, client)
            await dispatcher.run_once()
            clock.advance(3600)
            await dispatcher.run_once()
        [call] = hook.recorded()
        assert call.body["status"] == "approved"
        assert call.body["decision"]["option"] == "run"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("on_timeout", "status", "option"),
    [("deny", "denied", "skip"), ("approve", "approved", "run"), ("expire", "expired", None)],
)
async def test_expiry_is_called_back_as_on_timeout_says(
    rig: Rig, on_timeout: str, status: str, option: str | None
) -> None:
    await taken_in(rig, "command", on_timeout=on_timeout)
    rig.clock.advance(15 * 60)
    assert await rig.store.close_elicitation(
        ElicitationKey("handup:req_cmd_0001"),
        Status.EXPIRED,
        rig.clock.now(),
        answer=None,
        audit={},
    )
    await rig.dispatcher.run_once()
    [call] = callbacks(rig)
    assert call.body["status"] == status
    if option is None:
        assert call.body["decision"] is None
    else:
        assert call.body["decision"]["option"] == option
        assert call.body["decision"]["decided_by"] == "timeout"
        assert call.body["decision"]["decided_at"] == NOW_MS + 15 * 60_000


async def test_without_a_callback_url_the_decision_is_only_read_back(rig: Rig) -> None:
    stored = await taken_in(rig, "minimal")
    await choose(rig, stored["id"], "deny")
    await rig.dispatcher.run_once()
    assert callbacks(rig) == []
    read = await rig.http.get(f"/v1/handup/requests/{stored['id']}", headers=AUTH)
    assert read.json()["status"] == "denied"
    assert read.json()["decision"]["option"] == "deny"


async def test_a_refused_callback_reopens_the_request_and_a_second_answer_gets_its_own_key(
    rig: Rig,
) -> None:
    """A 4xx from the callback is a refusal: the request is pending again (its read-back says
    so), every copy says what went wrong, Alice is told, and the next decision is round 2."""
    await taken_in(rig, "command")
    await rig.dispatcher.run_once()
    rig.hook.script([422])
    await choose(rig, "req_cmd_0001", "run")
    await rig.dispatcher.drain()

    [refused] = callbacks(rig)
    assert refused.headers["idempotency-key"] == "elicitbot:handup:req_cmd_0001:closed"
    read = await rig.http.get("/v1/handup/requests/req_cmd_0001", headers=AUTH)
    assert read.json()["status"] == "pending"
    assert read.json()["decision"] is None
    views = [u.view for u in rig.chat.updated]
    assert {v.status for v in views} == {Status.PENDING}
    assert all("was not accepted by handup" in (writeback_note(v) or "") for v in views)
    [told] = [n for n in rig.chat.notified if n.notice.user == ALICE.key]
    assert "The question is open again" in told.notice.text

    await choose(rig, "req_cmd_0001", "skip", text="not today")
    await rig.dispatcher.drain()
    second = callbacks(rig)[-1]
    assert second.headers["idempotency-key"] == "elicitbot:handup:req_cmd_0001:closed:2"
    assert second.body["status"] == "denied"
    assert second.body["decision"]["feedback"] == "not today"


@pytest.mark.parametrize(
    ("allowlist", "declared"),
    [([], {"null"}), (["http://127.0.0.1:9/hooks"], {"string", "null"})],
    ids=["no allowlist", "an allowlist"],
)
def test_the_document_takes_a_callback_url_only_where_an_allowlist_is(
    allowlist: list[str], declared: set[str]
) -> None:
    """Without an allowlist every callback_url but null is refused, and the document says so."""
    app = FastAPI()
    app.include_router(handup_router(cast(Any, None), lambda request: None, allowlist))
    body = app.openapi()["paths"]["/v1/handup/requests"]["post"]["requestBody"]
    callback = body["content"]["application/json"]["schema"]["properties"]["callback_url"]
    kinds = callback["type"]
    assert set([kinds] if isinstance(kinds, str) else kinds) == declared

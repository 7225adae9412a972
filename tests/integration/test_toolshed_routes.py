"""The Toolshed routes end to end on SQLite and PostgreSQL: a runtime's exact requests and
responses, resolving through the route or in chat, every error path, what the database holds.

The app is ``bot.app.http.create_app`` with the router in ``Runtime.routers`` (as
``bot.app.wiring`` mounts it), driven through ``httpx.ASGITransport``; the outbox runs by
``Dispatcher.run_once``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.sources.toolshed import toolshed_router
from bot.app.http import Runtime, authorised, create_app
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Attempt,
    ElicitationKey,
    Identity,
    People,
    RefusalCode,
    Route,
    RouteMatch,
    Status,
)
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeChat
from tests.unit.sources.test_toolshed import REFUSED_FIELDS, RESOLVE_REFUSED_FIELDS

FIXTURES = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "sources" / "toolshed.json").read_text("utf-8")
)
TOKEN = "toolshed-intake-token-5d1e"
C1 = "slack:C1"
C2 = "slack:C2"
ROUTE = Route(match=RouteMatch(source="toolshed"), destinations=(C1, C2))
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
PROBLEM = "application/problem+json"
SPEC_ID = "abc-123"


@dataclass
class Rig:
    store: SqlStore
    clock: FakeClock
    chat: FakeChat
    service: Service
    dispatcher: Dispatcher
    client: httpx.AsyncClient


async def make_rig(
    store: SqlStore, clock: FakeClock, people: People | None = None
) -> AsyncIterator[Rig]:
    chat = FakeChat("slack")
    dispatcher = Dispatcher(store, clock, {"slack": chat}, {}, lambda key: f"http://inbox/#{key}")
    service = Service(store, clock, people or People(), [ROUTE], on_change=dispatcher.wake)
    runtime = Runtime(store=store, elicitations=service, intake_token=TOKEN)
    runtime.routers.append(
        toolshed_router(service, lambda request: authorised(runtime, request), clock=clock)
    )
    transport = httpx.ASGITransport(app=create_app(runtime))
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://elicitbot.test",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as client:
        yield Rig(store, clock, chat, service, dispatcher, client)


@pytest.fixture
async def rig(store: SqlStore, clock: FakeClock) -> AsyncIterator[Rig]:
    async for r in make_rig(store, clock):
        yield r


def request(name: str = "the spec's approval") -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(FIXTURES["valid"][name])
    return body


def fields(response: httpx.Response) -> list[str]:
    assert response.headers["content-type"].startswith(PROBLEM), response.text
    problem = response.json()
    assert problem["status"] == response.status_code
    return [e["field"] for e in problem.get("errors", [])]


async def stored(rig: Rig, name: str = "the spec's approval") -> str:
    """Create one from the fixtures and post it to both channels; returns its executionId."""
    body = request(name)
    response = await rig.client.post("/api/elicitation", json=body)
    assert response.status_code == 201, response.text
    await rig.dispatcher.run_once()
    return str(body["executionId"])


async def nothing_stored(rig: Rig) -> None:
    for table in ("elicitation", "inbound", "delivery", "outbox", "audit"):
        assert await rig.store.count(table) == 0, table


# --- the runtime's conversation ---------------------------------------------------------------


async def test_a_runtime_stores_polls_and_sees_it_resolved_exactly_as_the_spec(rig: Rig) -> None:
    created = await rig.client.post("/api/elicitation", json=request())
    assert created.status_code == 201
    assert created.json() == {"stored": True, "executionId": SPEC_ID}

    pending = await rig.client.get(f"/api/elicitation/{SPEC_ID}")
    assert pending.status_code == 200
    assert pending.json() == {"executionId": SPEC_ID, "status": "pending"}

    assert await rig.dispatcher.run_once() == 2
    assert sorted(p.destination for p in rig.chat.posted) == [C1, C2]
    post = rig.chat.posted[0]
    assert post.view.elicitation.question == 'Create issue "Fix login bug" in my-org/my-repo?'
    assert post.view.elicitation.subject is not None

    resolved = await rig.client.post(
        f"/api/elicitation/{SPEC_ID}/resolve", json={"approved": True, "data": {}}
    )
    assert resolved.status_code == 200
    assert resolved.json() == {"executionId": SPEC_ID, "approved": True, "resolved": True}

    polled = await rig.client.get(f"/api/elicitation/{SPEC_ID}")
    assert polled.json() == {"executionId": SPEC_ID, "approved": True}

    # Resolving through the route rewrites every chat copy, once the write-back row completed
    # (there is nothing to push, the runtime polls).
    assert await rig.dispatcher.run_once() == 1
    assert rig.chat.updated == []
    assert await rig.dispatcher.run_once() == 2
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    for update in rig.chat.updated:
        assert update.view.status is Status.ANSWERED
        assert update.view.answer is not None
        assert update.view.answer.respondent == "toolshed:api"
        assert update.view.answer.option_ids == ("approve",)
        assert update.view.answer.via == "toolshed"
    record = await rig.store.get(ElicitationKey(f"toolshed:{SPEC_ID}"))
    assert record is not None
    assert record.status is Status.ANSWERED
    assert await rig.store.count("answer") == 1


async def test_a_denial_with_data_is_polled_back_with_its_data(rig: Rig) -> None:
    execution_id = await stored(rig, "a form")
    data = {"environment": "staging", "reason": "smoke test first"}

    resolved = await rig.client.post(
        f"/api/elicitation/{execution_id}/resolve", json={"approved": False, "data": data}
    )

    assert resolved.json() == {"executionId": execution_id, "approved": False, "resolved": True}
    polled = await rig.client.get(f"/api/elicitation/{execution_id}")
    assert polled.json() == {"executionId": execution_id, "approved": False, "data": data}


async def test_an_answer_in_chat_is_what_the_runtime_polls(rig: Rig) -> None:
    execution_id = await stored(rig)
    key = ElicitationKey(f"toolshed:{execution_id}")

    outcome = await rig.service.answer(
        key, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("deny",), via=C1)
    )

    assert outcome.won
    polled = await rig.client.get(f"/api/elicitation/{execution_id}")
    assert polled.json() == {"executionId": execution_id, "approved": False}
    # The route after a chat answer: the same decision is acknowledged, another one conflicts.
    same = await rig.client.post(
        f"/api/elicitation/{execution_id}/resolve", json={"approved": False}
    )
    assert same.status_code == 200
    assert same.json() == {"executionId": execution_id, "approved": False, "resolved": True}
    other = await rig.client.post(
        f"/api/elicitation/{execution_id}/resolve", json={"approved": True}
    )
    assert other.status_code == 409
    assert "Already answered by Alice" in other.json()["detail"]
    record = await rig.store.get(key)
    assert record is not None
    assert record.answer is not None
    assert record.answer.respondent == "slack:U0ALICE"
    assert await rig.store.count("answer") == 1


async def test_a_form_answered_in_writing_returns_the_text_as_data(rig: Rig) -> None:
    execution_id = await stored(rig, "a form")

    outcome = await rig.service.answer(
        ElicitationKey(f"toolshed:{execution_id}"),
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text="staging, after the freeze", via=C2),
    )

    assert outcome.won
    polled = await rig.client.get(f"/api/elicitation/{execution_id}")
    assert polled.json() == {
        "executionId": execution_id,
        "approved": True,
        "data": {"text": "staging, after the freeze"},
    }


async def test_a_second_resolve_is_a_retry_or_a_conflict_and_answers_once(rig: Rig) -> None:
    execution_id = await stored(rig)
    path = f"/api/elicitation/{execution_id}/resolve"

    first = await rig.client.post(path, json={"approved": True})
    retry = await rig.client.post(path, json={"approved": True})
    change = await rig.client.post(path, json={"approved": False})

    assert first.status_code == retry.status_code == 200
    assert first.json() == retry.json()
    assert change.status_code == 409
    assert change.headers["content-type"].startswith(PROBLEM)
    assert await rig.store.count("answer") == 1
    assert await rig.dispatcher.drain() == 3  # one write-back, then one update per copy
    assert len(rig.chat.updated) == 2


async def test_an_execution_id_with_slashes_is_polled_and_resolved(rig: Rig) -> None:
    body = {**request(), "executionId": "run/42/step-3"}
    assert (await rig.client.post("/api/elicitation", json=body)).status_code == 201

    pending = await rig.client.get("/api/elicitation/run/42/step-3")
    resolved = await rig.client.post(
        "/api/elicitation/run/42/step-3/resolve", json={"approved": True}
    )

    assert pending.json() == {"executionId": "run/42/step-3", "status": "pending"}
    assert resolved.json() == {"executionId": "run/42/step-3", "approved": True, "resolved": True}


async def test_an_identical_resend_is_stored_once_and_a_changed_one_revises_it(rig: Rig) -> None:
    execution_id = await stored(rig)

    again = await rig.client.post("/api/elicitation", json=request())
    await rig.dispatcher.run_once()
    assert again.status_code == 201
    assert again.json() == {"stored": True, "executionId": execution_id}
    assert await rig.store.count("elicitation") == 1
    assert len(rig.chat.posted) == 2
    assert rig.chat.updated == []

    reworded = await rig.client.post(
        "/api/elicitation", json={**request(), "message": "Create the issue in my-org/other?"}
    )
    assert reworded.status_code == 201
    assert await rig.dispatcher.run_once() == 2
    assert len(rig.chat.posted) == 2
    assert {u.view.elicitation.question for u in rig.chat.updated} == {
        "Create the issue in my-org/other?"
    }


# --- errors -------------------------------------------------------------------------------------


async def test_every_refused_request_is_a_400_naming_the_field_and_stores_nothing(
    rig: Rig,
) -> None:
    for name, body in FIXTURES["refused"].items():
        response = await rig.client.post("/api/elicitation", json=body)
        assert response.status_code == 400, name
        assert fields(response) == REFUSED_FIELDS[name], name
    await nothing_stored(rig)


async def test_a_body_that_is_not_json_is_a_400(rig: Rig) -> None:
    response = await rig.client.post(
        "/api/elicitation", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert fields(response) == ["body"]
    await nothing_stored(rig)


async def test_a_non_json_content_type_is_a_415(rig: Rig) -> None:
    response = await rig.client.post(
        "/api/elicitation",
        content=json.dumps(request()).encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert response.status_code == 415
    assert response.headers["content-type"].startswith(PROBLEM)
    await nothing_stored(rig)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/elicitation", FIXTURES["valid"]["the spec's approval"]),
        ("GET", f"/api/elicitation/{SPEC_ID}", None),
        ("POST", f"/api/elicitation/{SPEC_ID}/resolve", {"approved": True}),
    ],
)
async def test_every_route_needs_the_bearer_token(
    rig: Rig, method: str, path: str, body: Any
) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        response = await rig.client.request(method, path, json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["content-type"].startswith(PROBLEM)
    await nothing_stored(rig)


async def test_a_method_no_route_takes_names_what_the_document_says_in_allow(rig: Rig) -> None:
    """A 405 names the methods of the operation the document has at that path (RFC 9110, and
    schemathesis's Allow check): the resolve route's POST at ``…/resolve``, the poll's GET else
    (its ``{execution_id:path}`` matches ``…/resolve`` too, for an id that ends so)."""
    at_resolve = await rig.client.request("OPTIONS", "/api/elicitation/run-1/resolve")
    at_poll = await rig.client.request("OPTIONS", "/api/elicitation/run-1")

    assert (at_resolve.status_code, at_resolve.headers["allow"]) == (405, "POST")
    assert (at_poll.status_code, at_poll.headers["allow"]) == (405, "GET")
    assert at_resolve.headers["content-type"].startswith(PROBLEM)


async def test_an_execution_id_ending_in_resolve_is_refused_and_its_get_is_a_405(rig: Rig) -> None:
    """``GET …/<id>/resolve`` is the resolve route's URL (POST only), not a poll of
    ``<id>/resolve``: such an id is refused, so that every stored one can be polled."""
    body = {**request(), "executionId": "run-1/resolve"}
    created = await rig.client.post("/api/elicitation", json=body)
    polled = await rig.client.get("/api/elicitation/run-1/resolve")

    assert created.status_code == 400
    assert fields(created) == ["executionId"]
    assert (polled.status_code, polled.headers["allow"]) == (405, "POST")
    await nothing_stored(rig)


async def test_an_unknown_execution_id_is_a_404(rig: Rig) -> None:
    polled = await rig.client.get("/api/elicitation/nope")
    resolved = await rig.client.post("/api/elicitation/nope/resolve", json={"approved": True})
    assert polled.status_code == resolved.status_code == 404
    assert "nope" in polled.json()["detail"]
    assert resolved.headers["content-type"].startswith(PROBLEM)
    await nothing_stored(rig)


async def test_every_refused_resolve_is_a_400_naming_the_field_and_changes_nothing(
    rig: Rig,
) -> None:
    execution_id = await stored(rig)
    for name, body in FIXTURES["resolve_refused"].items():
        response = await rig.client.post(f"/api/elicitation/{execution_id}/resolve", json=body)
        assert response.status_code == 400, name
        assert fields(response) == RESOLVE_REFUSED_FIELDS[name], name
    record = await rig.store.get(ElicitationKey(f"toolshed:{execution_id}"))
    assert record is not None
    assert (record.status, record.answer) == (Status.PENDING, None)
    assert await rig.store.count("answer") == 0


async def test_resolving_through_the_route_can_be_turned_off_by_listing_it_as_an_agent(
    store: SqlStore, clock: FakeClock
) -> None:
    people = People(agents=frozenset({"toolshed:api"}))
    async for rig in make_rig(store, clock, people):
        execution_id = await stored(rig)
        response = await rig.client.post(
            f"/api/elicitation/{execution_id}/resolve", json={"approved": True}
        )
        assert response.status_code == 403
        assert response.headers["content-type"].startswith(PROBLEM)
        record = await rig.store.get(ElicitationKey(f"toolshed:{execution_id}"))
        assert record is not None
        assert record.status is Status.PENDING
        [refusal] = [r for r in await rig.store.audit(record.elicitation.key) if r.code]
        assert (refusal.actor, refusal.code) == ("toolshed:api", RefusalCode.AGENT.value)
        # A person in chat still answers.
        won = await rig.service.answer(
            record.elicitation.key,
            Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("approve",), via=C1),
        )
        assert won.won

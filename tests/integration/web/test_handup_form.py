"""A three-question handup request answered in the web inbox (issue 13): one input per question,
and the callback gets ``decision.fields.answers`` with all three under their question ids,
valid against handup's JSON Schema. A form missing an answer is refused, naming the question.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from adapters.sources.handup import HandupSink, handup_router
from adapters.sources.handup.validation import schema_problems
from adapters.web.identity import IdentityPolicy
from adapters.web.routes import inbox_router
from adapters.web.session import CSRF_COOKIE
from bot.app.http import Runtime, authorised, create_app
from bot.domain.model import ElicitationKey, People, Route
from bot.outbox import Dispatcher
from bot.service import Service
from store.sql import SqlStore
from tests.conftest import REPO, FakeClock
from tests.fakes import FakeWebhook

TOKEN = "intake-token-0123456789"
VALID = json.loads((REPO / "tests" / "fixtures" / "sources" / "handup.json").read_text("utf-8"))[
    "valid"
]
OUTPUT = Path(REPO) / "test-output"


@dataclass
class Rig:
    http: httpx.AsyncClient
    dispatcher: Dispatcher
    hook: FakeWebhook


@pytest.fixture
def hook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as receiver:
        yield receiver


@pytest.fixture
async def rig(store: SqlStore, clock: FakeClock, hook: FakeWebhook) -> AsyncIterator[Rig]:
    allowlist = [f"http://127.0.0.1:{hook.port}/"]
    async with httpx.AsyncClient() as client:
        sink = HandupSink(client, allowlist)
        dispatcher = Dispatcher(store, clock, {}, {"handup": sink}, lambda k: f"/#{k}")
        service = Service(
            store,
            clock,
            People(admins=IdentityPolicy().admin_keys()),
            [Route(destinations=("web",))],
            on_change=dispatcher.wake,
        )
        runtime = Runtime(store=store, elicitations=service, intake_token=TOKEN)
        runtime.routers += [
            handup_router(service, lambda r: authorised(runtime, r), allowlist, clock=clock),
            inbox_router(service, store, IdentityPolicy(), clock=clock),
        ]
        transport = httpx.ASGITransport(app=create_app(runtime), client=("127.0.0.1", 50123))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as h:
            yield Rig(h, dispatcher, hook)


async def asked(rig: Rig) -> ElicitationKey:
    data: dict[str, Any] = copy.deepcopy(VALID["form"])
    data["callback_url"] = rig.hook.url
    response = await rig.http.post(
        "/v1/handup/requests", json=data, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 202, response.text
    return ElicitationKey(f"handup:{response.json()['id']}")


async def answer(rig: Rig, key: str, fields: list[tuple[str, str]]) -> httpx.Response:
    page = await rig.http.get("/")
    assert page.status_code == 200
    data = [("csrf", rig.http.cookies[CSRF_COOKIE]), ("key", key), *fields]
    return await rig.http.post(
        "/inbox/answer",
        content=urlencode(data),
        headers={
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )


async def test_three_questions_answered_in_the_inbox_reach_the_callback(rig: Rig) -> None:
    key = await asked(rig)
    page = (await rig.http.get("/")).text
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "inbox-handup-form.html").write_text(page, "utf-8")
    assert page.count('class="question-field"') == 3
    assert 'type="radio" name="q.channel" value="beta" checked' in page  # the recommended one
    assert 'type="checkbox" name="q.targets" value="macos"' in page
    assert 'name="q.notes.text"' in page

    sent = await answer(
        rig,
        key,
        [
            ("q.channel", "beta"),
            ("q.targets", "linux"),
            ("q.targets", "macos"),
            ("q.notes.text", "Ship it on Friday."),
        ],
    )
    assert sent.status_code == 200, sent.text
    await rig.dispatcher.drain()

    [callback] = [r for r in rig.hook.requests if r.method == "POST"]
    decision = callback.body["decision"]
    assert decision["fields"] == {
        "answers": {
            "channel": {"selected": ["beta"], "text": None},
            "targets": {"selected": ["linux", "macos"], "text": None},
            "notes": {"selected": [], "text": "Ship it on Friday."},
        }
    }
    assert callback.body["status"] == "answered"
    assert schema_problems(callback.body) == []


async def test_a_form_missing_an_answer_is_refused_naming_the_question(rig: Rig) -> None:
    key = await asked(rig)
    refused = await answer(rig, key, [("q.channel", "stable"), ("q.notes.text", "fine")])
    assert refused.status_code == 422, refused.text
    assert "Answer question 2 (Which targets?)." in refused.text
    wrong = await answer(rig, key, [("q.channel", "stable"), ("q.channel", "beta")])
    assert wrong.status_code == 422, wrong.text
    assert "Choose only one option in question 1 (Channel)." in wrong.text
    await rig.dispatcher.drain()
    assert [r for r in rig.hook.requests if r.method == "POST"] == []


async def test_a_refused_callback_shows_on_the_card_and_in_admin(rig: Rig) -> None:
    key = await asked(rig)
    rig.hook.script([422])
    sent = await answer(
        rig, key, [("q.channel", "stable"), ("q.targets", "linux"), ("q.notes.text", "ok")]
    )
    assert sent.status_code == 200, sent.text
    page = (await rig.http.get("/")).text
    assert "⏳ sending to handup…" in page  # not "Answered" before handup has it
    await rig.dispatcher.drain()

    page = (await rig.http.get("/")).text
    assert "was not accepted by handup" in page
    assert "The question is open again: answer it again." in page
    assert page.count('class="question-field"') == 3  # answerable again
    admin = (await rig.http.get("/admin")).text
    assert "write-back refused (reopened)" in admin

"""The HTTP contract end to end: an in-process ``Elicitbot`` on SQLite and on PostgreSQL.

Every test drives ``bot.asgi()`` through ``httpx.ASGITransport`` (which runs no lifespan, so the
fixture calls ``start()``/``stop()`` itself: migrations, then the outbox dispatcher) and checks the
status code, the problem+json body and what the database holds afterwards.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from adapters.sources.superpipeline import CE_TYPE
from bot.app.config import AppConfig, ServerConfig, StoreConfig
from bot.app.wiring import Elicitbot
from bot.domain.model import ElicitationKey, Status
from bot.domain.records import EffectView
from bot.outbox import Dispatcher
from tests.conftest import FakeClock
from tests.showcase import long_question
from tests.unit.sources.superpipeline_fixtures import REFUSED, VALID

SUBJECT = "evt.acme.superpipeline.elicitation.pending"
CE_SOURCE = "https://superpipeline.example.org"
STRUCTURED = "application/cloudevents+json; charset=utf-8"
BATCH = "application/cloudevents-batch+json"
PROBLEM = "application/problem+json"
TOKEN_ENV = "ELICITBOT_TEST_INTAKE_TOKEN"
TOKEN = "intake-token-7f3a9c"
REFUSED_LOCS = {
    "an elicitation option never asks for a comment": "data.options[2].needsComment",
    "scope is once, run or always": "data.options[0].scope",
    "agentId is required": "data.agentId",
    "freeText has a maxLength": "data.freeText.maxLength",
}
POLL_TIMEOUT_S = 10.0
TABLES = ("elicitation", "inbound", "delivery", "outbox", "deadline", "audit", "answer")

BotFactory = Callable[..., Awaitable[Elicitbot]]


# --- documents ---------------------------------------------------------------------------------


def body(case: str = "options") -> dict[str, Any]:
    return copy.deepcopy(VALID[case])


def envelope(data: Any = None, **changes: Any) -> dict[str, Any]:
    """A structured-mode SuperPipeline event; ``name=...`` (Ellipsis) drops an attribute."""
    document: dict[str, Any] = {
        "specversion": "1.0",
        "id": "ce-0001",
        "source": CE_SOURCE,
        "type": CE_TYPE,
        "subject": SUBJECT,
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "data": body() if data is None else data,
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not ...}


def binary_headers(document: dict[str, Any]) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    for name in ("id", "source", "specversion", "type", "subject", "time"):
        if name in document:
            headers[f"ce-{name}"] = str(document[name])
    return headers


def fields(response: httpx.Response) -> list[str]:
    """The ``errors[].field`` of a problem+json response (asserting it is one)."""
    assert response.headers["content-type"].startswith(PROBLEM), response.text
    problem = response.json()
    assert problem["status"] == response.status_code
    return [e["field"] for e in problem.get("errors", [])]


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
async def make_bot(
    db_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[BotFactory]:
    """Build and start Elicitbots on the test database; every one is stopped afterwards.

    The dispatcher idles 50 ms instead of 1 s between polls, so that ``stop()`` is quick even
    when it loses the wake-up race (see ``test_stop_during_an_outbox_claim_is_prompt``).
    """
    started: list[Elicitbot] = []

    async def factory(
        config: AppConfig | None = None, environ: dict[str, str] | None = None
    ) -> Elicitbot:
        config = config or AppConfig(store=StoreConfig(url=db_url))
        bot = Elicitbot(config, environ=environ or {}, clock=clock)
        monkeypatch.setattr(
            bot.dispatcher,
            "run",
            functools.partial(Dispatcher.run, bot.dispatcher, idle_seconds=0.05),
        )
        await bot.start()
        started.append(bot)
        return bot

    try:
        yield factory
    finally:
        for bot in started:
            await bot.stop()


@pytest.fixture
async def bot(make_bot: BotFactory) -> Elicitbot:
    return await make_bot()


@pytest.fixture
async def client(bot: Elicitbot) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(bot) as c:
        yield c


def _client(bot: Elicitbot, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=bot.asgi()),
        base_url="http://elicitbot.test",
        headers=headers,
    )


async def post_structured(
    client: httpx.AsyncClient, document: Any, **headers: str
) -> httpx.Response:
    return await client.post(
        "/v1/events",
        content=json.dumps(document).encode(),
        headers={"Content-Type": STRUCTURED, **headers},
    )


async def post_batch(client: httpx.AsyncClient, documents: list[Any]) -> httpx.Response:
    return await client.post(
        "/v1/events", content=json.dumps(documents).encode(), headers={"Content-Type": BATCH}
    )


async def counts(bot: Elicitbot) -> dict[str, int]:
    return {table: await bot.store.count(table) for table in TABLES}


async def assert_nothing_stored(bot: Elicitbot) -> None:
    assert await counts(bot) == dict.fromkeys(TABLES, 0)


async def posted_outbox(bot: Elicitbot, kind: str) -> list[EffectView]:
    return [row for row in await bot.store.outbox() if row.kind == kind]


async def inbox_copies(bot: Elicitbot) -> list[str]:
    """The web inbox's copies: posted in the intake transaction itself (no outbox row)."""
    rows = [
        await bot.store.deliveries(s.elicitation.key) for s in await bot.store.list_elicitations()
    ]
    return [d.state for ds in rows for d in ds if d.destination == "web"]


async def wait_until_posted(client: httpx.AsyncClient, ident: str) -> dict[str, Any]:
    """Poll the read route until the dispatcher has posted every delivery."""
    deadline = asyncio.get_running_loop().time() + POLL_TIMEOUT_S
    while True:
        response = await client.get(f"/v1/elicitations/{ident}")
        assert response.status_code == 200, response.text
        document: dict[str, Any] = response.json()
        states = [d["state"] for d in document["deliveries"]]
        if states and all(s == "posted" for s in states):
            return document
        assert asyncio.get_running_loop().time() < deadline, f"never posted: {document}"
        await asyncio.sleep(0.02)


# --- refusals: nothing stored ------------------------------------------------------------------


def test_the_refused_corpus_is_the_one_these_tests_name() -> None:
    assert set(REFUSED) == set(REFUSED_LOCS)


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_refused_fixture_is_a_400_naming_the_field(
    client: httpx.AsyncClient, bot: Elicitbot, case: str
) -> None:
    response = await post_structured(client, envelope(copy.deepcopy(REFUSED[case])))
    assert response.status_code == 400
    assert fields(response) == [REFUSED_LOCS[case]]
    await assert_nothing_stored(bot)


MALFORMED: dict[str, tuple[dict[str, Any], str]] = {
    "missing id": ({"id": ...}, "id"),
    "empty id": ({"id": ""}, "id"),
    "integer id": ({"id": 42}, "id"),
    "missing specversion": ({"specversion": ...}, "specversion"),
    "specversion 2.0": ({"specversion": "2.0"}, "specversion"),
    "missing source": ({"source": ...}, "source"),
    "empty source": ({"source": ""}, "source"),
    "missing type": ({"type": ...}, "type"),
    "another type": ({"type": "com.example.something.else"}, "type"),
    "time yesterday": ({"time": "yesterday"}, "time"),
    "time without offset": ({"time": "2026-11-10T09:30:00"}, "time"),
    "subject of another shape": ({"subject": "evt.acme.superpipeline.card.moved"}, "subject"),
    "subject with an empty workspace": (
        {"subject": "evt..superpipeline.elicitation.pending"},
        "subject",
    ),
    "no data": ({"data": ...}, "data"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_malformed_cloudevent_is_a_400_naming_the_attribute(
    client: httpx.AsyncClient, bot: Elicitbot, case: str
) -> None:
    changes, field = MALFORMED[case]
    response = await post_structured(client, envelope(**changes))
    assert response.status_code == 400
    assert field in fields(response)
    await assert_nothing_stored(bot)


async def test_missing_id_is_refused_in_binary_mode_too(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    headers = binary_headers(envelope(id=...))
    response = await client.post("/v1/events", content=json.dumps(body()), headers=headers)
    assert response.status_code == 400
    assert fields(response) == ["id"]
    await assert_nothing_stored(bot)


async def test_invalid_json_in_binary_mode_is_a_400(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    response = await client.post(
        "/v1/events", content=b"{not json", headers=binary_headers(envelope())
    )
    assert response.status_code == 400
    assert fields(response) == ["data"]
    await assert_nothing_stored(bot)


async def test_invalid_json_in_structured_mode_is_a_400(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    response = await client.post(
        "/v1/events", content=b'{"id": "x",', headers={"Content-Type": STRUCTURED}
    )
    assert response.status_code == 400
    assert fields(response) == ["body"]
    await assert_nothing_stored(bot)


async def test_body_over_one_mebibyte_is_a_413(client: httpx.AsyncClient, bot: Elicitbot) -> None:
    document = envelope(data={**body(), "question": "x" * (2 * 1024 * 1024)})
    response = await post_structured(client, document)
    assert response.status_code == 413
    assert response.headers["content-type"].startswith(PROBLEM)
    assert response.json()["status"] == 413
    await assert_nothing_stored(bot)


async def test_ten_megabyte_body_is_a_413(client: httpx.AsyncClient, bot: Elicitbot) -> None:
    response = await client.post(
        "/v1/events", content=b" " * (10 * 1000 * 1000), headers={"Content-Type": STRUCTURED}
    )
    assert response.status_code == 413
    assert response.json()["status"] == 413
    await assert_nothing_stored(bot)


async def test_ten_megabyte_body_without_content_length_is_a_413(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    """A chunked body declares no size: the limit is counted while it streams in."""

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b" " * (1000 * 1000)

    response = await client.post(
        "/v1/events", content=chunks(), headers={"Content-Type": STRUCTURED}
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    await assert_nothing_stored(bot)


async def test_exactly_one_mebibyte_is_not_too_large(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    raw = json.dumps(envelope()).encode()
    padded = raw + b" " * (1024 * 1024 - len(raw))
    assert len(padded) == 1024 * 1024
    response = await client.post("/v1/events", content=padded, headers={"Content-Type": STRUCTURED})
    assert response.status_code == 202, response.text
    assert await bot.store.count("elicitation") == 1


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml"])
async def test_non_json_content_type_is_a_415(
    client: httpx.AsyncClient, bot: Elicitbot, content_type: str
) -> None:
    headers = {**binary_headers(envelope()), "Content-Type": content_type}
    response = await client.post("/v1/events", content=json.dumps(body()), headers=headers)
    assert response.status_code == 415
    assert response.headers["content-type"].startswith(PROBLEM)
    await assert_nothing_stored(bot)


async def test_plain_text_without_ce_headers_is_a_415(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    response = await client.post(
        "/v1/events", content=b"hello", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 415
    await assert_nothing_stored(bot)


# --- accepted events ---------------------------------------------------------------------------


async def test_structured_event_with_a_stray_ce_header_is_accepted(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    response = await post_structured(
        client,
        envelope(),
        **{"ce-traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    assert response.status_code == 202, response.text
    assert response.json()["result"] == "accepted"
    assert await bot.store.count("elicitation") == 1


@pytest.mark.parametrize("case", sorted(VALID))
async def test_valid_fixture_is_accepted_and_readable(
    client: httpx.AsyncClient, bot: Elicitbot, case: str
) -> None:
    source_id = VALID[case]["elicitationId"]
    response = await post_structured(client, envelope(body(case), id=f"ce-{case}"))
    assert response.status_code == 202, response.text
    assert response.json() == {
        "id": f"ce-{case}",
        "elicitation": f"superpipeline:{source_id}",
        "result": "accepted",
    }

    read = await client.get(f"/v1/elicitations/{source_id}")
    assert read.status_code == 200, read.text
    document = read.json()
    assert document["id"] == f"superpipeline:{source_id}"
    assert document["source"] == "superpipeline"
    assert document["sourceId"] == source_id
    assert document["status"] == "pending"
    assert document["workspace"] == "acme"
    assert document["answer"] is None
    assert document["version"] == 1
    assert document["question"] == VALID[case]["question"]
    assert [d["destination"] for d in document["deliveries"]] == ["web"]
    assert isinstance(document["deadlines"], list)
    assert await bot.store.count("elicitation") == 1
    assert await inbox_copies(bot) == ["posted"]
    assert await posted_outbox(bot, "post") == []


async def test_event_without_subject_has_no_workspace(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    response = await post_structured(client, envelope(subject=...))
    assert response.status_code == 202, response.text
    read = await client.get(f"/v1/elicitations/{VALID['options']['elicitationId']}")
    assert read.json()["workspace"] is None


async def test_binary_mode_event_is_accepted(client: httpx.AsyncClient, bot: Elicitbot) -> None:
    response = await client.post(
        "/v1/events", content=json.dumps(body()), headers=binary_headers(envelope())
    )
    assert response.status_code == 202, response.text
    read = await client.get(f"/v1/elicitations/{VALID['options']['elicitationId']}")
    assert read.json()["workspace"] == "acme"


async def test_the_same_event_three_ways_is_stored_and_posted_once(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    document = envelope(id="ce-dup-1")
    key = f"superpipeline:{VALID['options']['elicitationId']}"

    structured = await post_structured(client, document)
    assert structured.status_code == 202, structured.text
    assert structured.json()["result"] == "accepted"

    binary = await client.post(
        "/v1/events", content=json.dumps(document["data"]), headers=binary_headers(document)
    )
    assert binary.status_code == 200, binary.text
    assert binary.json() == {"id": "ce-dup-1", "elicitation": key, "result": "duplicate"}

    batch = await post_batch(client, [document])
    assert batch.status_code == 202, batch.text
    assert batch.json() == {
        "results": [{"id": "ce-dup-1", "elicitation": key, "result": "duplicate"}]
    }

    await wait_until_posted(client, key)
    assert await bot.store.count("elicitation") == 1
    assert await bot.store.count("inbound") == 1
    assert await bot.store.count("delivery") == 1
    assert await inbox_copies(bot) == ["posted"]
    assert await posted_outbox(bot, "post") == []
    assert await posted_outbox(bot, "update") == []


@pytest.mark.parametrize("size", [100_000, 900_000], ids=["100KB", "900KB"])
async def test_a_long_question_is_accepted_in_every_mode_and_read_back_whole(
    client: httpx.AsyncClient, bot: Elicitbot, size: int
) -> None:
    """No spec sets a maximum on ``question``: a 100 KB and a 900 KB one are taken in by
    structured, binary and batch mode alike, stored and read back exactly."""
    for i, mode in enumerate(("structured", "binary", "batch")):
        data = {
            **body(),
            "elicitationId": f"eli_long_{mode}",
            "question": long_question(size, mode),
        }
        document = envelope(data, id=f"ce-long-{i}")
        if mode == "structured":
            response = await post_structured(client, document)
        elif mode == "binary":
            raw = json.dumps(data).encode()
            response = await client.post(
                "/v1/events", content=raw, headers=binary_headers(document)
            )
        else:
            response = await post_batch(client, [document])
        assert response.status_code == 202, (mode, response.text[:500])
        read = await client.get(f"/v1/elicitations/eli_long_{mode}")
        assert read.status_code == 200, read.text[:500]
        stored = await bot.store.get(ElicitationKey(f"superpipeline:eli_long_{mode}"))
        assert stored is not None
        assert stored.elicitation.question == data["question"], mode
        assert len(stored.elicitation.question) == size


async def test_an_engine_ask_to_a_platform_not_running_is_a_422_and_stores_nothing(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    """The composed app knows which platforms run: Slack is off here, so an engine ask naming
    a Slack channel cannot succeed; it is refused before anything is stored (the engine must
    not retry it, as it would a 5xx)."""
    ask = {
        "id": "dlv_nowhere",
        "ask": {"title": "Ship?"},
        "destinations": ["web", "slack:C1"],
        "followup_seconds": 0,
    }
    response = await client.post("/v1/deliveries", json=ask)
    assert response.status_code == 422, response.text
    assert fields(response) == ["destinations[1]"]
    assert "slack is not configured" in response.text
    await assert_nothing_stored(bot)


async def test_percent_encoded_binary_headers_dedupe_with_structured(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    """ce-* values are percent-decoded: ``ce-id: a%20b`` is the structured id ``a b``."""
    document = envelope(id="a b")
    assert (await post_structured(client, document)).status_code == 202
    headers = {**binary_headers(document), "ce-id": "a%20b"}
    binary = await client.post("/v1/events", content=json.dumps(document["data"]), headers=headers)
    assert binary.status_code == 200, binary.text
    assert binary.json()["id"] == "a b"
    assert await bot.store.count("inbound") == 1


async def test_batch_of_three_is_accepted_with_one_result_each(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    cases = ["options", "free-text", "approval-request"]
    documents = [envelope(body(case), id=f"ce-batch-{i}") for i, case in enumerate(cases)]
    response = await post_batch(client, documents)
    assert response.status_code == 202, response.text
    assert response.json() == {
        "results": [
            {
                "id": f"ce-batch-{i}",
                "elicitation": f"superpipeline:{VALID[case]['elicitationId']}",
                "result": "accepted",
            }
            for i, case in enumerate(cases)
        ]
    }
    assert await bot.store.count("elicitation") == 3
    assert await inbox_copies(bot) == ["posted"] * 3


async def test_batch_with_one_invalid_event_stores_nothing(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    documents = [
        envelope(body("options"), id="ce-b-0"),
        envelope(body("free-text"), id=""),
        envelope(body("approval-request"), id="ce-b-2"),
    ]
    response = await post_batch(client, documents)
    assert response.status_code == 400
    assert fields(response) == ["[1].id"]
    await assert_nothing_stored(bot)


async def test_batch_with_an_invalid_body_at_index_1_names_the_data_field(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    bad = copy.deepcopy(REFUSED["agentId is required"])
    bad["elicitationId"] = "eli_other"
    documents = [envelope(body("options"), id="ce-b-0"), envelope(bad, id="ce-b-1")]
    response = await post_batch(client, documents)
    assert response.status_code == 400
    assert fields(response) == ["[1].data.agentId"]
    await assert_nothing_stored(bot)


@pytest.mark.parametrize("content", [b"[]", b"{}", b"[42]"])
async def test_batch_that_is_not_a_list_of_events_is_a_400(
    client: httpx.AsyncClient, bot: Elicitbot, content: bytes
) -> None:
    response = await client.post("/v1/events", content=content, headers={"Content-Type": BATCH})
    assert response.status_code == 400
    assert fields(response)
    await assert_nothing_stored(bot)


async def test_revision_with_a_new_event_id_updates_the_elicitation(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    source_id = VALID["options"]["elicitationId"]
    first = await post_structured(client, envelope(id="ce-rev-1"))
    assert first.status_code == 202
    posted = await wait_until_posted(client, source_id)
    assert posted["version"] == 1
    assert await posted_outbox(bot, "update") == []

    changed = body()
    changed["question"] = "May I run the migration on the replica instead?"
    second = await post_structured(client, envelope(changed, id="ce-rev-2"))
    assert second.status_code == 202, second.text
    assert second.json()["elicitation"] == f"superpipeline:{source_id}"

    read = (await client.get(f"/v1/elicitations/{source_id}")).json()
    assert read["version"] == 2
    assert read["status"] == "pending"
    assert read["question"] == "May I run the migration on the replica instead?"
    assert await bot.store.count("elicitation") == 1
    assert await inbox_copies(bot) == ["posted"]
    # The inbox renders the stored state, so its copy needs no update row; a chat copy would get
    # one (tests/contract/test_store.py covers that).
    assert await posted_outbox(bot, "update") == []


# --- bearer token ------------------------------------------------------------------------------


@pytest.fixture
async def guarded(make_bot: BotFactory, db_url: str) -> Elicitbot:
    config = AppConfig(
        server=ServerConfig(intake_token_env=TOKEN_ENV), store=StoreConfig(url=db_url)
    )
    return await make_bot(config, {TOKEN_ENV: TOKEN})


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x", "Bearer "],
)
async def test_intake_and_reads_need_the_bearer_token(
    guarded: Elicitbot, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    async with _client(guarded, **headers) as c:
        post = await post_structured(c, envelope())
        listing = await c.get("/v1/elicitations")
        one = await c.get(f"/v1/elicitations/{VALID['options']['elicitationId']}")
    for response in (post, listing, one):
        assert response.status_code == 401
        assert response.headers["content-type"].startswith(PROBLEM)
    await assert_nothing_stored(guarded)


async def test_the_right_bearer_token_is_accepted(guarded: Elicitbot) -> None:
    async with _client(guarded, Authorization=f"Bearer {TOKEN}") as c:
        post = await post_structured(c, envelope())
        assert post.status_code == 202, post.text
        listing = await c.get("/v1/elicitations")
        assert listing.status_code == 200
        assert len(listing.json()["items"]) == 1
        one = await c.get(f"/v1/elicitations/{VALID['options']['elicitationId']}")
        assert one.status_code == 200
        health = await c.get("/healthz")
        assert health.status_code == 200
    assert await guarded.store.count("elicitation") == 1


async def test_health_needs_no_token(guarded: Elicitbot) -> None:
    async with _client(guarded) as c:
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/readyz")).status_code == 200


# --- reads -------------------------------------------------------------------------------------


async def test_list_filters_by_status_and_pages_with_a_cursor(
    client: httpx.AsyncClient, bot: Elicitbot, clock: FakeClock
) -> None:
    keys = []
    for i, case in enumerate(sorted(VALID)):
        response = await post_structured(client, envelope(body(case), id=f"ce-list-{i}"))
        assert response.status_code == 202
        keys.append(response.json()["elicitation"])
        if i % 2:
            clock.advance(1)  # some share a created_at: the key breaks the tie
    cancelled = keys[1]
    assert await bot.store.close_elicitation(
        cancelled, Status.CANCELLED, clock.now(), answer=None, audit={}
    )

    everything = await client.get("/v1/elicitations")
    assert everything.status_code == 200
    assert everything.json()["next"] is None
    assert sorted(item["id"] for item in everything.json()["items"]) == sorted(keys)

    pending = (await client.get("/v1/elicitations", params={"status": "pending"})).json()
    assert sorted(item["id"] for item in pending["items"]) == sorted(set(keys) - {cancelled})
    assert all(item["status"] == "pending" for item in pending["items"])
    only_cancelled = (await client.get("/v1/elicitations", params={"status": "cancelled"})).json()
    assert [item["id"] for item in only_cancelled["items"]] == [cancelled]
    assert (await client.get("/v1/elicitations", params={"status": "answered"})).json() == {
        "items": [],
        "next": None,
    }

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 1}
        if cursor is not None:
            params["cursor"] = cursor
        page = (await client.get("/v1/elicitations", params=params)).json()
        pages += 1
        assert len(page["items"]) == 1
        seen += [item["id"] for item in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
        assert pages < 10
    assert seen == [item["id"] for item in everything.json()["items"]]
    assert len(set(seen)) == len(keys)

    two = (await client.get("/v1/elicitations", params={"limit": 2, "status": "pending"})).json()
    assert len(two["items"]) == 2
    assert two["next"] == two["items"][-1]["id"]
    rest = (
        await client.get(
            "/v1/elicitations", params={"limit": 2, "status": "pending", "cursor": two["next"]}
        )
    ).json()
    assert rest["next"] is None
    assert [i["id"] for i in two["items"] + rest["items"]] == [i["id"] for i in pending["items"]]


@pytest.mark.parametrize(
    "params", [{"status": "open"}, {"limit": 0}, {"limit": 501}, {"limit": "many"}]
)
async def test_list_with_a_bad_query_is_a_400_naming_it(
    client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    response = await client.get("/v1/elicitations", params=params)
    assert response.status_code == 400
    assert fields(response) == list(params)


async def test_get_by_full_key_and_by_bare_id(client: httpx.AsyncClient) -> None:
    source_id = VALID["approval-request"]["elicitationId"]
    assert (await post_structured(client, envelope(body("approval-request")))).status_code == 202
    by_key = await client.get(f"/v1/elicitations/superpipeline:{source_id}")
    by_id = await client.get(f"/v1/elicitations/{source_id}")
    assert by_key.status_code == by_id.status_code == 200
    assert by_key.json()["id"] == by_id.json()["id"] == f"superpipeline:{source_id}"
    assert by_key.json()["kind"] == "approval"
    # remindAt, and the approval subject's expiry (which withdraws the approve buttons).
    assert {d["kind"] for d in by_key.json()["deadlines"]} == {"remind", "subject_expired"}


@pytest.mark.parametrize("ident", ["eli_unknown", "superpipeline:eli_unknown", "handup:x"])
async def test_unknown_elicitation_is_a_404(client: httpx.AsyncClient, ident: str) -> None:
    assert (await post_structured(client, envelope())).status_code == 202
    response = await client.get(f"/v1/elicitations/{ident}")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM)


# --- health, metrics, docs ---------------------------------------------------------------------


async def test_healthz_and_readyz(client: httpx.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready"}


async def test_readyz_is_503_while_stopping(make_bot: BotFactory) -> None:
    bot = await make_bot()
    async with _client(bot) as c:
        assert (await c.get("/readyz")).status_code == 200
        bot.runtime.draining = True
        not_ready = await c.get("/readyz")
        post = await post_structured(c, envelope())
        health = await c.get("/healthz")
    assert not_ready.status_code == 503
    assert "shutting down" in not_ready.json()["problems"]
    assert post.status_code == 503
    assert health.status_code == 200
    assert await bot.store.count("elicitation") == 0


async def test_stop_during_an_outbox_claim_is_prompt(db_url: str, clock: FakeClock) -> None:
    """stop() wakes the dispatcher; a wake-up that lands while it is claiming must not be lost.

    With nothing to do, stop() should take about as long as the claim in flight (0.2 s here),
    not that plus the dispatcher's whole 1 s idle wait.
    """
    bot = Elicitbot(AppConfig(store=StoreConfig(url=db_url)), environ={}, clock=clock)
    real_claim = bot.store.claim_outbox
    claiming = asyncio.Event()

    async def slow_claim(*args: Any, **kwargs: Any) -> Any:
        claiming.set()
        await asyncio.sleep(0.2)
        return await real_claim(*args, **kwargs)

    bot.store.claim_outbox = slow_claim  # type: ignore[method-assign]
    await bot.start()
    await asyncio.wait_for(claiming.wait(), timeout=5)
    started = asyncio.get_running_loop().time()
    await bot.stop()
    elapsed = asyncio.get_running_loop().time() - started
    assert bot.runtime.draining
    assert elapsed < 0.9, f"stop() took {elapsed:.2f} s"


async def test_readyz_is_503_when_the_store_is_unreachable(unreachable: Elicitbot) -> None:
    async with _client(unreachable) as c:
        health = await c.get("/healthz")
        ready = await c.get("/readyz")
    assert health.status_code == 200
    assert ready.status_code == 503
    problems = ready.json()["problems"]
    assert len(problems) == 1
    assert problems[0].startswith("store:")


@pytest.fixture
async def unreachable() -> AsyncIterator[Elicitbot]:
    """A bot on a PostgreSQL port where nothing listens (never started: it could not migrate)."""
    url = "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2"
    bot = Elicitbot(AppConfig(store=StoreConfig(url=url)), environ={})
    try:
        yield bot
    finally:
        await bot.http_client.aclose()
        await bot.store.close()


async def test_metrics_count_intake(client: httpx.AsyncClient) -> None:
    assert (await post_structured(client, envelope())).status_code == 202
    assert (await post_structured(client, envelope())).status_code == 200
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "elicitbot_intake_total" in text
    assert 'elicitbot_intake_total{result="accepted",source="superpipeline"} 1.0' in text
    assert 'elicitbot_intake_total{result="duplicate",source="superpipeline"} 1.0' in text
    assert "elicitbot_intake_seconds" in text


async def test_docs_serve_the_openapi_page(client: httpx.AsyncClient) -> None:
    docs = await client.get("/docs")
    assert docs.status_code == 200
    assert docs.headers["content-type"].startswith("text/html")
    assert "swagger" in docs.text.lower()
    schema = await client.get("/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/v1/events", "/v1/elicitations", "/healthz", "/readyz", "/metrics"):
        assert path in paths

"""Every intake route, fuzzed as a hostile or careless client would, on SQLite and PostgreSQL.

Issue 15: PostgreSQL answered 500 where SQLite answered 202 (a NUL, a value past a column), ids
with a trailing newline were taken in and could never be read back, and a Slack timestamp that is
no integer was a 500. The bounds of ``bot.domain.bounds`` now refuse such values at intake on
every route, so here, for every route and both stores, whatever a field holds:

- never a 5xx;
- a 4xx is ``application/problem+json`` whose ``errors`` name the field(s) at fault;
- after a 4xx nothing was stored (no elicitation, no inbound id);
- what was accepted reads back, by the id it was given, on the source's own read route and on
  ``GET /v1/elicitations/{id}``.

Values come from hypothesis: any text (NUL and control characters included), edge characters at
either end, and lengths either side of each bound and of each column. The examples are bounded
(see ``FUZZ``) so that the module runs in seconds; the issue's own findings are fixed cases.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import hmac
import itertools
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_bolt.async_app import AsyncApp

from adapters.slack.intake.routes import slack_router
from adapters.sources.superpipeline import CE_TYPE
from bot.app.config import AppConfig, StoreConfig
from bot.app.http import Runtime, create_app
from bot.app.wiring import Elicitbot
from bot.domain.store import Store
from bot.outbox import Dispatcher
from tests.conftest import FakeClock
from tests.unit.sources.superpipeline_fixtures import VALID

pytestmark = pytest.mark.slow

PROBLEM = "application/problem+json"
CE_SOURCE = "https://superpipeline.example.org"
SUBJECT = "evt.{workspace}.superpipeline.elicitation.pending"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sources"
ENGINE = json.loads((FIXTURES / "engine.json").read_text("utf-8"))["valid"]
TOOLSHED = json.loads((FIXTURES / "toolshed.json").read_text("utf-8"))["valid"]
HANDUP = json.loads((FIXTURES / "handup.json").read_text("utf-8"))["valid"]
STORED = ("elicitation", "inbound")
"""What intake writes first, in the one transaction that writes everything else it stores."""
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLACK_SECRET = "fuzz-signing-secret-5e1f"

# --- values ------------------------------------------------------------------------------------

EDGES = ["", " ", "\x00", "\t", "\n", "\r\n", "\x7f", "\x85", "\u2028", "\ufeff", "é", "/", "%"]
LENGTHS = [199, 200, 201, 240, 241, 242, 255, 256, 298, 300, 301, 361, 1_000, 1_001]
"""Either side of the bounds (200, 241, 255, 1,000) and of the store's columns (300, 360)."""

values = st.one_of(
    st.text(max_size=12),
    st.builds(
        lambda before, core, after: before + core + after,
        st.sampled_from(EDGES),
        st.text(alphabet="abc-_.:@", min_size=1, max_size=6),
        st.sampled_from(EDGES),
    ),
    st.builds(lambda n, c: c * n, st.sampled_from(LENGTHS), st.sampled_from(["a", "é", "\x00"])),
)

_serial = itertools.count()


def unique(prefix: str) -> str:
    """A fresh id for what the example does not fuzz: examples never collide."""
    return f"{prefix}-{next(_serial)}-{time.monotonic_ns()}"


def put(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``document`` with ``value`` at ``path`` (``ask.choices.0``: dots, list indexes)."""
    *parents, last = path.split(".")
    here: Any = document
    for part in parents:
        here = here[int(part)] if isinstance(here, list) else here[part]
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return document


# --- requests ----------------------------------------------------------------------------------


@dataclass
class Sent:
    """One request and how to read back what it asked to store."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    readback: list[tuple[str, str, str]] | Callable[[Any], list[tuple[str, str, str]]]
    """Each ``(read path, member, expected value)`` once accepted (a function of the response's
    body when the service assigns the id)."""


def event(fuzzed: str, value: str) -> dict[str, Any]:
    """A SuperPipeline CloudEvent with ``value`` in the envelope attribute or ``data`` field."""
    data = copy.deepcopy(VALID["options"])
    data["elicitationId"] = unique("eli")
    document: dict[str, Any] = {
        "specversion": "1.0",
        "id": unique("ce"),
        "source": CE_SOURCE,
        "type": CE_TYPE,
        "subject": SUBJECT.format(workspace="acme"),
        "time": "2026-11-10T09:30:00Z",
        "datacontenttype": "application/json",
        "data": data,
    }
    if fuzzed == "workspace":
        document["subject"] = SUBJECT.format(workspace=value)
    elif fuzzed in ("id", "source", "subject"):
        document[fuzzed] = value
    else:
        put(data, fuzzed, value)
    return document


def read_events(documents: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    ids = [d["data"]["elicitationId"] for d in documents]
    return [
        (f"/v1/elicitations/{quote('superpipeline:' + i, safe='')}", "sourceId", i) for i in ids
    ]


def structured(fuzzed: str, value: str) -> Sent:
    document = event(fuzzed, value)
    headers = {"Content-Type": "application/cloudevents+json"}
    return Sent(
        "POST", "/v1/events", headers, json.dumps(document).encode(), read_events([document])
    )


def binary(fuzzed: str, value: str) -> Sent:
    """Binary mode: the attributes in ``ce-`` headers, percent-encoded (CloudEvents HTTP 3.1.3)."""
    document = event(fuzzed, value)
    headers = {"Content-Type": "application/json"}
    for name in ("id", "source", "specversion", "type", "subject", "time"):
        headers[f"ce-{name}"] = quote(document[name], safe="")
    return Sent(
        "POST",
        "/v1/events",
        headers,
        json.dumps(document["data"]).encode(),
        read_events([document]),
    )


def batch(fuzzed: str, value: str) -> Sent:
    """A good event, then the fuzzed one: all or nothing."""
    documents = [event("question", "May I?"), event(fuzzed, value)]
    headers = {"Content-Type": "application/cloudevents-batch+json"}
    return Sent(
        "POST", "/v1/events", headers, json.dumps(documents).encode(), read_events(documents)
    )


def engine(fuzzed: str, value: str) -> Sent:
    document = copy.deepcopy(ENGINE["a question with choices"])
    document.update(id=unique("dlv"), destinations=["web"], followup_seconds=0)
    document["ask"].pop("mentions")
    put(document, fuzzed, value)
    ident = document["id"]
    read = [(f"/v1/elicitations/{quote('engine:' + str(ident), safe='')}", "sourceId", ident)]
    return Sent(
        "POST",
        "/v1/deliveries",
        {"Content-Type": "application/json"},
        json.dumps(document).encode(),
        read,
    )


def toolshed(fuzzed: str, value: str) -> Sent:
    document = copy.deepcopy(TOOLSHED["the spec's approval"])
    document["executionId"] = unique("exe")
    if fuzzed == "args.key":
        document["args"][value] = "x"
    else:
        put(document, fuzzed, value)
    ident = document["executionId"]
    read = [
        (f"/api/elicitation/{quote(ident, safe='')}", "executionId", ident),
        (f"/v1/elicitations/{quote('toolshed:' + ident, safe='')}", "sourceId", ident),
    ]
    return Sent(
        "POST",
        "/api/elicitation",
        {"Content-Type": "application/json"},
        json.dumps(document).encode(),
        read,
    )


def handup(fuzzed: str, value: str) -> Sent:
    document = copy.deepcopy(HANDUP["command"])
    document.pop("callback_url")  # no allowlist here
    document["id"] = unique("req")
    put(document, fuzzed, value)

    def read(body: Any) -> list[tuple[str, str, str]]:
        ident = document["id"] or body["id"]  # an empty id: elicitbot assigns one
        return [
            (f"/v1/handup/requests/{quote(ident, safe='')}", "id", ident),
            (f"/v1/elicitations/{quote('handup:' + ident, safe='')}", "sourceId", ident),
        ]

    return Sent(
        "POST",
        "/v1/handup/requests",
        {"Content-Type": "application/json"},
        json.dumps(document).encode(),
        read,
    )


EVENT_FIELDS = [
    "id",
    "source",
    "subject",
    "workspace",
    "elicitationId",
    "boardId",
    "boardName",
    "cardId",
    "cardTitle",
    "agentId",
    "question",
    "options.0.id",
    "options.0.label",
]
Target = tuple[Callable[[str, str], Sent], list[str]]
TARGETS: list[Target] = [
    (structured, EVENT_FIELDS),
    (binary, EVENT_FIELDS),
    (batch, EVENT_FIELDS),
    (
        engine,
        [
            "id",
            "ask.title",
            "ask.body",
            "ask.sender_id",
            "ask.conversation_id",
            "ask.choices.0",
            "ask.shared_key",
        ],
    ),
    (toolshed, ["executionId", "toolPath", "message", "args.title", "args.key"]),
    (
        handup,
        [
            "id",
            "title",
            "summary",
            "source.agent",
            "source.session",
            "source.repo",
            "dedupe_key",
            "options.0.id",
            "options.0.label",
        ],
    ),
]


# --- the service -------------------------------------------------------------------------------


@pytest.fixture
async def bot(
    db_url: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Elicitbot]:
    """The whole service as ``serve`` builds it (every source's routes), on the test database;
    one for all of a test's examples."""
    bot = Elicitbot(AppConfig(store=StoreConfig(url=db_url)), environ={}, clock=clock)
    monkeypatch.setattr(
        bot.dispatcher, "run", functools.partial(Dispatcher.run, bot.dispatcher, idle_seconds=0.05)
    )
    await bot.start()
    try:
        yield bot
    finally:
        await bot.stop()


@pytest.fixture
async def client(bot: Elicitbot) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=bot.asgi())
    async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot.test") as c:
        yield c


async def counts(bot: Elicitbot) -> dict[str, int]:
    return {table: await bot.store.count(table) for table in STORED}


def named_fields(response: httpx.Response) -> list[str]:
    """The fields a 4xx names (asserting it is problem+json that names at least one)."""
    assert response.headers["content-type"].startswith(PROBLEM), response.text
    problem = response.json()
    assert problem["status"] == response.status_code
    fields = [e["field"] for e in problem.get("errors", [])]
    assert fields, problem
    assert all(isinstance(f, str) and f for f in fields), problem
    return fields


async def check(client: httpx.AsyncClient, bot: Elicitbot, sent: Sent) -> httpx.Response:
    """Send ``sent`` and assert the four promises; the response, for more checks."""
    before = await counts(bot)
    response = await client.request(sent.method, sent.path, headers=sent.headers, content=sent.body)
    assert response.status_code < 500, (sent, response.text)
    if response.status_code >= 400:
        assert response.status_code == 400, response.text
        named_fields(response)
        assert await counts(bot) == before, (sent, response.text)
        return response
    readback = sent.readback if isinstance(sent.readback, list) else sent.readback(response.json())
    for path, member, expected in readback:
        read = await client.get(path)
        assert read.status_code == 200, (path, read.text)
        assert read.json()[member] == expected
    return response


# --- the fuzz ----------------------------------------------------------------------------------


NAMED_AS = {"workspace": "subject", "args.title": "args", "args.key": "args"}
"""Where a refusal of the fuzzed field is named when that is not the field's own last name."""


@FUZZ
@given(target=st.sampled_from(TARGETS), data=st.data())
async def test_no_input_makes_a_5xx_and_a_4xx_stores_nothing(
    client: httpx.AsyncClient, bot: Elicitbot, target: Target, data: st.DataObject
) -> None:
    make, fields = target
    fuzzed = data.draw(st.sampled_from(fields), label="field")
    value = data.draw(values, label="value")
    response = await check(client, bot, make(fuzzed, value))
    if response.status_code == 400:
        leaf = NAMED_AS.get(fuzzed) or next(
            p for p in reversed(fuzzed.split(".")) if p.replace("_", "").isalpha()
        )
        assert any(leaf in f for f in named_fields(response)), (fuzzed, response.text)


READS = [
    "/v1/elicitations/{}",
    "/v1/elicitations?cursor={}",
    "/api/elicitation/{}",
    "/api/elicitation/{}/resolve",
    "/v1/handup/requests/{}",
]


@FUZZ
@given(route=st.sampled_from(READS), value=values)
async def test_no_id_makes_a_read_route_answer_5xx(
    client: httpx.AsyncClient, route: str, value: str
) -> None:
    """A read (or a resolve) by an id that could never have been stored is a 400 naming it or
    a 404, asked of no store: PostgreSQL never sees a NUL."""
    path = route.format(quote(value, safe=""))
    if path.endswith("/resolve"):
        response = await client.post(path, json={"approved": True})
    else:
        response = await client.get(path)
    # 307: an empty id leaves a trailing slash, redirected away; 405: the resolve route of an
    # id that ends in a slash-free path.
    assert response.status_code in (200, 307, 400, 404, 405), (path, response.text)
    if response.status_code == 400:
        assert set(named_fields(response)) <= {"id", "cursor", "executionId"}


# --- the issue's own findings, on both stores --------------------------------------------------

FINDINGS = [
    (structured, "elicitationId", "eli\x00nul", "data.elicitationId"),
    (structured, "boardId", "brd\x00nul", "data.boardId"),
    (structured, "id", "ce\x00nul", "id"),
    (structured, "source", "https://sp.example/\x00", "source"),
    (binary, "subject", "evt.acme\x00.superpipeline.elicitation.pending", "subject"),
    (structured, "boardId", "b" * 201, "data.boardId"),
    (structured, "id", "c" * 301, "id"),
    (binary, "source", "s" * 298, "source"),
    (structured, "elicitationId", "e" * 361, "data.elicitationId"),
    (structured, "workspace", "w" * 201, "subject"),
    (structured, "elicitationId", "eli_nl\n", "data.elicitationId"),
    (batch, "elicitationId", "\r\n", "[1].data.elicitationId"),
    (engine, "id", "dlv\x00", "id"),
    (toolshed, "executionId", "exe\n", "executionId"),
    (handup, "title", "t\x00", "title"),
]


async def test_the_issues_findings_are_400s_naming_the_field(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    for target, fuzzed, value, field in FINDINGS:
        response = await check(client, bot, target(fuzzed, value))
        assert response.status_code == 400, (target.__name__, fuzzed, value)
        assert field in named_fields(response), (target.__name__, fuzzed, response.text)


async def test_values_at_the_bounds_are_accepted_and_read_back(
    client: httpx.AsyncClient, bot: Elicitbot
) -> None:
    """The other side of the line: the longest values the bounds allow fit both stores."""
    at_bounds = [
        structured("elicitationId", "e" * 200),
        structured("boardId", "b" * 200),
        binary("source", "s" * 255),
        structured("workspace", "w" * 200),
        structured("elicitationId", "eli with/slash and spaces"),
        toolshed("executionId", "x" * 200),
        engine("id", "d" * 200),
        handup("id", "r" * 200),
    ]
    for sent in at_bounds:
        response = await check(client, bot, sent)
        assert response.status_code in (200, 201, 202), (sent, response.text)
    # An id with a slash reads back with the slash as it is, not only percent-encoded.
    slashed = json.loads(at_bounds[4].body)["data"]["elicitationId"]
    read = await client.get(f"/v1/elicitations/superpipeline:{slashed}")
    assert read.status_code == 200, read.text
    assert read.json()["sourceId"] == slashed


# --- Slack: the signature headers are checked before Bolt --------------------------------------

TIMESTAMPS = [
    "",
    "abc",
    "nan",
    "1.5e9",
    "-1",
    " 1",
    "\uff11\uff12\uff13",
    "0x10",
    "9" * 30,
    "1700000000",
]
SIGNATURES = ["", "v0=", "v0=" + "0" * 64, "v0=" + "é" * 64, "v1=" + "0" * 64, "V0=" + "A" * 64]


def header_values(examples: list[str]) -> st.SearchStrategy[str | None]:
    text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=70)
    return st.one_of(st.none(), st.sampled_from(examples), text)


@pytest.fixture
async def slack(sqlite_store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """``POST /slack/events`` in front of a Bolt app with a signing secret; the store is an
    empty one: nothing reaches it before the signature is verified."""
    app = AsyncApp(signing_secret=SLACK_SECRET, token="xoxb-fuzz-0000")
    runtime = Runtime(store=sqlite_store, routers=[slack_router(app)])
    transport = httpx.ASGITransport(app=create_app(runtime))
    async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot.test") as c:
        yield c


@FUZZ
@given(
    timestamp=header_values(TIMESTAMPS),
    signature=header_values(SIGNATURES),
    body=st.binary(max_size=40),
)
async def test_a_malformed_slack_signature_header_is_a_401_before_bolt(
    slack: httpx.AsyncClient, timestamp: str | None, signature: str | None, body: bytes
) -> None:
    headers: dict[bytes, bytes] = {b"Content-Type": b"application/x-www-form-urlencoded"}
    seen: dict[str, str | None] = {}
    for name, value in (("X-Slack-Request-Timestamp", timestamp), ("X-Slack-Signature", signature)):
        raw = None if value is None else value.encode("utf-8")  # as a client sends it
        if raw is not None:
            headers[name.encode()] = raw
        seen[name] = None if raw is None else raw.decode("latin-1")  # as the server reads it
    response = await slack.post("/slack/events", headers=headers, content=body)

    assert response.status_code == 401, response.text
    stamp, mac = seen["X-Slack-Request-Timestamp"], seen["X-Slack-Signature"]
    slacks_shape = (
        stamp is not None
        and re.fullmatch("[0-9]{1,12}", stamp) is not None
        and mac is not None
        and re.fullmatch("v0=[0-9a-f]{64}", mac) is not None
    )
    if not slacks_shape:  # refused before Bolt, naming the header; else Bolt's own 401
        assert named_fields(response)[0] in seen


async def test_a_signed_slack_request_still_reaches_bolt(slack: httpx.AsyncClient) -> None:
    """The check refuses only shapes Slack never sends: a correctly signed request passes it
    (Bolt then answers the URL verification challenge)."""
    body = json.dumps({"type": "url_verification", "challenge": "c-1"}).encode()
    timestamp = str(int(time.time()))
    digest = hmac.new(
        SLACK_SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256
    ).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest}",
    }
    response = await slack.post("/slack/events", headers=headers, content=body)

    assert response.status_code == 200, response.text
    assert response.json() == {"challenge": "c-1"} or response.text == "c-1"

"""What nobody expected still gets a problem+json answer, and a read by an impossible id asks no
store (issue 15): the shell's last-resort handler, the read routes' id check, ``elicitbot show``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from structlog.testing import capture_logs

from bot.app import cli
from bot.app.http import CORRELATION_HEADER, Runtime, create_app
from bot.domain.bounds import KEY_MAX
from bot.domain.model import ElicitationKey
from store.sql import SqlStore

PROBLEM = "application/problem+json"
SECRETISH = "token-in-the-exception-8c1d"


class _ReadNothingStore(SqlStore):
    """A store that fails the test if a read by id reaches it."""

    async def resolve_key(self, ident: str) -> ElicitationKey | None:
        raise AssertionError(f"the store was asked for {ident!r}")


def _broken_routes() -> APIRouter:
    router = APIRouter()

    @router.get("/boom")
    async def boom() -> None:
        raise RuntimeError(f"the database said no ({SECRETISH})")

    @router.get("/boom-midway")
    async def boom_midway() -> StreamingResponse:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"first part"
            raise RuntimeError("after the start")

        return StreamingResponse(chunks())

    return router


@pytest.fixture
async def client(sqlite_url: str) -> AsyncIterator[httpx.AsyncClient]:
    store = _ReadNothingStore.from_url(sqlite_url)
    runtime = Runtime(store=store, routers=[_broken_routes()])
    transport = httpx.ASGITransport(app=create_app(runtime))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://elicitbot.test") as c:
            yield c
    finally:
        await store.close()


async def test_an_unexpected_error_is_a_500_problem_with_a_logged_correlation_id(
    client: httpx.AsyncClient,
) -> None:
    with capture_logs() as events:
        response = await client.get("/boom")

    assert response.status_code == 500
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    correlation = body["correlationId"]
    assert response.headers[CORRELATION_HEADER] == correlation
    assert correlation in body["detail"]
    assert SECRETISH not in response.text
    assert "Traceback" not in response.text
    assert "RuntimeError" not in response.text
    [logged] = [e for e in events if e["event"] == "http.unhandled"]
    assert logged["correlation_id"] == correlation
    assert logged["path"] == "/boom"
    assert logged["log_level"] == "error"
    assert logged["exc_info"] is True  # the traceback goes to the log, where redaction runs


async def test_a_method_the_route_has_not_is_a_405_problem_naming_the_allowed_ones(
    client: httpx.AsyncClient,
) -> None:
    """RFC 9110: a 405 carries ``Allow``; the problem+json handler keeps Starlette's headers."""
    response = await client.request("TRACE", "/healthz")

    assert response.status_code == 405
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "GET" in {m.strip() for m in response.headers["allow"].split(",")}


async def test_an_error_after_the_response_started_is_not_answered_twice(
    client: httpx.AsyncClient,
) -> None:
    """Once the status line is out, a second response would corrupt the stream: re-raised."""
    with capture_logs() as events, pytest.raises(RuntimeError, match="after the start"):
        await client.get("/boom-midway")

    [logged] = [e for e in events if e["event"] == "http.unhandled"]
    assert logged["response_started"] is True


@pytest.mark.parametrize(
    "ident",
    [
        pytest.param("eli%00nul", id="NUL"),
        pytest.param("eli_nl%0A", id="trailing newline"),
        pytest.param("%0D%0A", id="CRLF only"),
        pytest.param("%20eli", id="leading space"),
        pytest.param("e" * (KEY_MAX + 1), id="over-long"),
        pytest.param("eli%E2%80%A8", id="line separator"),
    ],
)
async def test_a_read_by_an_impossible_id_is_a_400_naming_it(
    client: httpx.AsyncClient, ident: str
) -> None:
    response = await client.get(f"/v1/elicitations/{ident}")

    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    assert [e["field"] for e in response.json()["errors"]] == ["id"]


async def test_a_list_cursor_that_no_key_could_be_is_a_400_naming_it(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/elicitations", params={"cursor": "k\x00"})

    assert response.status_code == 400, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["cursor"]


# --- elicitbot show ------------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cfg.toml"
    path.write_text(f'[store]\nurl = "sqlite:///{tmp_path / "never.db"}"\n', encoding="utf-8")
    yield path
    assert not (tmp_path / "never.db").exists(), "show opened the store for an impossible id"


@pytest.mark.parametrize(
    "ident",
    [pytest.param("eli\x00", id="NUL"), pytest.param("eli\n", id="newline"), "e" * (KEY_MAX + 1)],
)
def test_show_of_an_impossible_id_names_it_and_asks_no_store(
    config: Path, ident: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["show", ident, "-c", str(config)])

    out, err = capsys.readouterr()
    assert status == cli.EXIT_USAGE
    assert "show: id: must" in err
    assert "Traceback" not in err
    assert out == ""

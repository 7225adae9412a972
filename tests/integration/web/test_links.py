"""Issue 26: a link in an agent's Markdown shows where it goes on every web page that renders it.

The inbox card, the question's own page (``/?key=``) and the admin detail page, while the
question is pending and after it is answered: ``[click](https://evil.example)`` reads
``click (https://evil.example)`` as on Slack and Matrix; a link whose text is its address is
shown once.
"""

from __future__ import annotations

import re

import httpx
import pytest

from bot.domain.model import ApprovalSubject, Kind, Option, PreviewItem
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.fakes import FakeSink
from tests.integration.web import Rig, intake_elicitation, make_rig
from tests.integration.web.test_inbox import answer_in_slack, card, elicitation

QUESTION = (
    "Please [click](https://evil.example) to review, see <https://same.example/x> "
    "or [https://good.example](https://bad.example/steal)."
)
NOTES = "Background: [the doc](https://docs.example/d?a=1&b=2)."


@pytest.fixture
def rig(sqlite_store: SqlStore, clock: FakeClock) -> Rig:
    return make_rig(sqlite_store, clock, FakeSink())


def client_for(rig: Rig) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=rig.app, client=("127.0.0.1", 50123)),
        base_url="http://127.0.0.1:8787",
    )


def visible_text(html: str) -> str:
    """What a reader sees: the markup gone, entities kept as typed (``&amp;``)."""
    return re.sub(r"<[^>]+>", "", html)


def assert_links_show_where_they_go(html: str, where: str) -> None:
    seen = visible_text(html)
    assert "click (https://evil.example)" in seen, where
    assert '<a href="https://evil.example"' in html, where
    assert seen.count("https://same.example/x") == 1, where  # its text is its address: once
    assert "https://good.example (https://bad.example/steal)" in seen, where
    assert "the doc (https://docs.example/d?a=1&amp;b=2)" in seen, where


async def test_every_page_that_renders_agent_markdown_shows_each_links_address(rig: Rig) -> None:
    e = elicitation(
        rig.clock,
        "eli_links",
        question=QUESTION,
        kind=Kind.APPROVAL,
        options=(
            Option(id="ok", label="Approve", meaning="approve"),
            Option(id="no", label="No", meaning="reject"),
        ),
        subject=ApprovalSubject(
            id="sub_1",
            digest="sha256:" + "ab" * 32,
            schema_="s/v1",
            revision=1,
            preview=(PreviewItem(type="markdown", label="Notes", text=NOTES),),
        ),
    )
    key = await intake_elicitation(rig, e)

    async with client_for(rig) as client:
        pending = {
            "inbox card": card((await client.get("/")).text, key),
            "question page": card((await client.get("/", params={"key": key})).text, key),
            "admin detail": card(
                (await client.get("/admin/elicitation", params={"key": key})).text, key
            ),
        }
        await answer_in_slack(rig, key, "no")
        answered = {
            "question page": card((await client.get("/", params={"key": key})).text, key),
            "admin detail": card(
                (await client.get("/admin/elicitation", params={"key": key})).text, key
            ),
        }
        history = card((await client.get("/")).text, key)

    print("rendered inbox card (pending):\n" + pending["inbox card"])
    for where, html in pending.items():
        assert_links_show_where_they_go(html, f"pending {where}")
    for where, html in answered.items():
        assert 'data-status="answered"' in html, where
        assert_links_show_where_they_go(html, f"answered {where}")
    # The history row shows the question's Markdown as typed (truncated): the address is there.
    assert "[click](https://evil.example)" in history

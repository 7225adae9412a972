"""GET / lists what is waiting, with agent text escaped."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.domain.model import AnswerMode, Elicitation, Option, Route, Status
from bot.http import render_home
from store.sql import StoredElicitation


def _stored(question: str) -> StoredElicitation:
    now = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
    e = Elicitation(
        source="superpipeline",
        source_id="eli_1",
        asker="agt_1",
        title="Research this",
        question=question,
        answer_mode=AnswerMode.SINGLE_CHOICE,
        options=(Option(id="a", label="Allow <once>"),),
        created_at=now,
    )
    return StoredElicitation(e, Status.PENDING, None, 1, Route(), now, now)


def test_home_page_escapes_agent_text() -> None:
    page = render_home([_stored('<script>alert("x")</script> May I?')])
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "Allow &lt;once&gt;" in page
    assert "1 waiting for an answer" in page


def test_home_page_says_when_nothing_waits() -> None:
    assert "Nothing is waiting" in render_home([])

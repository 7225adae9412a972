"""The engine's answers (spec 001, issue 13): a written answer is bounded to 32 KiB of UTF-8
bytes (the person is told so in bytes), and the ask reads back with ``expires_at`` as the spec
writes it and a typed ``decision``."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.sources.engine import NO_DEADLINE_TEXT, ask_document, parse_delivery
from bot.app.config import parse_config
from bot.domain import rules
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import ConfigError
from bot.domain.model import (
    Answer,
    Attempt,
    Elicitation,
    Identity,
    People,
    Refusal,
    RefusalCode,
    Status,
)
from bot.domain.ports import PromptView

NOW = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
FIXTURES = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "sources" / "engine.json").read_text("utf-8")
)
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
TASK = "a task taking a written answer, explicit expiry"
KIB_32 = 32 * 1024


def ask(name: str, **changes: Any) -> Elicitation:
    body: dict[str, Any] = copy.deepcopy(FIXTURES["valid"][name])
    body["ask"].update(changes)
    return parse_delivery(body, now=NOW).elicitation


def written(e: Elicitation, text: str) -> Answer | Refusal:
    return rules.judge(
        e, Attempt(shown=SHOWN_WHOLE, respondent=ALICE, text=text, via="web"), People(), NOW
    )


def view(e: Elicitation, answer: Answer | None = None, status: Status | None = None) -> PromptView:
    status = status or (Status.ANSWERED if answer is not None else Status.PENDING)
    return PromptView(elicitation=e, status=status, answer=answer, version=1, link="/", now=NOW)


# --- 32 KiB of UTF-8 bytes ----------------------------------------------------------------------


def test_a_written_answer_of_exactly_32_kib_of_utf8_is_accepted() -> None:
    text = "€" * 10_922 + "é"  # 32,766 + 2 bytes in 10,923 characters
    assert len(text.encode()) == KIB_32

    result = written(ask(TASK), text)

    assert isinstance(result, Answer), result
    assert result.text == text


def test_a_written_answer_one_byte_over_32_kib_is_refused_in_bytes() -> None:
    text = "€" * 10_923  # 32,769 bytes in 10,923 characters: far under 32,768 characters
    assert len(text.encode()) == KIB_32 + 1

    result = written(ask(TASK), text)

    assert isinstance(result, Refusal)
    assert result.code is RefusalCode.TOO_LONG
    assert result.message == (
        "Your answer is 32,769 bytes of UTF-8; the limit is 32,768 bytes (32 KiB)."
    )


def test_forty_thousand_bytes_are_refused_though_under_the_character_bound() -> None:
    text = "日本" * 6_667  # 40,002 bytes in 13,334 characters
    result = written(ask(TASK), text)
    assert isinstance(result, Refusal)
    assert "40,002 bytes" in result.message


def test_an_ascii_answer_over_the_limit_is_told_in_bytes_too() -> None:
    result = written(ask(TASK), "x" * (KIB_32 + 1))
    assert isinstance(result, Refusal)
    assert "bytes of UTF-8" in result.message
    assert "characters" not in result.message


def test_an_empty_written_answer_is_still_refused_as_empty() -> None:
    result = written(ask(TASK), "   ")
    assert isinstance(result, Refusal)
    assert result.code is RefusalCode.EMPTY


def test_the_byte_bound_is_the_engines_only() -> None:
    e = ask(TASK).model_copy(update={"source": "toolshed"})
    text = "€" * 10_923  # 32,769 bytes, 10,923 characters: within the code-point bound
    assert isinstance(written(e, text), Answer)


# --- the read-back ------------------------------------------------------------------------------


def test_no_deadline_reads_back_as_the_spec_writes_it() -> None:
    for name in ("a question with choices", "the no-deadline value given explicitly"):
        e = ask(name)
        assert e.deadlines.expires_at is None
        assert ask_document(view(e))["expires_at"] == NO_DEADLINE_TEXT == "9999-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (TASK, "2026-12-01T16:00:00Z"),  # given as 17:00+01:00
        ("a bound action approval", "2026-11-17T09:30:00Z"),  # the seven-day default
    ],
)
def test_a_deadline_reads_back_as_the_deadline(name: str, expected: str) -> None:
    assert ask_document(view(ask(name)))["expires_at"] == expected


def test_the_no_deadline_text_is_written_even_without_the_kept_one() -> None:
    e = ask("a question with choices")
    bare = e.model_copy(update={"extra": {k: v for k, v in e.extra.items() if k != "expires_at"}})
    assert ask_document(view(bare))["expires_at"] == NO_DEADLINE_TEXT


def test_a_pending_ask_reads_back_its_fields_and_no_decision() -> None:
    document = ask_document(view(ask("a question with choices")))
    assert document == {
        "id": "dlv_question_01",
        "elicitation": "engine:dlv_question_01",
        "status": "pending",
        "kind": "question",
        "title": "Which region?",
        "body": "Deploy the **api** service to which region?",
        "choices": ["eu-west-1", "us-east-1"],
        "conversation_id": "cnv_7a1b",
        "shared_key": "deploy-region",
        "blocking": True,
        "mentions": ["slack:U0ALICE", {"id": "matrix:@bob:example.org"}, {"id": "prn_4f2a"}],
        "expires_at": NO_DEADLINE_TEXT,
        "destinations": ["slack:C0ASK", "matrix:!room:example.org", "web"],
        "followup_seconds": 300,
    }


def test_a_choice_is_the_exact_offered_string() -> None:
    e = ask("a question with choices")
    answer = rules.judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("eu-west-1",), via="slack:C0ASK"),
        People(),
        NOW,
    )
    assert isinstance(answer, Answer)
    assert ask_document(view(e, answer))["decision"] == {
        "type": "choice",
        "answer": "eu-west-1",
        "comment": None,
        "responder_id": "slack:U0ALICE",
        "responder_name": "Alice",
        "via": "slack:C0ASK",
        "decided_at": "2026-11-10T09:30:00Z",
    }


def test_an_approval_says_whether_it_was_approved_and_gives_the_action_back() -> None:
    e = ask("a bound action approval")
    answer = rules.judge(
        e,
        Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=("deny",), via="web"),
        People(principals={"slack:U0ALICE": "prn_alice"}),
        NOW,
    )
    assert isinstance(answer, Answer), answer
    document = ask_document(view(e, answer))
    assert document["action"] == FIXTURES["valid"]["a bound action approval"]["ask"]["action"]
    assert document["decision"]["type"] == "approval"
    assert document["decision"]["answer"] == "deny"
    assert document["decision"]["approved"] is False
    assert document["decision"]["responder_id"] == "prn_alice"


def test_a_written_answer_is_the_text() -> None:
    e = ask(TASK)
    answer = written(e, "CHG-4411")
    assert isinstance(answer, Answer)
    decision = ask_document(view(e, answer))["decision"]
    assert (decision["type"], decision["answer"]) == ("text", "CHG-4411")
    assert "comment" not in decision


def test_an_ask_closed_unanswered_has_no_decision() -> None:
    document = ask_document(view(ask(TASK), status=Status.EXPIRED))
    assert document["status"] == "expired"
    assert "decision" not in document


# --- the config ---------------------------------------------------------------------------------


def test_the_answer_webhook_is_optional_and_a_url() -> None:
    assert parse_config({}).sources.engine.answer_webhook is None
    url = "https://engine.example.org/hooks/ask-answered"
    config = parse_config({"sources": {"engine": {"answer_webhook": url}}})
    assert str(config.sources.engine.answer_webhook) == url
    with pytest.raises(ConfigError, match=r"sources\.engine\.answer_webhook"):
        parse_config({"sources": {"engine": {"answer_webhook": "not a url"}}})

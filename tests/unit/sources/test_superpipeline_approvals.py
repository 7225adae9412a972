"""The ``elicitation.answered`` document names every approval of a quorum (answer rule 9)."""

from __future__ import annotations

from datetime import UTC, datetime

from adapters.sources.superpipeline.sink import answered_document
from bot.domain.model import Answer, Approval, Status
from bot.domain.ports import PromptView
from tests.unit.domain.builders import sp_options

AT_1 = datetime(2026, 11, 10, 9, 40, 2, tzinfo=UTC)
AT_2 = datetime(2026, 11, 10, 9, 41, 7, tzinfo=UTC)


def view(answer: Answer) -> PromptView:
    return PromptView(
        elicitation=sp_options(),
        status=Status.ANSWERED,
        answer=answer,
        version=3,
        link="/#k",
        now=AT_2,
    )


def test_a_quorum_answer_carries_each_approval_and_the_last_approver_answered() -> None:
    approvals = (
        Approval(by="slack:U0ALICE", display_name="Alice", at=AT_1, via="slack:C0A", option="x"),
        Approval(by="web:bob", at=AT_2, via="web", option="allow_once"),
    )
    answer = Answer(
        option_ids=("allow_once",), respondent="web:bob", via="web", at=AT_2, approvals=approvals
    )
    doc = answered_document(view(answer), "key-1")
    assert doc["approvals"] == [
        {"by": "slack:U0ALICE", "at": "2026-11-10T09:40:02Z", "via": "slack:C0A", "option": "x"},
        {"by": "web:bob", "at": "2026-11-10T09:41:07Z", "via": "web", "option": "allow_once"},
    ]
    assert doc["answeredBy"]["id"] == "web:bob"


def test_one_person_deciding_has_no_approvals_list_entries() -> None:
    answer = Answer(option_ids=("deny",), respondent="slack:U0ALICE", via="slack:C0A", at=AT_1)
    assert answered_document(view(answer), "key-1")["approvals"] == []

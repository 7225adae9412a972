"""A form question's typed answer is checked against its rules when the person answers."""

from __future__ import annotations

import pytest

from bot.domain.forms import FormProblem, check_answers, typed_problem
from bot.domain.model import FormQuestion, TypedAnswer

STAMP = "2026-12-02T09:30:00Z"


@pytest.mark.parametrize(
    ("rule", "text", "why"),
    [
        (TypedAnswer(kind="integer"), "3", None),
        (TypedAnswer(kind="integer"), "1,024", None),
        (TypedAnswer(kind="integer"), "3.5", "must be a whole number"),
        (TypedAnswer(kind="integer", minimum=1, maximum=9), "12", "must be at most 9"),
        (TypedAnswer(kind="integer", minimum=1), "0", "must be at least 1"),
        (TypedAnswer(kind="number"), "2.5", None),
        (TypedAnswer(kind="number"), "nan", "must be a number"),
        (TypedAnswer(kind="number"), "about two", "must be a number"),
        (TypedAnswer(min_length=2), "v", "must be at least 2 characters"),
        (TypedAnswer(max_length=3), "v2.4", "must be at most 3 characters"),
        (TypedAnswer(pattern=r"^v\d+\.\d+$"), "v2.4", None),
        (TypedAnswer(pattern=r"^v\d+\.\d+$"), "2.4", r"must match the pattern ^v\d+\.\d+$"),
        (TypedAnswer(format="email"), "alice@example.org", None),
        (TypedAnswer(format="email"), "alice", "must be an email address"),
        (TypedAnswer(format="uri"), "https://example.org/x", None),
        (TypedAnswer(format="uri"), "example.org", "must be an address with its scheme (https://…)"),
        (TypedAnswer(format="date"), "2026-12-02", None),
        (TypedAnswer(format="date"), "02/12/2026", "must be a date (2026-12-02)"),
        (TypedAnswer(format="date-time"), STAMP, None),
        (TypedAnswer(format="date-time"), "2026-12-02", f"must be a date and time ({STAMP})"),
    ],
)  # fmt: skip
def test_a_typed_answer_is_held_to_its_rule(rule: TypedAnswer, text: str, why: str | None) -> None:
    assert typed_problem(rule, text) == why


def test_the_form_names_the_question_whose_answer_breaks_its_rule() -> None:
    form = (
        FormQuestion(id="name", question="Release name", allow_free_text=True),
        FormQuestion(
            id="port",
            question="Port",
            header="Port",
            allow_free_text=True,
            typed=TypedAnswer(kind="integer", minimum=1, maximum=65535),
        ),
    )
    wrong = {"name": {"text": "api"}, "port": {"text": "http"}}
    assert check_answers(form, wrong) == FormProblem(
        "The answer to question 2 (Port) must be a whole number."
    )
    right = {"name": {"text": "api"}, "port": {"text": "8080"}}
    assert check_answers(form, right) == {
        "name": {"selected": [], "text": "api"},
        "port": {"selected": [], "text": "8080"},
    }

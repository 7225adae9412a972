"""Said once: every result state on all three surfaces carries the one sentence of
``bot.domain.wording`` (issue 22, "Say it once").

For each state — sending, answered, decided at timeout, not accepted, not confirmed, expired (with
and without its outcome, and with it on its way), cancelled, closed upstream — the Slack message
(Block Kit), the Matrix message (plain body and HTML) and the web inbox's card say the same
words; each adds only its markup. The web never says "Answered by" once the upstream refused the
answer for good.

What each surface shows is printed (``pytest -s``) and written to
``test-output/result-states.md``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.matrix import render as matrix_render
from adapters.slack import render as slack_render
from adapters.web import cards, pages
from bot.domain.model import Answer, Elicitation, Identity, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from bot.domain.wording import ResultState, result_sentence
from tests.slack_fake import block_kit_problems
from tests.unit.domain.builders import NOW, answer, elicitation

OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
LINK = "http://127.0.0.1:8787/?key=superpipeline:eli_1a2b3c4d5e6f7081"
EXPIRES = NOW - timedelta(minutes=1)
WHEN = "2026-11-10 09:31 UTC"
EXPIRED_AT = "2026-11-10 09:30 UTC"


def alice(*options: str) -> Answer:
    return answer(option_ids=options, display_name="Alice")


def timeout(*options: str) -> Answer:
    return Answer(option_ids=options, respondent="system", via="system", at=NOW)


def upstream_closed(reason: str) -> Answer:
    return Answer(text=reason, respondent="system", via="system", at=NOW)


SENDING = Writeback(WritebackState.SENDING)
ACCEPTED = Writeback(WritebackState.ACCEPTED)
REFUSED = Writeback(WritebackState.REFUSED, error="Resolved upstream.", refused=alice("deny"))
GAVE_UP = Writeback(WritebackState.REFUSED, error="HTTP 503.", refused=alice("deny"), gave_up=True)


@dataclass(frozen=True)
class Case:
    name: str
    state: ResultState
    status: Status
    answer: Answer | None
    writeback: Writeback | None
    says: str
    """The sentence every surface carries."""
    expires: bool = False

    def view(self) -> PromptView:
        e: Elicitation = elicitation()
        if self.expires:
            e = elicitation(deadlines={"expires_at": EXPIRES, "on_timeout": "deny"})
        return PromptView(e, self.status, self.answer, 2, LINK, NOW, writeback=self.writeback)


CASES = (
    Case(
        "sending",
        ResultState.SENDING,
        Status.ANSWERED,
        alice("deny"),
        SENDING,
        "⏳ Sending Alice’s answer — Deny — to SuperPipeline…",  # noqa: RUF001
    ),
    Case(
        "sending the timeout outcome",
        ResultState.SENDING,
        Status.ANSWERED,
        timeout("deny"),
        SENDING,
        "⏳ Sending the timeout outcome — Deny — to SuperPipeline…",
    ),
    Case(
        "answered",
        ResultState.ANSWERED,
        Status.ANSWERED,
        alice("deny"),
        ACCEPTED,
        f"✅ Answered by Alice — Deny — {WHEN} via Slack",
    ),
    Case(
        "answered by a name to escape",
        ResultState.ANSWERED,
        Status.ANSWERED,
        answer(option_ids=("deny",), display_name="O'Brien & <Co>"),
        ACCEPTED,
        f"✅ Answered by O'Brien & <Co> — Deny — {WHEN} via Slack",
    ),
    Case(
        "decided at timeout",
        ResultState.DECIDED,
        Status.ANSWERED,
        timeout("deny"),
        ACCEPTED,
        f"⏱️ Decided at timeout — Deny — {WHEN}",
    ),
    Case(
        "not accepted",
        ResultState.NOT_ACCEPTED,
        Status.ANSWERED,
        alice("deny"),
        REFUSED,
        f"❌ Not accepted by SuperPipeline: Alice’s answer — Deny — {WHEN} via Slack",  # noqa: RUF001
    ),
    Case(
        "the timeout outcome not accepted",
        ResultState.NOT_ACCEPTED,
        Status.ANSWERED,
        timeout("deny"),
        REFUSED,
        f"❌ Not accepted by SuperPipeline: the timeout outcome — Deny — {WHEN}",
    ),
    Case(
        "not confirmed",
        ResultState.NOT_CONFIRMED,
        Status.ANSWERED,
        alice("deny"),
        GAVE_UP,
        f"❔ Not confirmed by SuperPipeline: Alice’s answer — Deny — {WHEN} via Slack",  # noqa: RUF001
    ),
    Case(
        "expired",
        ResultState.EXPIRED,
        Status.EXPIRED,
        None,
        None,
        f"⌛ Expired — nobody answered by {EXPIRED_AT}",
        expires=True,
    ),
    Case(
        "expired with its outcome",
        ResultState.EXPIRED,
        Status.EXPIRED,
        timeout("deny"),
        ACCEPTED,
        f"⌛ Expired — nobody answered by {EXPIRED_AT} — outcome: Deny",
        expires=True,
    ),
    Case(
        "expired, its outcome on its way",
        ResultState.EXPIRED,
        Status.EXPIRED,
        timeout("deny"),
        SENDING,
        f"⌛ Expired — nobody answered by {EXPIRED_AT} — outcome: Deny — "
        "sending it to SuperPipeline…",
        expires=True,
    ),
    Case(
        "cancelled",
        ResultState.CANCELLED,
        Status.CANCELLED,
        None,
        None,
        "🚫 Cancelled — this request was withdrawn; it can no longer be answered.",
    ),
    Case(
        "closed upstream",
        ResultState.CLOSED_UPSTREAM,
        Status.CANCELLED,
        upstream_closed("[system:card_archived] The card was archived."),
        None,
        "🚫 Closed by the system — [system:card_archived] The card was archived. — "
        "it can no longer be answered.",
    ),
)


# --------------------------------------------------------------------------- the surfaces


def _mrkdwn(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
            yield node["text"]
        for value in node.values():
            yield from _mrkdwn(value)
    elif isinstance(node, list):
        for value in node:
            yield from _mrkdwn(value)


def slack(view: PromptView) -> tuple[dict[str, Any], list[str]]:
    """The message, and the words of each of its texts (mrkdwn's three entities unescaped)."""
    text, blocks = slack_render.render(view)
    assert block_kit_problems(blocks, text) == []
    message = {"text": text, "blocks": blocks}
    return message, [html.unescape(t) for t in _mrkdwn(blocks)]


def matrix(view: PromptView) -> tuple[dict[str, Any], list[str], list[str]]:
    """The content, the lines of its plain body and the text of each bold paragraph of its HTML."""
    content = matrix_render.message_content(view)
    body = str(content["body"]).split("\n")
    bold = re.findall(r"<p><b>(.*?)</b></p>", str(content["formatted_body"]), re.S)
    return content, body, [html.unescape(b) for b in bold]


def web(view: PromptView) -> tuple[str, list[str]]:
    """The card's HTML, and the words of its result paragraphs."""
    card = cards.card_view(view)
    viewer = pages.Viewer(Identity(platform="web", user="local"), admin=True, csrf="x")
    page = pages.InboxPage(viewer, pages.Filters(), [], [card], "v1", key=card.key)
    markup = pages.render_live(page)
    said = re.findall(r'<p class="result [^"]*">(.*?)</p>', markup, re.S)
    return markup, [html.unescape(s) for s in said]


def _show(case: Case, message: dict[str, Any], content: dict[str, Any], card: str) -> str:
    article = re.search(r"<article.*?</article>", card, re.S)
    return (
        f"## {case.name} ({case.state.value})\n\n{case.says}\n\n"
        f"Slack Block Kit:\n\n```json\n{json.dumps(message, indent=2, ensure_ascii=False)}\n```\n\n"
        f"Matrix HTML:\n\n```html\n{content['formatted_body']}\n```\n\n"
        f"Web card:\n\n```html\n{article.group(0) if article else card}\n```\n"
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_surface_says_the_one_sentence_of_each_result_state(case: Case) -> None:
    view = case.view()
    result = view.result
    assert result is not None
    assert result.state is case.state
    assert result_sentence(result) == case.says

    message, slack_says = slack(view)
    content, body, matrix_bold = matrix(view)
    card, web_says = web(view)
    print(_show(case, message, content, card))  # what a person sees on each surface

    assert case.says in slack_says, slack_says
    assert case.says in body, body
    assert case.says in matrix_bold, matrix_bold
    assert web_says == [case.says]


def test_after_a_refusal_for_good_the_web_no_longer_says_answered_by() -> None:
    for case in CASES:
        if case.state in (ResultState.NOT_ACCEPTED, ResultState.NOT_CONFIRMED):
            card, said = web(case.view())
            assert "Answered by" not in card, case.name
            assert said == [case.says]
            assert cards.card_view(case.view()).refused is not None, "and the reason beneath"


def test_the_states_are_written_out_for_people_to_read() -> None:
    OUTPUT.mkdir(exist_ok=True)
    parts = ["# The result line of each state, on every surface\n"]
    for case in CASES:
        view = case.view()
        message, _ = slack(view)
        content, _, _ = matrix(view)
        card, _ = web(view)
        parts.append(_show(case, message, content, card))
    out = OUTPUT / "result-states.md"
    out.write_text("\n".join(parts), "utf-8")
    assert {c.state for c in CASES} == set(ResultState) - {ResultState.CLOSED}
    assert out.read_text("utf-8").count("## ") == len(CASES)

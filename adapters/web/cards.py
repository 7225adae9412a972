"""One elicitation as the inbox shows it: a card's view model, built from a
:class:`~bot.domain.ports.PromptView`. Links are made only from ``http(s)`` URLs."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup

from adapters.shared.markdown import to_html
from bot.domain.deadlines import (
    ESCALATE,
    EXPIRE,
    FOLLOWUP,
    REMIND,
    ScheduleStep,
    active_claim,
    claim_line,
    destination_name,
)
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    FormQuestion,
    Meaning,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import MAX_FREE_TEXT, offered_options
from bot.domain.views import writeback_note
from bot.domain.wording import ResultState, result_sentence, short_sentence, title_of

LONG_TEXT = 1500
"""Code points past which a text sits in a scrolling box."""
_BLOCK_TYPES = frozenset({"code", "command", "json"})


@dataclass(frozen=True)
class Notice:
    """A message shown in a card or at the top: ``done``, ``refused`` or ``error``."""

    kind: str
    message: str


@dataclass(frozen=True)
class OptionView:
    id: str
    label: str
    tone: str
    """approve, reject or neutral (the button's colour)."""
    admin_only: bool
    offered: bool
    recommended: bool
    description: str | None


@dataclass(frozen=True)
class TextBox:
    label: str
    max_length: int
    required: bool
    secret: bool
    draft: str = ""
    comment: bool = False
    """A comment that goes with an option button (no Send button of its own)."""


@dataclass(frozen=True)
class PreviewView:
    kind: str
    type: str
    label: str | None
    text: str
    url: str | None
    """Only a plain http(s) URL: anything else is shown as text, never linked."""
    language: str | None = None
    lines: tuple[tuple[str, str], ...] = ()
    html: Markup | None = None
    """A ``markdown`` item as sanitised HTML."""


@dataclass(frozen=True)
class ResultView:
    status: str
    who: str
    what: str
    when: datetime | None
    via: str
    line: str
    """The result line every copy shows (:func:`bot.domain.wording.result_sentence`)."""
    sending: str = ""
    """Where it stands upstream until accepted (:func:`bot.domain.wording.short_sentence`)."""
    state: str = ""
    """The :class:`~bot.domain.wording.ResultState` (the card's class)."""


@dataclass(frozen=True)
class ScheduleItem:
    """One step still to come: ``Escalates to #oncall <time>``, ``Expires <time> → deny``."""

    name: str
    when: datetime
    note: str = ""


@dataclass(frozen=True)
class CardView:
    key: str
    status: str
    version: int
    title: str
    kind: str
    question: str
    question_html: Markup
    """The question's Markdown as sanitised HTML (:mod:`adapters.shared.markdown`)."""
    long_question: bool
    context: tuple[tuple[str, str], ...]
    subject: ApprovalSubject | None
    previews: tuple[PreviewView, ...]
    options: tuple[OptionView, ...]
    multi: bool
    text_box: TextBox | None
    acknowledge: bool
    withheld: str | None
    form: tuple[FormQuestion, ...]
    """Several questions (handup ``input.questions``), each its own input: radio buttons or
    checkboxes ``q.<id>`` and a text box ``q.<id>.text``; one question is its options instead."""
    refused: str | None
    """The upstream refused the last answer (:func:`bot.domain.views.writeback_note`)."""
    schedule: tuple[ScheduleItem, ...]
    """What happens if nobody answers, from the pending deadlines (as every surface shows it)."""
    result: ResultView | None
    revision: int | None
    created_at: datetime
    source: str
    workspace: str | None
    notice: Notice | None = None
    claimed: str | None = None
    """Who said "I'm on it", while it holds."""
    waiting: str | None = None
    """A route's quorum being counted: who approved and how many more are needed."""

    @property
    def pending(self) -> bool:
        return self.status == Status.PENDING.value


def safe_url(url: str | None) -> str | None:
    if url and url.startswith(("https://", "http://")) and not any(c.isspace() for c in url):
        return url
    return None


def _tone(meaning: Meaning) -> str:
    return {Meaning.APPROVE: "approve", Meaning.REJECT: "reject"}.get(meaning, "neutral")


def preview_view(item: PreviewItem) -> PreviewView:
    body = item.text if item.text is not None else (item.value or "")
    url = safe_url(item.url)
    if item.type == "link":
        return PreviewView("link", item.type, item.label, body or (item.url or ""), url)
    if item.type == "field":
        return PreviewView("field", item.type, item.label, body, url)
    if item.type == "diff":
        lines = tuple((_diff_kind(line), line) for line in body.splitlines())
        return PreviewView("diff", item.type, item.label, body, url, lines=lines)
    if item.type in _BLOCK_TYPES:
        if item.type == "json":
            with contextlib.suppress(ValueError):
                body = json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        return PreviewView("block", item.type, item.label, body, url, language=item.language)
    if body == "" and item.url and url is None:
        body = item.url
    html = Markup(to_html(body)) if item.type == "markdown" and body.strip() else None  # noqa: S704 - sanitised by nh3
    return PreviewView("text", item.type, item.label, body, url, html=html)


def _diff_kind(line: str) -> str:
    if line.startswith(("+++", "---", "@@")):
        return "hunk"
    if line.startswith("+"):
        return "add"
    return "del" if line.startswith("-") else "ctx"


def _context(e: Elicitation) -> tuple[tuple[str, str], ...]:
    c = e.context
    parts = [
        ("Workspace", e.workspace),
        ("Board", c.board_name or c.board_id),
        ("Card", c.card_title or c.card_id),
        ("Stage", c.stage_key),
        ("Run", c.run_id),
        ("Task", c.task_id),
        ("Conversation", c.conversation_id),
        ("Asked by", e.asker),
        ("Source", e.source),
    ]
    return tuple((name, " ".join(value.split())) for name, value in parts if value)


def _text_box(e: Elicitation, draft: str) -> TextBox | None:
    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    if len(e.form) > 1:  # each question has its own input; a text is a comment
        return TextBox(
            "Comment (optional)", limit, required=False, secret=False, draft=draft, comment=True
        )
    mode = e.answer_mode
    if mode is AnswerMode.SECRET:
        return TextBox("Secret answer", limit, required=True, secret=True)
    if mode is AnswerMode.FREE_TEXT:
        return TextBox("Your answer", limit, required=True, secret=False, draft=draft)
    if mode is AnswerMode.CHOICE_OR_TEXT:
        label = "Or write an answer" if e.options else "Your answer"
        return TextBox(label, limit, required=False, secret=False, draft=draft)
    needing = [o.label for o in e.options if o.requires_text]
    if needing:
        label = f"Comment (needed for {', '.join(needing)})"
        return TextBox(label, limit, required=False, secret=False, draft=draft, comment=True)
    return None


def result_view(view: PromptView) -> ResultView | None:
    """The result as the card says it (the same sentence as every copy:
    :mod:`bot.domain.wording`), and the parts a history row lists."""
    result = view.result
    if result is None:
        return None
    line = result_sentence(result)
    state, status = result.state, view.status.value
    if state in (ResultState.CANCELLED, ResultState.CLOSED_UPSTREAM):
        what = result.reason or "withdrawn"
        at = None if view.answer is None else view.answer.at
        return ResultView(status, "", what, at, "", line, state=state)
    if state is ResultState.EXPIRED and not result.what:
        return ResultView(status, "nobody", "expired", result.at, "", line, state=state)
    if state is ResultState.CLOSED:
        return ResultView(status, "", "closed", None, "", line, state=state)
    answer = view.answer
    at = answer.at if answer is not None else result.at
    return ResultView(
        status, result.who, result.what, at, result.via, line, short_sentence(result), state
    )


def schedule_item(step: ScheduleStep) -> ScheduleItem:
    targets = ", ".join(destination_name(t) for t in step.targets)
    held = f"(held while {step.held_by} is on it)" if step.held_by else ""
    if step.kind == FOLLOWUP:
        return ScheduleItem(f"Next {targets}", step.at, held)
    if step.kind == ESCALATE:
        return ScheduleItem(f"Escalates to {targets}", step.at, held)
    if step.kind == EXPIRE:
        return ScheduleItem("Expires", step.at, f"→ {step.outcome}" if step.outcome else "")
    name = "Reminder" if step.kind == REMIND else step.kind.capitalize()
    return ScheduleItem(name, step.at)


def card_view(
    view: PromptView,
    *,
    draft: str = "",
    notice: Notice | None = None,
) -> CardView:
    """One elicitation as the page shows it: what Slack shows, plus the full text."""
    e = view.elicitation
    now = view.now
    pending = view.status is Status.PENDING
    mode = e.answer_mode
    choosing = mode not in (AnswerMode.FREE_TEXT, AnswerMode.SECRET)
    # The whole content is on the page; approving counts here unless the route's approve_on
    # names other surfaces only (then the card says where it counts instead).
    offered = offered_options(e, now, shown=SHOWN_WHOLE, surface="web", approve_on=view.approve_on)
    options = tuple(
        OptionView(
            id=o.option.id,
            label=" ".join(o.option.label.split()) or o.option.id,
            tone=_tone(o.option.meaning),
            admin_only=o.admin_only,
            offered=o.offered,
            recommended=o.option.recommended,
            description=o.option.description,
        )
        for o in offered
        if choosing
    )
    withheld = next((o.withheld_reason for o in offered if o.withheld_reason), None)
    s = e.subject
    claim = active_claim(view.claim, now)
    return CardView(
        claimed=claim_line(claim, now) if claim is not None else None,
        waiting=view.waiting,
        key=e.key,
        status=view.status.value,
        version=view.version,
        title=title_of(e),
        kind=e.kind.value,
        question=e.question.strip(),
        question_html=Markup(to_html(e.question.strip())),  # noqa: S704 - sanitised by nh3
        long_question=len(e.question) > LONG_TEXT,
        context=_context(e),
        subject=s,
        previews=tuple(preview_view(p) for p in s.preview) if s is not None else (),
        options=options,
        multi=mode is AnswerMode.MULTI_CHOICE,
        text_box=_text_box(e, draft) if pending else None,
        acknowledge=pending and mode is AnswerMode.ACKNOWLEDGE and not e.options,
        withheld=withheld if pending else None,
        form=e.form if pending and len(e.form) > 1 else (),
        refused=writeback_note(view),
        schedule=tuple(schedule_item(step) for step in view.schedule),
        result=result_view(view),
        revision=s.revision if s is not None else None,
        created_at=e.created_at,
        source=e.source,
        workspace=e.workspace,
        notice=notice,
    )

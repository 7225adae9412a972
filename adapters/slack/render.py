"""A :class:`~bot.domain.ports.PromptView` as a Slack message: fallback text and Block Kit blocks.

Pure: no I/O. Text is escaped and cut by :mod:`adapters.slack.blocks`, inside Block Kit's limits.
The total text of a message stays under :data:`MAX_TOTAL_TEXT`, below Slack's undocumented
cumulative limit (``msg_blocks_too_long`` at about 12,000 characters).

Button values are JSON ``{"e": <elicitation key>, "o": <option id>, "r": <subject revision>}``
(``"i"``: the option's index instead of ``"o"``, and no ``"e"``, only when the ids are too long for
2,000 characters). Action ids: ``elicitbot.option.<n>``, ``elicitbot.select`` (a static select of
``{"o", "r"}`` values, used beyond :data:`MAX_BUTTONS` options), ``elicitbot.choose_many``
with ``elicitbot.submit`` (multiple choice), ``elicitbot.reply`` (free text, secret),
``elicitbot.ack`` and ``elicitbot.claim`` ("I'm on it").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from adapters.slack.blocks import (
    MAX_BLOCKS,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_HEADER_TEXT,
    MAX_ID,
    MAX_SECTION_TEXT,
    MAX_SELECT_OPTIONS,
    Block,
    button,
    clip,
    context_block,
    cut,
    escape,
    link,
    option_text,
    plain,
    section_block,
    shorten_digest,
    static_select,
    value_json,
)
from bot.domain.deadlines import active_claim, claim_line, destination_name, when_text
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    Meaning,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import (
    approving_withheld,
    describe_answer,
    format_time,
    offered_options,
)
from bot.domain.views import title_of

# Our own budgets, well inside Block Kit's limits.
MAX_BUTTONS = 20
"""More offered options than this are a static select instead of buttons."""
BUTTONS_PER_BLOCK = 5
MAX_TOTAL_TEXT = 10_000
"""Upper bound of all text in one message (the sum of every text object)."""
FALLBACK_QUESTION = 300
CONTEXT_PART = 150
CONTEXT_TEXT = 600
PREVIEW_BUDGET = 2000
PREVIEW_ITEM = 800
PREVIEW_MIN = 80
MAX_PREVIEW_ITEMS = 8
REASON_TEXT = 500
RESULT_TEXT = 1500

EVENT_TYPE = "elicitbot_elicitation"
NOTICE_EVENT_TYPE = "elicitbot_notice"
OPTION_ACTION = "elicitbot.option"
SELECT_ACTION = "elicitbot.select"
MULTI_ACTION = "elicitbot.choose_many"
SUBMIT_ACTION = "elicitbot.submit"
REPLY_ACTION = "elicitbot.reply"
ACK_ACTION = "elicitbot.ack"
CLAIM_ACTION = "elicitbot.claim"

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_PLATFORMS = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


# --------------------------------------------------------------------------- parts


def _header(e: Elicitation) -> Block:
    return {"type": "header", "text": plain(clip(title_of(e), MAX_HEADER_TEXT))}


def _context_line(e: Elicitation) -> str:
    line = " · ".join(
        f"{name}: {clip(escape(' '.join(value.split())), CONTEXT_PART)}"
        for name, value in e.context_parts(workspace=False)
    )
    return clip(line, CONTEXT_TEXT)


def _subject_line(s: ApprovalSubject) -> str:
    parts = [
        f"Subject `{clip(escape(s.id), 80)}`",
        f"revision {s.revision}",
        f"digest `{clip(escape(shorten_digest(s.digest)), 40)}`",
    ]
    if s.expires_at is not None:
        parts.append(f"expires {format_time(s.expires_at)}")
    if not s.preview_complete:
        parts.append("preview incomplete")
    return " · ".join(parts)


def _label(item: PreviewItem, limit: int) -> str:
    return f"*{clip(escape(' '.join(item.label.split())), limit)}*" if item.label else ""


def _preview_text(item: PreviewItem, budget: int, full_text: str) -> str:
    """One preview item as mrkdwn, in at most ``budget`` code points."""
    label = _label(item, min(100, budget // 4))
    if item.type == "link" and item.url:
        url = item.url
        shown = link(url)
        if len(shown) > budget - len(label) - 2:
            shown = clip(escape(url), min(60, budget - len(label) - 2))
        return f"{label}: {shown}" if label else shown
    body = item.text if item.text is not None else (item.value or "")
    if item.url:
        body = f"{body} {item.url}".strip()
    head = f"{label}\n" if label and item.type != "field" else (f"{label}: " if label else "")
    if item.type in ("code", "diff", "command", "json"):
        room = budget - len(head) - 8
        return head + "```" + cut(escape(body), room, full_text) + "```"
    return head + cut(escape(body), budget - len(head), full_text)


def _preview_blocks(s: ApprovalSubject, full_text: str) -> list[Block]:
    blocks: list[Block] = []
    left = PREVIEW_BUDGET
    shown = 0
    for item in s.preview[:MAX_PREVIEW_ITEMS]:
        room = min(PREVIEW_ITEM, left)
        if room < PREVIEW_MIN:
            break
        text = _preview_text(item, room, full_text)
        if not text.strip():
            continue
        blocks.append(section_block(text))
        left -= len(text)
        shown += 1
    hidden = len(s.preview) - shown
    if hidden > 0:
        more = f"{hidden} more preview item{'s' if hidden > 1 else ''}"
        blocks.append(
            context_block(f"… {more} (full text: {link(full_text)})" if full_text else more)
        )
    return blocks


def option_value(key: str, option_id: str, index: int, revision: int | None) -> str:
    """A button's value (``≤ 2000``): elicitation key, option id, subject revision."""
    full = value_json({"e": key, "o": option_id, "r": revision})
    if len(full) <= MAX_BUTTON_VALUE:
        return full
    short = value_json({"o": option_id, "r": revision})
    return short if len(short) <= MAX_BUTTON_VALUE else value_json({"i": index, "r": revision})


def _style(meaning: Meaning) -> str | None:
    return {Meaning.APPROVE: "primary", Meaning.REJECT: "danger"}.get(meaning)


def _chunks(elements: Sequence[dict[str, Any]], size: int) -> Iterable[Sequence[dict[str, Any]]]:
    for start in range(0, len(elements), size):
        yield elements[start : start + size]


def _block_id(prefix: str, key: str) -> str:
    block_id = f"{prefix}:{key}"
    return block_id if len(block_id) <= MAX_ID else prefix


def _actions(view: PromptView) -> list[Block]:
    """The buttons, select or reply button while pending; withheld approvals are left out."""
    e = view.elicitation
    key = e.key
    revision = e.subject.revision if e.subject is not None else None
    mode = e.answer_mode
    offered = [
        (index, o)
        for index, o in enumerate(offered_options(e, view.now))
        if o.offered and mode not in (AnswerMode.FREE_TEXT, AnswerMode.SECRET)
    ]
    blocks: list[Block] = []
    if mode is AnswerMode.MULTI_CHOICE and offered:
        select = static_select(
            "multi_static_select", MULTI_ACTION, "Choose one or more…", offered, revision
        )
        submit = button("Submit", SUBMIT_ACTION, value_json({"e": key, "r": revision}), "primary")
        blocks.append(
            {
                "type": "actions",
                "block_id": _block_id("elicitbot.multi", key),
                "elements": [select, submit],
            }
        )
    elif len(offered) > MAX_BUTTONS:
        select = static_select(
            "static_select", SELECT_ACTION, "Choose an option…", offered, revision
        )
        blocks.append(
            {
                "type": "actions",
                "block_id": _block_id("elicitbot.select", key),
                "elements": [select],
            }
        )
    else:
        buttons = [
            button(
                option_text(o.option.label, o.admin_only, MAX_BUTTON_TEXT),
                f"{OPTION_ACTION}.{i}",
                option_value(key, o.option.id, i, revision),
                _style(o.option.meaning),
            )
            for i, o in offered
        ]
        blocks.extend(
            {"type": "actions", "block_id": f"elicitbot.options.{n}", "elements": list(chunk)}
            for n, chunk in enumerate(_chunks(buttons, BUTTONS_PER_BLOCK))
        )
    hidden = len(offered) - MAX_SELECT_OPTIONS
    if hidden > 0:
        where = f"the web inbox ({link(view.link)})" if view.link else "the web inbox"
        blocks.append(context_block(f"{hidden} more options are offered in {where}."))
    extra: list[dict[str, Any]] = []
    if mode is AnswerMode.SECRET:
        extra.append(button("Answer privately…", REPLY_ACTION, value_json({"e": key}), "primary"))
    elif mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        extra.append(button("Reply…", REPLY_ACTION, value_json({"e": key, "r": revision})))
    elif mode is AnswerMode.ACKNOWLEDGE and not e.options:
        extra.append(button("Acknowledge", ACK_ACTION, value_json({"e": key}), "primary"))
    if extra:
        last = blocks[-1] if blocks else None
        if (
            last is not None
            and str(last.get("block_id", "")).startswith("elicitbot.options.")
            and len(last["elements"]) + len(extra) <= BUTTONS_PER_BLOCK
        ):
            last["elements"].extend(extra)
        else:
            blocks.append({"type": "actions", "block_id": "elicitbot.reply", "elements": extra})
    # "I'm on it": its own block, after the answers; gone once the question is closed.
    claim = button("I'm on it", CLAIM_ACTION, value_json({"e": key}))
    blocks.append({"type": "actions", "block_id": CLAIM_ACTION, "elements": [claim]})
    return blocks


def _hint(e: Elicitation) -> str | None:
    if e.answer_mode is AnswerMode.SECRET:
        return "This answer is secret: use *Answer privately…*, never a chat message."
    if e.answer_mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        return "Or reply in this message's thread."
    return None


def _who(respondent: str, display_name: str | None) -> str:
    platform, _, user = respondent.partition(":")
    if platform == "slack" and _SLACK_USER.match(user):
        return f"<@{user}>"
    if respondent == "system":
        return "the timeout rule"
    return clip(escape(display_name or respondent), 100)


def _result(view: PromptView) -> str:
    e = view.elicitation
    answer = view.answer
    if view.status is Status.ANSWERED and answer is not None:
        what = clip(escape(describe_answer(e, answer)), RESULT_TEXT)
        via = _PLATFORMS.get(answer.via.partition(":")[0], clip(escape(answer.via), 40))
        if answer.respondent == "system":
            return f"⏱️ Decided at timeout — {what} — {format_time(answer.at)}"
        who = _who(answer.respondent, answer.display_name)
        return f"✅ Answered by {who} — {what} — {format_time(answer.at)} via {via}"
    if view.status is Status.EXPIRED:
        when = e.deadlines.expires_at
        text = "⌛ Expired — nobody answered"
        if when is not None:
            text += f" by {format_time(when)}"
        if answer is not None:
            text += f" — outcome: {clip(escape(describe_answer(e, answer)), RESULT_TEXT)}"
        return text
    if view.status is Status.CANCELLED:
        return "🚫 Cancelled — this request was withdrawn; it can no longer be answered."
    return "Closed."


# --------------------------------------------------------------------------- the message


def render(view: PromptView) -> tuple[str, list[Block]]:
    """(fallback text, blocks) for the view as it stands: buttons while pending, else the result."""
    e = view.elicitation
    full = view.link
    pending = view.status is Status.PENDING
    blocks: list[Block] = [_header(e)]
    question = e.question.strip()
    if question:
        blocks.append(section_block(cut(escape(question), MAX_SECTION_TEXT, full)))
    context = _context_line(e)
    if context:
        blocks.append(context_block(context))
    if e.subject is not None:
        blocks.append(context_block(_subject_line(e.subject)))
        blocks.extend(_preview_blocks(e.subject, full))
    if pending:
        reason = approving_withheld(e, view.now)
        if reason is not None and any(o.approving for o in e.options):
            others = " Other options work." if any(not o.approving for o in e.options) else ""
            blocks.append(context_block(f"⚠️ {clip(escape(reason), REASON_TEXT)}{others}"))
        blocks.extend(_actions(view))
        hint = _hint(e)
        if hint is not None:
            blocks.append(context_block(hint))
        timeline = _timeline(view)
        if timeline:
            blocks.append(context_block(timeline))
    else:
        blocks.append(section_block(_result(view)))
    return _fallback(view), blocks[:MAX_BLOCKS]


def slack_date(at: datetime) -> str:
    """Slack date formatting: each reader sees the time in their own time zone (UTC fallback)."""
    stamp = int(at.timestamp())
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{escape(when_text(at))}>"


def slack_schedule_line(view: PromptView) -> str:
    """``reminder <date> · escalates to #C0ONCALL <date> · expires <date> → deny``, every name
    escaped and every time in the reader's own zone."""
    parts: list[str] = []
    for step in view.schedule:
        when = slack_date(step.at)
        targets = escape(", ".join(destination_name(t) for t in step.targets))
        if step.kind == "remind":
            parts.append(f"reminder {when}")
        elif step.kind == "followup":
            parts.append(f"next {targets} {when}")
        elif step.kind == "escalate":
            parts.append(f"escalates to {targets} {when}")
        elif step.kind == "expire":
            outcome = f" → {escape(clip(step.outcome, 40))}" if step.outcome else ""
            parts.append(f"expires {when}{outcome}")
    return " · ".join(parts)


def _timeline(view: PromptView) -> str:
    """What happens next and when (reminder · escalation · next channel · expiry), and who
    is on it (each reader sees the times in their own zone)."""
    parts = []
    if view.schedule:
        parts.append(f"⏱ {slack_schedule_line(view)}")
    claim = active_claim(view.claim, view.now)
    if claim is not None:
        parts.append(f"🙋 {clip(escape(claim_line(claim, view.now)), REASON_TEXT)}")
    return " · ".join(parts)


def _fallback(view: PromptView) -> str:
    """The notification text: title and the start of the question, or the result."""
    e = view.elicitation
    title = clip(escape(title_of(e)), MAX_HEADER_TEXT)
    if view.status is not Status.PENDING:
        return f"{title}: {_result(view)}"
    question = " ".join(e.question.split())
    if not question:
        return title
    return f"{title}: {clip(escape(question), FALLBACK_QUESTION)}"


def metadata(key: str, idempotency_key: str) -> dict[str, Any]:
    """The message metadata that lets an uncertain post find its message again."""
    return {
        "event_type": EVENT_TYPE,
        "event_payload": {"elicitation": key, "post": idempotency_key},
    }


def notice_metadata(idempotency_key: str) -> dict[str, Any]:
    """The metadata of a public notice (a reminder in a copy's thread): as for a post, an
    uncertain notice finds its reply by it instead of pinging the people a second time. No
    elicitation key: a notice has no buttons to resolve."""
    return {"event_type": NOTICE_EVENT_TYPE, "event_payload": {"post": idempotency_key}}


def result_text(view: PromptView) -> str:
    """The outcome as one mrkdwn line (✅ Answered by … / ⌛ Expired … / 🚫 Cancelled …)."""
    return _result(view)

"""A :class:`~bot.domain.ports.PromptView` as a Slack message (fallback text and blocks). Pure.

Approving buttons only on a message that holds the whole decisive content (rule 2, :func:`shown`);
otherwise what fits, the reason, and **Review…**. The decision ignores the clock-driven timeline
line (room is kept for it), so a click meets the same answer. :data:`MAX_TOTAL_TEXT` stays below
Slack's undocumented cumulative ``msg_blocks_too_long`` at about 12,000 characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from adapters.slack.markup.blocks import (
    BUTTONS_PER_BLOCK,
    MAX_BLOCKS,
    MAX_BUTTON_TEXT,
    MAX_BUTTON_VALUE,
    MAX_HEADER_TEXT,
    MAX_ID,
    MAX_SELECT_OPTIONS,
    Block,
    actions_block,
    button,
    button_rows,
    clip,
    context_block,
    escape,
    fitting,
    link,
    option_text,
    plain,
    section_block,
    static_select,
    text_length,
    value_json,
)
from adapters.slack.markup.layout import pack_whole, pack_within
from adapters.slack.markup.mrkdwn import plain_text
from adapters.slack.markup.previews import groups, metadata_blocks, options_line
from adapters.slack.modals.form import form_hint
from adapters.slack.wording import closed_blocks, note_block, result_line
from bot.domain.deadlines import active_claim, claim_line, destination_name, when_text
from bot.domain.deciders import APPROVE_IN_WEB, links_to_web
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.forms import is_form
from bot.domain.model import AnswerMode, Disclosure, Elicitation, Meaning, Status
from bot.domain.ports import PromptView
from bot.domain.rules import OfferedOption, offered_options
from bot.domain.wording import title_of

# Our own budgets, inside Block Kit's limits.
MAX_BUTTONS = 20
"""More offered options than this are a static select."""
MAX_TOTAL_TEXT = 10_000
"""All text in one message (the sum of every text object)."""
FALLBACK_QUESTION = 300
REASON_TEXT = 500
TIMELINE_TEXT = 600
"""The timeline line is cut to this; the "holds everything" decision keeps this much room."""
MAX_URL = 3000  # a link button's url (Block Kit's limit)

EVENT_TYPE = "elicitbot_elicitation"
NOTICE_EVENT_TYPE = "elicitbot_notice"
OPTION_ACTION = "elicitbot.option"
SELECT_ACTION = "elicitbot.select"
MULTI_ACTION = "elicitbot.choose_many"
SUBMIT_ACTION = "elicitbot.submit"
REPLY_ACTION = "elicitbot.reply"
ACK_ACTION = "elicitbot.ack"
CLAIM_ACTION = "elicitbot.claim"
REVIEW_ACTION = "elicitbot.review"
WEB_LINK_ACTION = "elicitbot.web_link"
"""The link button to the inbox page, where approving counts only there (``approve_on``); Slack
still sends a ``block_actions`` for it, which the app acks and ignores."""

REVIEW_HINT = "Use *Review…* to see all of it and decide there."
"""The :attr:`~bot.domain.model.Disclosure.review` of a message that does not hold everything."""
CUT_NOTICE = "✂️ This message does not show everything. " + REVIEW_HINT


def _header(e: Elicitation) -> Block:
    return {"type": "header", "text": plain(clip(title_of(e), MAX_HEADER_TEXT))}


def _cut_body(view: PromptView, head: list[Block], tail: list[Block]) -> list[Block]:
    """The question and previews cut to the room left, then the metadata; a line counts the
    preview items left out."""
    e = view.elicitation
    meta = metadata_blocks(e)
    fixed = head + tail + meta
    cut = pack_within(
        groups(e),
        text=MAX_TOTAL_TEXT - text_length(fixed),
        blocks=MAX_BLOCKS - len(fixed),
        note=f" (full text: {link(view.link)})" if view.link else " (cut)",
    )
    body = list(cut.blocks)
    if cut.dropped:
        more = f"… {cut.dropped} more preview item{'s' if cut.dropped > 1 else ''}"
        where = "use *Review…* to see them all" if view.status is Status.PENDING else ""
        full = f"full text: {link(view.link)}" if view.link else ""
        note = "; ".join(x for x in (where, full) if x)
        line = clip(f"{more} ({note})" if note else more, 200)
        body.insert(cut.at, context_block(line))
    return body + meta


def _fits(blocks: Sequence[Block], reserve: int = 0, reserve_blocks: int = 0) -> bool:
    return (
        len(blocks) + reserve_blocks <= MAX_BLOCKS
        and text_length(blocks) + reserve <= MAX_TOTAL_TEXT
    )


@dataclass(frozen=True)
class _Decision:
    body: list[Block]  # whole
    shown: Disclosure


def _decide(view: PromptView) -> _Decision:
    e = view.elicitation
    body = [b for g in groups(e) for b in pack_whole(g)] + metadata_blocks(e)
    tail = _pending_tail(view, SHOWN_WHOLE, timeline=False)
    if _fits([_header(e), *body, *tail], TIMELINE_TEXT, 1):
        return _Decision(body, SHOWN_WHOLE)
    return _Decision(body, Disclosure(whole=False, review=REVIEW_HINT))


def shown(view: PromptView) -> Disclosure:
    """Whether :func:`render`'s message holds the whole decisive content uncut (else ``review``
    is :data:`REVIEW_HINT`). Never depends on anything a click sends."""
    return _decide(view).shown


def option_value(
    key: str, option_id: str, index: int, revision: int | None, digest: str | None = None
) -> str:
    """A button's value (``≤ 2000``): key, option id, revision and digest (rule 2); shorter
    forms drop the key, then name the option by index, then drop the digest."""
    d = {"d": digest}
    full, short, least = {"e": key, "o": option_id}, {"o": option_id}, {"i": index}
    forms = [{**f, "r": revision} for f in (full, short, least)]
    return fitting(MAX_BUTTON_VALUE, *({**f, **d} for f in forms), forms[-1])


def _stamp(key: str, revision: int | None, digest: str | None) -> str:
    """Of Submit, Reply… and Answer…: key, revision and digest (a modal carries it on)."""
    return fitting(
        MAX_BUTTON_VALUE, {"e": key, "r": revision, "d": digest}, {"e": key, "r": revision}
    )


def button_style(meaning: Meaning) -> str | None:
    return {Meaning.APPROVE: "primary", Meaning.REJECT: "danger"}.get(meaning)


def _block_id(prefix: str, key: str) -> str:
    block_id = f"{prefix}:{key}"
    return block_id if len(block_id) <= MAX_ID else prefix


def review_value(key: str, revision: int | None) -> str:
    full = value_json({"e": key, "r": revision})
    return full if len(full) <= MAX_BUTTON_VALUE else value_json({"r": revision})


def _button_label(o: OfferedOption) -> str:
    star = "⭐ " if o.option.recommended else ""
    return star + option_text(o.option.label, o.admin_only, MAX_BUTTON_TEXT - len(star))


def _actions(view: PromptView, options: Sequence[OfferedOption], shown: Disclosure) -> list[Block]:
    """The buttons, select or reply button while pending; Review… first when cut."""
    e = view.elicitation
    key = e.key
    s = e.subject
    revision, digest = (s.revision, s.digest) if s is not None else (None, None)
    mode = e.answer_mode
    offered = offered_choices(options, mode)
    blocks: list[Block] = []
    web = web_button(view, options)  # approving counts only in the web inbox: link there
    if web is not None and (mode is AnswerMode.MULTI_CHOICE or len(offered) > MAX_BUTTONS):
        blocks.append(_row(WEB_LINK_ACTION, key, [web]))  # a select has no place for a link
        web = None
    if mode is AnswerMode.MULTI_CHOICE and offered:
        select = static_select(
            "multi_static_select", MULTI_ACTION, "Choose one or more…", offered, revision, digest
        )
        submit = button("Submit", SUBMIT_ACTION, _stamp(key, revision, digest), "primary")
        blocks.append(_row("elicitbot.multi", key, [select, submit]))
    elif len(offered) > MAX_BUTTONS:
        select = static_select(
            "static_select", SELECT_ACTION, "Choose an option…", offered, revision, digest
        )
        blocks.append(_row("elicitbot.select", key, [select]))
    else:
        buttons = [
            button(
                _button_label(o),
                f"{OPTION_ACTION}.{i}",
                option_value(key, o.option.id, i, revision, digest),
                button_style(o.option.meaning),
            )
            for i, o in offered
        ]
        if web is not None:  # where the first approving button was
            at = next(i for i, o in enumerate(options) if o.elsewhere)
            buttons.insert(sum(1 for i, _ in offered if i < at), web)
            web = None
        blocks.extend(button_rows("elicitbot.options", buttons))
    hidden = len(offered) - MAX_SELECT_OPTIONS
    if hidden > 0:
        where = f"the web inbox ({link(view.link)})" if view.link else "the web inbox"
        blocks.append(context_block(f"{hidden} more options are offered in {where}."))
    extra: list[dict[str, Any]] = []
    if mode is AnswerMode.SECRET:
        extra.append(button("Answer privately…", REPLY_ACTION, value_json({"e": key}), "primary"))
    elif is_form(e):  # several questions: the form modal, one input per question
        extra.append(button("Answer…", REPLY_ACTION, _stamp(key, revision, digest), "primary"))
    elif mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        extra.append(button("Reply…", REPLY_ACTION, _stamp(key, revision, digest)))
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
            blocks.append(actions_block("elicitbot.reply", extra))
    if not shown.whole:
        review = button("Review…", REVIEW_ACTION, review_value(key, revision), "primary")
        _add_review(blocks, review)
    # "I'm on it": its own block, after the answers; gone once the question is closed.
    claim = button("I'm on it", CLAIM_ACTION, value_json({"e": key}))
    blocks.append(actions_block(CLAIM_ACTION, [claim]))
    return blocks


def offered_choices(
    options: Sequence[OfferedOption], mode: AnswerMode
) -> list[tuple[int, OfferedOption]]:
    """The options offered as buttons or a select, by index (none for free text or a secret)."""
    if mode in (AnswerMode.FREE_TEXT, AnswerMode.SECRET):
        return []
    return [(i, o) for i, o in enumerate(options) if o.offered]


def web_button(view: PromptView, options: Sequence[OfferedOption]) -> dict[str, Any] | None:
    """The link button to the inbox page, when approving counts only there and Slack can open it."""
    if not any(o.elsewhere for o in options) or not links_to_web(view.approve_on):
        return None
    if not view.link.startswith(("https://", "http://")) or len(view.link) > MAX_URL:
        return None
    element = {"type": "button", "text": plain(APPROVE_IN_WEB), "action_id": WEB_LINK_ACTION}
    element["url"] = view.link
    value = value_json({"e": view.elicitation.key})
    if len(value) <= MAX_BUTTON_VALUE:
        element["value"] = value
    return element


def _row(prefix: str, key: str, elements: list[dict[str, Any]]) -> Block:
    return actions_block(_block_id(prefix, key), elements)


def _add_review(blocks: list[Block], review: dict[str, Any]) -> None:
    """Review… first in the first row of buttons when it has room, else a row of its own."""
    first = blocks[0] if blocks else None
    if (
        first is not None
        and first.get("block_id") == "elicitbot.options.0"
        and len(first["elements"]) < BUTTONS_PER_BLOCK
    ):
        first["elements"].insert(0, review)
    else:
        blocks.insert(0, actions_block(REVIEW_ACTION, [review]))


def _hint(e: Elicitation) -> str | None:
    if e.answer_mode is AnswerMode.SECRET:
        return "This answer is secret: use *Answer privately…*, never a chat message."
    if is_form(e):
        return form_hint(e)
    if e.answer_mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        return "Or reply in this message's thread."
    return None


def _withheld_lines(options: Sequence[OfferedOption], shown: Disclosure) -> list[str]:
    """Why approving is not offered here, and that the message is cut."""
    lines = []
    reason = next((o.withheld_reason for o in options if o.withheld_reason), None)
    if reason is not None:
        others = " Other options work." if any(not o.option.approving for o in options) else ""
        lines.append(f"⚠️ {clip(escape(reason), REASON_TEXT)}{others}")
    if not shown.whole and (reason is None or REVIEW_HINT not in reason):
        lines.append(CUT_NOTICE)
    return lines


def _pending_tail(view: PromptView, shown: Disclosure, *, timeline: bool = True) -> list[Block]:
    e = view.elicitation
    options = offered_options(e, view.now, shown=shown, surface="slack", approve_on=view.approve_on)
    note = note_block(view)  # the upstream refused the last answer: open again, say why first
    blocks: list[Block] = [note] if note is not None else []
    described = options_line(options)
    if described:
        blocks.append(section_block(described))
    blocks.extend(context_block(line) for line in _withheld_lines(options, shown))
    blocks.extend(_actions(view, options, shown))
    hint = _hint(e)
    if hint is not None:
        blocks.append(context_block(hint))
    line = _timeline(view) if timeline else ""
    if line:
        blocks.append(context_block(clip(line, TIMELINE_TEXT)))
    return blocks


def render(view: PromptView) -> tuple[str, list[Block]]:
    """(fallback text, blocks): buttons while pending, else the result; whole when
    :func:`shown` says so, else cut to fit."""
    e = view.elicitation
    head = [_header(e)]
    decision = _decide(view)
    if view.status is Status.PENDING:
        tail = _pending_tail(view, decision.shown)
        whole = decision.shown.whole
    else:
        tail = closed_blocks(view)
        whole = _fits([*head, *decision.body, *tail])
    body = decision.body if whole else _cut_body(view, head, tail)
    return _fallback(view), [*head, *body, *tail][:MAX_BLOCKS]


def slack_date(at: datetime) -> str:
    """Each reader sees the time in their own zone (UTC fallback)."""
    stamp = int(at.timestamp())
    return f"<!date^{stamp}^{{date_short_pretty}} {{time}}|{escape(when_text(at))}>"


def slack_schedule_line(view: PromptView) -> str:
    """``reminder <date> · escalates to #C0ONCALL <date> · expires <date> → deny``, escaped."""
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
    """What happens next and when, who is on it, and a quorum being counted."""
    parts = []
    if view.schedule:
        parts.append(f"⏱ {slack_schedule_line(view)}")
    claim = active_claim(view.claim, view.now)
    if claim is not None:
        parts.append(f"🙋 {clip(escape(claim_line(claim, view.now)), REASON_TEXT)}")
    if view.waiting is not None:  # a route's quorum being counted
        parts.append(f"🗳️ {clip(escape(view.waiting), REASON_TEXT)}")
    return " · ".join(parts)


def _fallback(view: PromptView) -> str:
    e = view.elicitation
    title = clip(escape(title_of(e)), MAX_HEADER_TEXT)
    if view.status is not Status.PENDING:
        return f"{title}: {result_line(view)}"
    question = plain_text(e.question[: FALLBACK_QUESTION * 4])
    if not question:
        return title
    return f"{title}: {clip(escape(question), FALLBACK_QUESTION)}"


def metadata(key: str, idempotency_key: str) -> dict[str, Any]:
    """Lets an uncertain post find its message again."""
    return {
        "event_type": EVENT_TYPE,
        "event_payload": {"elicitation": key, "post": idempotency_key},
    }


def notice_metadata(idempotency_key: str) -> dict[str, Any]:
    """So an uncertain notice finds its reply instead of pinging twice (no buttons, no key)."""
    return {"event_type": NOTICE_EVENT_TYPE, "event_payload": {"post": idempotency_key}}

"""A :class:`~bot.domain.ports.PromptView` as a Slack message: fallback text and Block Kit blocks.

Pure: no I/O. Agent text is escaped for mrkdwn (``&``, ``<``, ``>``) and every mrkdwn text object is
``verbatim`` so Slack neither parses ``<!channel>``/``<@U…>``/``<url|label>`` nor auto-expands bare
``@here``. Every length is counted in code points and kept inside Block Kit's limits; long text is
cut with a link to the web inbox's full text. The total text of a message stays under
:data:`MAX_TOTAL_TEXT`, below Slack's undocumented cumulative limit (``msg_blocks_too_long`` at
about 12,000 characters).

Button values are JSON ``{"e": <elicitation key>, "o": <option id>, "r": <subject revision>}``
(``"i"``: the option's index instead of ``"o"``, and no ``"e"``, only when the ids are too long for
2,000 characters). Action ids: ``elicitbot.option.<n>``, ``elicitbot.select`` (a static select of
``{"o", "r"}`` values, used beyond :data:`MAX_BUTTONS` options), ``elicitbot.choose_many``
with ``elicitbot.submit`` (multiple choice), ``elicitbot.reply`` (free text, secret) and
``elicitbot.ack``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from bot.domain.deadlines import active_claim, claim_line, destination_name, when_text
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    Kind,
    Meaning,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import (
    MAX_FREE_TEXT,
    OfferedOption,
    approving_withheld,
    describe_answer,
    format_time,
    offered_options,
)

Block = dict[str, Any]

# Block Kit limits (docs.slack.dev/reference/block-kit; reliability.md §1.6).
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_FIELDS = 10
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ID = 255
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_SELECT_OPTIONS = 100
MAX_PLACEHOLDER = 150
MAX_MESSAGE_TEXT = 40_000

# Our own budgets, well inside the limits.
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
SELECT_BUDGET = 2400
REASON_TEXT = 500
RESULT_TEXT = 1500

EVENT_TYPE = "elicitbot_elicitation"
OPTION_ACTION = "elicitbot.option"
SELECT_ACTION = "elicitbot.select"
MULTI_ACTION = "elicitbot.choose_many"
SUBMIT_ACTION = "elicitbot.submit"
REPLY_ACTION = "elicitbot.reply"
ACK_ACTION = "elicitbot.ack"
CLAIM_ACTION = "elicitbot.claim"

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_UNSAFE_URL = re.compile(r"[\s<>|\"]")
_PLATFORMS = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


# --------------------------------------------------------------------------- text helpers


def escape(text: str) -> str:
    """Slack mrkdwn escaping: ``&``, ``<``, ``>``; nothing else is a control character."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` code points, ending with ``…`` when cut (plain text)."""
    if len(text) <= limit:
        return text
    return _safe_head(text, limit - 1) + "…"


def _safe_head(text: str, n: int) -> str:
    """The first ``n`` code points, not ending inside an ``&…;`` entity or on a joiner."""
    head = text[: max(n, 0)]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head.rstrip("\u200d\ufe0f")


def link(url: str) -> str:
    """A URL as mrkdwn: ``<url>`` (shown as itself, never a label) when it is a plain http(s)
    URL, else the escaped text, which cannot form a link."""
    if url.startswith(("https://", "http://")) and not _UNSAFE_URL.search(url):
        return f"<{url.replace('&', '&amp;')}>"
    return escape(url)


def cut(text: str, limit: int, full_text: str) -> str:
    """Escaped mrkdwn ``text`` in at most ``limit`` code points; when cut it ends with
    ``… (full text: <link>)``."""
    if len(text) <= limit:
        return text
    note = f"… (full text: {link(full_text)})" if full_text else "… (cut; full text in the inbox)"
    if len(note) > limit // 2:
        return _safe_head(text, limit - 1) + "…"
    return _safe_head(text, limit - len(note)) + note


def shorten_digest(digest: str) -> str:
    """``sha256:4f2a0c1e9b8d…`` -> ``sha256:4f2a0c1e…``."""
    algorithm, sep, value = digest.partition(":")
    if sep and len(value) > 8:  # noqa: PLR2004 - eight hex digits identify it to a person
        return f"{algorithm}:{value[:8]}…"
    return clip(digest, 20)


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn(text)}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [_mrkdwn(text)]}


# --------------------------------------------------------------------------- parts


def title_of(e: Elicitation) -> str:
    c = e.context
    title = e.title or c.card_title or c.board_name
    if title and title.strip():
        return " ".join(title.split())
    return "Approval request" if e.kind is Kind.APPROVAL else "Question"


def _header(e: Elicitation) -> Block:
    return {"type": "header", "text": _plain(clip(title_of(e), MAX_HEADER_TEXT))}


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
        blocks.append(_section(text))
        left -= len(text)
        shown += 1
    hidden = len(s.preview) - shown
    if hidden > 0:
        more = f"{hidden} more preview item{'s' if hidden > 1 else ''}"
        blocks.append(_context(f"… {more} (full text: {link(full_text)})" if full_text else more))
    return blocks


def _value(payload: dict[str, Any]) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def option_value(key: str, option_id: str, index: int, revision: int | None) -> str:
    """A button's value (``≤ 2000``): elicitation key, option id, subject revision."""
    full = _value({"e": key, "o": option_id, "r": revision})
    if len(full) <= MAX_BUTTON_VALUE:
        return full
    short = _value({"o": option_id, "r": revision})
    return short if len(short) <= MAX_BUTTON_VALUE else _value({"i": index, "r": revision})


def _select_value(option_id: str, index: int, revision: int | None) -> str:
    value = _value({"o": option_id, "r": revision})
    return value if len(value) <= MAX_OPTION_VALUE else _value({"i": index, "r": revision})


def _button(text: str, action_id: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": _plain(clip(text, MAX_BUTTON_TEXT)),
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        button["style"] = style
    return button


def _option_text(label: str, admin_only: bool, limit: int) -> str:
    label = " ".join(label.split()) or "(no label)"
    if not admin_only:
        return clip(label, limit)
    mark = " (admin)"
    return clip(label, limit - len(mark)) + mark


def _style(meaning: Meaning) -> str | None:
    return {Meaning.APPROVE: "primary", Meaning.REJECT: "danger"}.get(meaning)


def _chunks(elements: Sequence[dict[str, Any]], size: int) -> Iterable[Sequence[dict[str, Any]]]:
    for start in range(0, len(elements), size):
        yield elements[start : start + size]


def _block_id(prefix: str, key: str) -> str:
    block_id = f"{prefix}:{key}"
    return block_id if len(block_id) <= MAX_ID else prefix


def _select(
    kind: str,
    action_id: str,
    placeholder: str,
    offered: Sequence[tuple[int, OfferedOption]],
    revision: int | None,
) -> dict[str, Any]:
    """A (multi) static select of the first 100 offered options; labels share a text budget."""
    shown = offered[:MAX_SELECT_OPTIONS]
    limit = max(20, min(MAX_OPTION_TEXT, SELECT_BUDGET // max(len(shown), 1)))
    return {
        "type": kind,
        "action_id": action_id,
        "placeholder": _plain(placeholder),
        "options": [
            {
                "text": _plain(_option_text(o.option.label, o.admin_only, limit)),
                "value": _select_value(o.option.id, i, revision),
            }
            for i, o in shown
        ],
    }


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
        select = _select(
            "multi_static_select", MULTI_ACTION, "Choose one or more…", offered, revision
        )
        submit = _button("Submit", SUBMIT_ACTION, _value({"e": key, "r": revision}), "primary")
        blocks.append(
            {
                "type": "actions",
                "block_id": _block_id("elicitbot.multi", key),
                "elements": [select, submit],
            }
        )
    elif len(offered) > MAX_BUTTONS:
        select = _select("static_select", SELECT_ACTION, "Choose an option…", offered, revision)
        blocks.append(
            {
                "type": "actions",
                "block_id": _block_id("elicitbot.select", key),
                "elements": [select],
            }
        )
    else:
        buttons = [
            _button(
                _option_text(o.option.label, o.admin_only, MAX_BUTTON_TEXT),
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
        blocks.append(_context(f"{hidden} more options are offered in {where}."))
    extra: list[dict[str, Any]] = []
    if mode is AnswerMode.SECRET:
        extra.append(_button("Answer privately…", REPLY_ACTION, _value({"e": key}), "primary"))
    elif mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        extra.append(_button("Reply…", REPLY_ACTION, _value({"e": key, "r": revision})))
    elif mode is AnswerMode.ACKNOWLEDGE and not e.options:
        extra.append(_button("Acknowledge", ACK_ACTION, _value({"e": key}), "primary"))
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
    claim = _button("I'm on it", CLAIM_ACTION, _value({"e": key}))
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
        blocks.append(_section(cut(escape(question), MAX_SECTION_TEXT, full)))
    context = _context_line(e)
    if context:
        blocks.append(_context(context))
    if e.subject is not None:
        blocks.append(_context(_subject_line(e.subject)))
        blocks.extend(_preview_blocks(e.subject, full))
    if pending:
        reason = approving_withheld(e, view.now)
        if reason is not None and any(o.approving for o in e.options):
            others = " Other options work." if any(not o.approving for o in e.options) else ""
            blocks.append(_context(f"⚠️ {clip(escape(reason), REASON_TEXT)}{others}"))
        blocks.extend(_actions(view))
        hint = _hint(e)
        if hint is not None:
            blocks.append(_context(hint))
        timeline = _timeline(view)
        if timeline:
            blocks.append(_context(timeline))
    else:
        blocks.append(_section(_result(view)))
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


def result_text(view: PromptView) -> str:
    """The outcome as one mrkdwn line (✅ Answered by … / ⌛ Expired … / 🚫 Cancelled …)."""
    return _result(view)


# --------------------------------------------------------------------------- the reply modal

REPLY_CALLBACK = "elicitbot.reply"
TEXT_BLOCK = "elicitbot.text"
SECRET_BLOCK = "elicitbot.secret"  # noqa: S105 - a block id
CHOICE_BLOCK = "elicitbot.choice"
CHOICES_BLOCK = "elicitbot.choices"
INPUT_ACTION = "value"

MAX_INPUT_LENGTH = 3000
"""``plain_text_input.max_length`` can be at most 3,000."""
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_MODAL_LABEL = 2000
MAX_MODAL_HINT = 2000
MODAL_QUESTION = 2500


def input_limit(e: Elicitation) -> int:
    """The most characters the modal's text box takes for ``e``."""
    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    return min(limit, MAX_INPUT_LENGTH)


def _modal_metadata(fields: dict[str, Any]) -> str:
    """``private_metadata`` within 3,000 characters; the key goes first when it does not fit
    (the message's channel and ts find it again)."""
    compact = {k: v for k, v in fields.items() if v is not None}
    text = _value(compact)
    if len(text) > MAX_PRIVATE_METADATA and compact.get("c") and compact.get("m"):
        compact.pop("e", None)
        text = _value(compact)
    return text if len(text) <= MAX_PRIVATE_METADATA else _value({"c": fields.get("c")})


def _text_input(
    block_id: str, label: str, limit: int, *, multiline: bool, optional: bool, hint: str | None
) -> Block:
    block: Block = {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": _plain(clip(label, MAX_MODAL_LABEL)),
        "element": {
            "type": "plain_text_input",
            "action_id": INPUT_ACTION,
            "multiline": multiline,
            "max_length": limit,
        },
    }
    if not optional:
        block["element"]["min_length"] = 1
    if hint:
        block["hint"] = _plain(clip(hint, MAX_MODAL_HINT))
    return block


def _choice_input(e: Elicitation, now: datetime, *, many: bool, optional: bool) -> Block | None:
    offered = [(i, o) for i, o in enumerate(offered_options(e, now)) if o.offered]
    if not offered:
        return None
    revision = e.subject.revision if e.subject is not None else None
    kind = "multi_static_select" if many else "static_select"
    placeholder = "Choose one or more…" if many else "Choose an option…"
    element = _select(kind, INPUT_ACTION, placeholder, offered, revision)
    return {
        "type": "input",
        "block_id": CHOICES_BLOCK if many else CHOICE_BLOCK,
        "optional": optional,
        "label": _plain("Options" if many else "Option"),
        "element": element,
    }


def reply_modal(
    view: PromptView,
    *,
    channel: str | None,
    message_ts: str | None,
    thread_ts: str | None = None,
    option_id: str | None = None,
) -> dict[str, Any]:
    """The "Reply…" modal: a text box (``max_length`` set), the options when the answer mode
    takes them, or the secret box; ``option_id`` fixes a chosen option that needs a comment.

    ``private_metadata`` carries the elicitation key, where the message is, the fixed option,
    the subject revision and the text limit, so a submission can be checked before its ack."""
    e = view.elicitation
    mode = e.answer_mode
    limit = input_limit(e)
    longer = (
        f"Up to {limit:,} characters here; a longer answer (up to "
        f"{e.max_length if e.max_length is not None else MAX_FREE_TEXT:,}) can go in the "
        "message's thread."
        if limit < (e.max_length if e.max_length is not None else MAX_FREE_TEXT)
        else f"Up to {limit:,} characters."
    )
    question = e.question.strip() or title_of(e)
    blocks: list[Block] = [
        _section(f"*{clip(escape(title_of(e)), 200)}*"),
        _section(cut(escape(question), MODAL_QUESTION, view.link)),
    ]
    title = "Answer"
    submit = "Send"
    chosen = e.option(option_id) if option_id is not None else None
    if mode is AnswerMode.SECRET:
        title, submit = "Secret answer", "Send privately"
        where = {"pinework": "Pinework"}.get(e.source, e.source)
        blocks.append(
            _text_input(
                SECRET_BLOCK,
                "Secret",
                limit,
                multiline=False,
                optional=False,
                hint=f"Goes straight to {where}. elicitbot does not keep, log or show it.",
            )
        )
    elif chosen is not None:
        blocks.append(_context(f"You chose *{clip(escape(chosen.label), 200)}*."))
        blocks.append(
            _text_input(
                TEXT_BLOCK,
                "Comment",
                limit,
                multiline=True,
                optional=not chosen.requires_text,
                hint=longer,
            )
        )
    else:
        many = mode is AnswerMode.MULTI_CHOICE
        text_optional = mode is not AnswerMode.FREE_TEXT
        choice = (
            _choice_input(e, view.now, many=many, optional=mode is AnswerMode.CHOICE_OR_TEXT)
            if mode is not AnswerMode.FREE_TEXT
            else None
        )
        if choice is not None:
            blocks.append(choice)
        if mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT, AnswerMode.ACKNOWLEDGE):
            label = "Your answer" if choice is None else "Or write an answer"
            blocks.append(
                _text_input(
                    TEXT_BLOCK,
                    label,
                    limit,
                    multiline=True,
                    optional=text_optional and choice is not None,
                    hint=longer,
                )
            )
    revision = e.subject.revision if e.subject is not None else None
    return {
        "type": "modal",
        "callback_id": REPLY_CALLBACK,
        "title": _plain(clip(title, MAX_MODAL_TITLE)),
        "submit": _plain(clip(submit, MAX_MODAL_TITLE)),
        "close": _plain("Cancel"),
        "private_metadata": _modal_metadata(
            {
                "e": e.key,
                "c": channel,
                "m": message_ts,
                "t": thread_ts,
                "o": option_id,
                "r": revision,
                "l": limit,
                "s": True if mode is AnswerMode.SECRET else None,
            }
        ),
        "blocks": blocks,
    }

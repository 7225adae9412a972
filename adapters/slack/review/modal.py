"""The Review modal: the whole request, paged, approving options on the last page only. Pure.
Whether it showed everything is decided from its ``private_metadata`` (only we write it; Slack
returns it untouched in the signed payload) against a fresh rendering.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from adapters.slack import render
from adapters.slack.markup.blocks import (
    MAX_BUTTON_VALUE,
    MAX_SELECT_OPTIONS,
    Block,
    actions_block,
    button,
    button_rows,
    clip,
    context_block,
    escape,
    option_text,
    plain,
    section_block,
    static_select,
    value_json,
)
from adapters.slack.modals.reply import MAX_MODAL_TITLE, MAX_PRIVATE_METADATA
from adapters.slack.review import pages as review
from adapters.slack.translate import action_value, decode_value, digest_of, revision_of, text_of
from adapters.slack.wording import result_line
from bot.domain.disclosure import SHOWN_WHOLE, decisive
from bot.domain.model import AnswerMode, Disclosure, Elicitation, ElicitationKey, Identity, Status
from bot.domain.ports import PromptView
from bot.domain.rules import offered_options
from bot.domain.wording import title_of

REVIEW_CALLBACK = "elicitbot.review"
"""Its clicks come as ``block_actions`` with a ``view``."""
PAGE_ACTION = "elicitbot.review.page"
OPTION_ACTION = "elicitbot.review.option"
SELECT_ACTION = "elicitbot.review.select"
MANY_ACTION = "elicitbot.review.many"
SUBMIT_ACTION = "elicitbot.review.submit"
REPLY_ACTION = "elicitbot.review.reply"
ACK_ACTION = "elicitbot.review.ack"

MAX_MODAL_BLOCKS = 100
CHROME_BLOCKS = 10
"""Blocks a page keeps for its own: a notice, the page line, the paging row, a divider, the
withheld line, up to four rows of buttons (or a select) and the Reply… row."""
PAGE_ROOM = MAX_MODAL_BLOCKS - CHROME_BLOCKS
NOTICE_TEXT = 2500

REVIEW_HINT = "Use Review… on the message to see all of it, and decide there."
PAGE_HINT = "Page through the review to its last page to approve."
CHANGED = "The request changed since this review was opened: here it is again, from the start."


def content_hash(e: Elicitation) -> str:
    """Of the decisive content and revision, pinned in a review's metadata: a change is noticed."""
    revision = e.subject.revision if e.subject is not None else None
    pieces = [[p.where, *p.texts] for p in decisive(e)]
    payload = json.dumps([e.key, revision, pieces], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ReviewMeta:
    """What a review modal's ``private_metadata`` records (written by us only)."""

    key: ElicitationKey
    revision: int | None
    page: int
    pages: int
    content: str  # content_hash
    channel: str
    message_ts: str | None
    thread_ts: str | None = None
    file: str | None = None
    """The file in the message's thread that holds the whole request (beyond a modal)."""
    digest: str | None = None
    """The approval subject digest the review was built on (rule 2)."""

    def encode(self) -> str:
        fields = {
            "e": self.key,
            "r": self.revision,
            "p": self.page,
            "n": self.pages,
            "h": self.content,
            "c": self.channel,
            "m": self.message_ts,
            "t": self.thread_ts,
            "f": self.file,
            "d": self.digest,
        }
        text = value_json({k: v for k, v in fields.items() if v is not None})
        if len(text) > MAX_PRIVATE_METADATA:
            raise ValueError("review metadata too long")
        return text


def read_meta(text: Any) -> ReviewMeta | None:
    """None: not one of ours, or malformed."""
    raw = decode_value(text)
    key, channel, content = text_of(raw.get("e")), text_of(raw.get("c")), text_of(raw.get("h"))
    page, pages = raw.get("p"), raw.get("n")
    if key is None or channel is None or content is None or not (_count(page) and _count(pages)):
        return None
    return ReviewMeta(
        key=ElicitationKey(key),
        revision=revision_of(raw),
        page=page,
        pages=pages,
        content=content,
        channel=channel,
        message_ts=text_of(raw.get("m")),
        thread_ts=text_of(raw.get("t")),
        file=text_of(raw.get("f")),
        digest=digest_of(raw),
    )


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def pages_of(view: PromptView) -> list[list[Block]]:
    """The review's pages, split (never cut) to leave room for each page's own rows."""
    pages = [
        page[start : start + PAGE_ROOM]
        for page in review.review_blocks(view)
        for start in range(0, len(page), PAGE_ROOM)
    ]
    return pages or [[section_block(escape(title_of(view.elicitation)))]]


def meta_for(
    view: PromptView, *, channel: str, message_ts: str | None, thread_ts: str | None
) -> ReviewMeta:
    """Of a review just opened on its first page."""
    e = view.elicitation
    return ReviewMeta(
        key=e.key,
        revision=e.subject.revision if e.subject is not None else None,
        page=0,
        pages=len(pages_of(view)) if review.review_fits(view) else 1,
        content=content_hash(e),
        channel=channel,
        message_ts=message_ts,
        thread_ts=thread_ts,
        digest=e.subject.digest if e.subject is not None else None,
    )


def current(meta: ReviewMeta, view: PromptView) -> bool:
    """The request is still the one the review was built from."""
    e = view.elicitation
    revision = e.subject.revision if e.subject is not None else None
    return meta.key == e.key and meta.revision == revision and meta.content == content_hash(e)


def review_shown(meta: ReviewMeta, view: PromptView) -> Disclosure:
    """Whole only on the last page (or with the file shared), and only while the request is the
    one the modal was built from; from our metadata and a fresh rendering, never the payload."""
    if not current(meta, view):
        return Disclosure(whole=False, review=REVIEW_HINT)
    if review.review_fits(view):
        last = len(pages_of(view)) - 1
        if meta.file is None and meta.pages == last + 1 and meta.page == last:
            return SHOWN_WHOLE
        return Disclosure(whole=False, review=PAGE_HINT)
    if meta.file is not None and meta.file == file_name(view.elicitation):
        return SHOWN_WHOLE
    return Disclosure(whole=False, review=REVIEW_HINT)


def reply_shown(meta: Mapping[str, Any], view: PromptView) -> Disclosure:
    """Whole when opened from a review that showed everything (its :func:`content_hash` still
    current), else what the message it was opened from shows."""
    e = view.elicitation
    revision = e.subject.revision if e.subject is not None else None
    reviewed = meta.get("w")
    if isinstance(reviewed, str) and reviewed == content_hash(e) and meta.get("r") == revision:
        return SHOWN_WHOLE
    return render.shown(view)


def _value(option_id: str, index: int, revision: int | None) -> str:
    value = value_json({"o": option_id, "r": revision})
    return value if len(value) <= MAX_BUTTON_VALUE else value_json({"i": index, "r": revision})


def decision_blocks(view: PromptView, shown: Disclosure) -> list[Block]:
    """The decision as the review offers it with ``shown``; withheld approvals left out."""
    e = view.elicitation
    mode = e.answer_mode
    revision = e.subject.revision if e.subject is not None else None
    choices = offered_options(e, view.now, shown=shown, surface="slack", approve_on=view.approve_on)
    offered = render.offered_choices(choices, mode)
    web = render.web_button(view, choices)  # approving counts only in the web inbox
    blocks: list[Block] = []
    if web is not None:
        blocks.append(actions_block(render.WEB_LINK_ACTION, [web]))
    if mode is AnswerMode.MULTI_CHOICE and offered:
        select = static_select(
            "multi_static_select", MANY_ACTION, "Choose one or more…", offered, revision
        )
        submit = button("Submit", SUBMIT_ACTION, value_json({"r": revision}), "primary")
        blocks.append(actions_block("elicitbot.review.many", [select, submit]))
    elif len(offered) > render.MAX_BUTTONS:
        select = static_select(
            "static_select", SELECT_ACTION, "Choose an option…", offered, revision
        )
        blocks.append(actions_block("elicitbot.review.select", [select]))
    else:
        buttons = [
            button(
                option_text(o.option.label, o.admin_only, 75),
                f"{OPTION_ACTION}.{i}",
                _value(o.option.id, i, revision),
                render.button_style(o.option.meaning),
            )
            for i, o in offered
        ]
        blocks.extend(button_rows("elicitbot.review.options", buttons))
    if len(offered) > MAX_SELECT_OPTIONS:
        hidden = len(offered) - MAX_SELECT_OPTIONS
        blocks.append(context_block(f"{hidden} more options are offered in the web inbox."))
    extra: list[dict[str, Any]] = []
    if mode is AnswerMode.SECRET:
        extra.append(button("Answer privately…", REPLY_ACTION, value_json({}), "primary"))
    elif mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT):
        extra.append(button("Reply…", REPLY_ACTION, value_json({})))
    elif mode is AnswerMode.ACKNOWLEDGE and not e.options:
        extra.append(button("Acknowledge", ACK_ACTION, value_json({}), "primary"))
    if extra:
        blocks.append(actions_block("elicitbot.review.reply", extra))
    return blocks


LAST_PAGE = "Approving is offered on the last page, once you have seen everything."
NO_FILE = "Approving is offered once the whole request is in the message's thread."


def _withheld_line(view: PromptView, shown: Disclosure, wait: str) -> str | None:
    """Why approving is not offered here: ``wait`` (the last page, the file), or the rules'."""
    e = view.elicitation
    if not any(o.approving for o in e.options):
        return None
    choices = offered_options(e, view.now, shown=shown, surface="slack", approve_on=view.approve_on)
    reasons = {o.withheld_reason for o in choices}
    reasons.discard(None)
    if not reasons:
        return None
    if shown.whole or any(o.elsewhere for o in choices):  # no page here would make it count
        return f"⚠️ {clip(escape(sorted(r for r in reasons if r)[0]), 500)}"
    return wait


def _modal(title: str, meta: ReviewMeta | None, blocks: list[Block]) -> dict[str, Any]:
    view: dict[str, Any] = {
        "type": "modal",
        "callback_id": REVIEW_CALLBACK,
        "title": plain(clip(title, MAX_MODAL_TITLE)),
        "close": plain("Close"),
        "blocks": blocks[:MAX_MODAL_BLOCKS],
    }
    if meta is not None:
        view["private_metadata"] = meta.encode()
    return view


def _notice(text: str | None) -> list[Block]:
    return [section_block(clip(text, NOTICE_TEXT))] if text else []


def review_modal(
    view: PromptView, meta: ReviewMeta, *, notice: str | None = None
) -> dict[str, Any]:
    """Page ``meta.page``, paging and the decision (approving only on the last page).
    ``notice``: mrkdwn said first (a refusal, the request having changed)."""
    pages = pages_of(view)
    page = min(max(meta.page, 0), len(pages) - 1)
    meta = replace(meta, page=page, pages=len(pages))
    last = page == len(pages) - 1
    shown = review_shown(meta, view)
    blocks: list[Block] = [*_notice(notice), *pages[page]]
    if len(pages) > 1:
        where = f"Page {page + 1} of {len(pages)}"
        where += " · everything has been shown." if last else " · more follows."
        blocks.append(context_block(where))
        moves = []
        if page > 0:
            moves.append(button("← Previous", PAGE_ACTION, value_json({"p": page - 1})))
        if not last:
            moves.append(button("Next page →", PAGE_ACTION, value_json({"p": page + 1}), "primary"))
        blocks.append(actions_block("elicitbot.review.pages", moves))
    blocks.extend(_decision(view, shown))
    title = f"Review · {page + 1} of {len(pages)}" if len(pages) > 1 else "Review"
    return _modal(title, meta, blocks)


def _decision(view: PromptView, shown: Disclosure, wait: str = LAST_PAGE) -> list[Block]:
    if view.status is not Status.PENDING:
        return [section_block(result_line(view))]
    blocks: list[Block] = [{"type": "divider"}]
    line = _withheld_line(view, shown, wait)
    if line is not None:
        blocks.append(context_block(line))
    return blocks + decision_blocks(view, shown)


ATTACHING = "attaching"
ATTACHED = "attached"
NOT_ATTACHED = "not attached"


def file_modal(
    view: PromptView, meta: ReviewMeta, *, state: str, notice: str | None = None
) -> dict[str, Any]:
    """A request too long for a modal: where the file is, and the decision (no approving until
    the file is shared)."""
    e = view.elicitation
    name = file_name(e)
    title = f"*{clip(escape(title_of(e)), 200)}*"
    if state == ATTACHED:
        where = (
            f"This request is too long to show here. The whole request is in the file "
            f"*{escape(name)}* in this message's thread: read it there, then decide below."
        )
        meta = replace(meta, file=name)
    elif state == ATTACHING:
        where = "This request is too long to show here: attaching it to the message's thread…"
        meta = replace(meta, file=None)
    else:
        where = (
            "This request is too long to show here, and it could not be attached to the "
            f"message's thread. See all of it in the web inbox: {escape(view.link)}"
        )
        meta = replace(meta, file=None)
    shown = review_shown(meta, view)
    blocks = [*_notice(notice), section_block(title), section_block(where)]
    blocks.extend(_decision(view, shown, NO_FILE))
    return _modal("Review", meta, blocks)


def result_modal(text: str) -> dict[str, Any]:
    """What the decision taken in the review did (mrkdwn), with nothing left to click."""
    return _modal("Review", None, [section_block(clip(text, NOTICE_TEXT))])


def file_name(e: Elicitation) -> str:
    """The request and its revision: a new revision is a new file."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in e.key)[:80].strip("-")
    revision = f"-r{e.subject.revision}" if e.subject is not None else ""
    return f"request-{stem or 'elicitation'}{revision}.txt"


def file_text(view: PromptView) -> str:
    """The whole request as plain text, then its source and options: no answer, so no secret."""
    e = view.elicitation
    lines = [review.full_text(view).rstrip("\n"), ""]
    context = [f"{name}: {value}" for name, value in e.context_parts()]
    if context:
        lines += [*context, ""]
    if e.options:
        lines.append("Options:")
        lines += [
            f"- {o.label}"
            + (" (recommended)" if o.recommended else "")
            + (f": {o.description}" if o.description else "")
            for o in e.options
        ]
        lines.append("")
    lines.append(f"Web inbox: {view.link}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ReviewClick:
    who: Identity
    meta: ReviewMeta
    action_id: str
    value: Mapping[str, Any]
    view_id: str | None
    view_hash: str | None
    trigger_id: str | None
    selection: tuple[Mapping[str, Any], ...] = ()


def in_review(body: Mapping[str, Any]) -> bool:
    view = body.get("view")
    return isinstance(view, Mapping) and view.get("callback_id") == REVIEW_CALLBACK


def read_review_click(
    body: Mapping[str, Any], action: Mapping[str, Any], who: Identity | None
) -> ReviewClick | None:
    view = body.get("view")
    if not isinstance(view, Mapping) or who is None:
        return None
    meta = read_meta(view.get("private_metadata"))
    if meta is None:
        return None
    return ReviewClick(
        who=who,
        meta=meta,
        action_id=str(action.get("action_id", "")),
        value=action_value(action),
        view_id=text_of(view.get("id")),
        view_hash=text_of(view.get("hash")),
        trigger_id=text_of(body.get("trigger_id")),
        selection=tuple(_selection(view)),
    )


def _selection(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The option values chosen in the review's multi-select."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    for block in values.values() if isinstance(values, Mapping) else ():
        element = block.get(MANY_ACTION) if isinstance(block, Mapping) else None
        if isinstance(element, Mapping):
            chosen = element.get("selected_options")
            return [
                decode_value(o.get("value"))
                for o in (chosen if isinstance(chosen, list) else [])
                if isinstance(o, Mapping)
            ]
    return []

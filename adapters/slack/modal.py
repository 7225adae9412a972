"""The "Reply…" modal: a text box, the options when the answer mode takes them, or the secret box.

Pure: no I/O. Its ``private_metadata`` carries the elicitation key, where the message is, a fixed
option, the subject revision and the text limit, so a submission can be checked before its ack
and found again without the message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from adapters.slack.blocks import (
    Block,
    clip,
    context_block,
    cut,
    escape,
    plain,
    section_block,
    static_select,
    value_json,
)
from bot.domain.model import AnswerMode, Elicitation
from bot.domain.ports import PromptView
from bot.domain.rules import MAX_FREE_TEXT, offered_options
from bot.domain.views import title_of

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
    text = value_json(compact)
    if len(text) > MAX_PRIVATE_METADATA and compact.get("c") and compact.get("m"):
        compact.pop("e", None)
        text = value_json(compact)
    return text if len(text) <= MAX_PRIVATE_METADATA else value_json({"c": fields.get("c")})


def _text_input(
    block_id: str, label: str, limit: int, *, multiline: bool, optional: bool, hint: str | None
) -> Block:
    block: Block = {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": plain(clip(label, MAX_MODAL_LABEL)),
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
        block["hint"] = plain(clip(hint, MAX_MODAL_HINT))
    return block


def _choice_input(e: Elicitation, now: datetime, *, many: bool, optional: bool) -> Block | None:
    offered = [(i, o) for i, o in enumerate(offered_options(e, now)) if o.offered]
    if not offered:
        return None
    revision = e.subject.revision if e.subject is not None else None
    kind = "multi_static_select" if many else "static_select"
    placeholder = "Choose one or more…" if many else "Choose an option…"
    element = static_select(kind, INPUT_ACTION, placeholder, offered, revision)
    return {
        "type": "input",
        "block_id": CHOICES_BLOCK if many else CHOICE_BLOCK,
        "optional": optional,
        "label": plain("Options" if many else "Option"),
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
        section_block(f"*{clip(escape(title_of(e)), 200)}*"),
        section_block(cut(escape(question), MODAL_QUESTION, view.link)),
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
        blocks.append(context_block(f"You chose *{clip(escape(chosen.label), 200)}*."))
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
        "title": plain(clip(title, MAX_MODAL_TITLE)),
        "submit": plain(clip(submit, MAX_MODAL_TITLE)),
        "close": plain("Cancel"),
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

"""The "Reply…" modal: a text box, the options, the secret box, or a form's inputs. Pure.
``private_metadata`` carries what a submission needs to be checked before its ack and found again
without the message.
"""

from __future__ import annotations

from typing import Any

from adapters.slack.markup.blocks import (
    Block,
    clip,
    context_block,
    cut,
    escape,
    link,
    plain,
    section_block,
    static_select,
    value_json,
)
from adapters.slack.modals.form import form_inputs, summary, text_input
from bot.domain.forms import is_form
from bot.domain.model import AnswerMode, Disclosure, Elicitation
from bot.domain.ports import PromptView
from bot.domain.rules import MAX_FREE_TEXT, offered_options
from bot.domain.wording import title_of

REPLY_CALLBACK = "elicitbot.reply"
TEXT_BLOCK = "elicitbot.text"
SECRET_BLOCK = "elicitbot.secret"  # noqa: S105 - a block id
CHOICE_BLOCK = "elicitbot.choice"
CHOICES_BLOCK = "elicitbot.choices"
INPUT_ACTION = "value"

MAX_INPUT_LENGTH = 3000  # Slack's most for plain_text_input.max_length; past it: the web form
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MODAL_QUESTION = 2500


def source_limit(e: Elicitation) -> int:
    """The most characters the source takes for an answer to ``e``."""
    return e.max_length if e.max_length is not None else MAX_FREE_TEXT


def input_limit(e: Elicitation) -> int:
    """The most characters the modal's text box takes for ``e``."""
    return min(source_limit(e), MAX_INPUT_LENGTH)


def longer_secret_line(url: str) -> str:
    where = link(url) if url else "the web inbox"
    return f"Longer than {MAX_INPUT_LENGTH:,} characters? Use the private web form: {where}"


def _modal_metadata(fields: dict[str, Any]) -> str:
    """``private_metadata`` within 3,000 characters; the key goes first when it does not fit
    (the message's channel and ts find it again)."""
    compact = {k: v for k, v in fields.items() if v is not None}
    text = value_json(compact)
    if len(text) > MAX_PRIVATE_METADATA and compact.get("c") and compact.get("m"):
        compact.pop("e", None)
        text = value_json(compact)
    return text if len(text) <= MAX_PRIVATE_METADATA else value_json({"c": fields.get("c")})


def _choice_input(
    view: PromptView, shown: Disclosure, *, many: bool, optional: bool
) -> Block | None:
    e = view.elicitation
    choices = offered_options(e, view.now, shown=shown, surface="slack", approve_on=view.approve_on)
    offered = [(i, o) for i, o in enumerate(choices) if o.offered]
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
    shown: Disclosure,
    reviewed: str | None = None,
    pushed: bool = False,
    digest: str | None = None,
) -> dict[str, Any]:
    """The "Reply…" modal; ``option_id`` fixes a chosen option that needs a comment.

    ``shown``: of the surface it opened from; approving options only when whole (rule 2).
    ``reviewed``: that review's :func:`~adapters.slack.review.modal.content_hash`, kept as
    ``"w"`` so the submission counts as shown whole while the request is unchanged.
    ``pushed``: on top of a review (``"v"``: sending closes both, :func:`closes_all`)."""
    e = view.elicitation
    mode = e.answer_mode
    limit = input_limit(e)
    full = source_limit(e)
    longer = (
        f"Up to {limit:,} characters here; a longer answer (up to {full:,}) can go in the "
        "message's thread."
        if limit < full
        else f"Up to {limit:,} characters."
    )
    form = is_form(e) and mode is not AnswerMode.SECRET
    question = summary(e) if form else e.question.strip() or title_of(e)
    blocks: list[Block] = [section_block(f"*{clip(escape(title_of(e)), 200)}*")]
    if question:
        blocks.append(section_block(cut(escape(question), MODAL_QUESTION, view.link)))
    title = "Answer"
    submit = "Send"
    chosen = e.option(option_id) if option_id is not None else None
    if form:
        blocks.extend(form_inputs(e, limit=limit, full_limit=full, url=view.link))
    elif mode is AnswerMode.SECRET:
        title, submit = "Secret answer", "Send privately"
        where = {"pinework": "Pinework"}.get(e.source, e.source)
        blocks.append(
            text_input(
                SECRET_BLOCK,
                "Secret",
                limit,
                multiline=False,
                optional=False,
                hint=f"Goes straight to {where}. elicitbot does not keep, log or show it.",
            )
        )
        if full > limit:
            blocks.append(context_block(longer_secret_line(view.link)))
    elif chosen is not None:
        blocks.append(context_block(f"You chose *{clip(escape(chosen.label), 200)}*."))
        blocks.append(
            text_input(
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
            _choice_input(view, shown, many=many, optional=mode is AnswerMode.CHOICE_OR_TEXT)
            if mode is not AnswerMode.FREE_TEXT
            else None
        )
        if choice is not None:
            blocks.append(choice)
        if mode in (AnswerMode.FREE_TEXT, AnswerMode.CHOICE_OR_TEXT, AnswerMode.ACKNOWLEDGE):
            label = "Your answer" if choice is None else "Or write an answer"
            blocks.append(
                text_input(
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
                "d": digest,  # the subject digest the message (or review) showed (rule 2)
                "l": limit,
                "s": True if mode is AnswerMode.SECRET else None,
                "w": reviewed,
                "v": 1 if pushed else None,
                "f": len(e.form) if form else None,
            }
        ),
        "blocks": blocks,
    }


def closes_all(meta: dict[str, Any]) -> bool:
    """Pushed on a review: its submission closes both."""
    return meta.get("v") == 1

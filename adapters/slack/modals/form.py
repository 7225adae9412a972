"""A form (several questions) in the reply modal: one input per question, the submission read back
as per-question answers (``{question id: {"selected": [labels], "text": str | None}}``, checked by
:func:`bot.domain.forms.check_answers`). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack.markup.blocks import (
    MAX_OPTION_TEXT,
    MAX_SELECT_OPTIONS,
    Block,
    clip,
    context_block,
    escape,
    plain,
    value_json,
)
from bot.domain.model import Elicitation, FormQuestion, Option
from bot.domain.wording import one_line

FORM_BLOCK = "elicitbot.form"
INPUT_ACTION = "value"
MAX_LABEL = 2000
MAX_HINT = 2000
MAX_DESCRIPTION = 75
RECOMMENDED = "⭐ "
FORM_HINT = 500


def choice_block(number: int) -> str:
    return f"{FORM_BLOCK}.{number}.choice"


def text_block(number: int) -> str:
    return f"{FORM_BLOCK}.{number}.text"


def summary(e: Elicitation) -> str:
    """The request's text up to where its first question starts (the questions are the
    inputs); the whole text when it does not start them that way."""
    first = e.form[0]
    start = (f"1. **{first.header}** — " if first.header else "1. ") + first.question
    text = e.question.strip()
    if text.startswith(start):
        return ""
    at = text.find("\n\n" + start)
    return text[:at].strip() if at > 0 else text


def _label(number: int, q: FormQuestion) -> tuple[str, str | None]:
    """The input's label, and the question as a hint when it is too long for a label."""
    question = one_line(q.question) or "(no question)"
    header = one_line(q.header or "")
    label = f"{number}. {header} — {question}" if header else f"{number}. {question}"
    if len(label) <= MAX_LABEL:
        return label, None
    return f"{number}. {header or clip(question, 150)}", question


def _option(index: int, option: Option) -> dict[str, Any]:
    mark = RECOMMENDED if option.recommended else ""
    label = one_line(option.label) or "(no label)"
    element: dict[str, Any] = {
        "text": plain(mark + clip(label, MAX_OPTION_TEXT - len(mark))),
        "value": value_json({"i": index}),
    }
    description = one_line(option.description or "")
    if description:
        element["description"] = plain(clip(description, MAX_DESCRIPTION))
    return element


def _long_descriptions(q: FormQuestion) -> str | None:
    """The descriptions cut in their options, in full (the hint shows them)."""
    long = [
        f"{one_line(o.label)}: {one_line(o.description or '')}"
        for o in q.options[:MAX_SELECT_OPTIONS]
        if len(one_line(o.description or "")) > MAX_DESCRIPTION
    ]
    return " · ".join(long) if long else None


def with_hint(block: Block, *parts: str | None) -> Block:
    """``block`` with the parts given as its hint (none given: no hint)."""
    text = " ".join(p for p in parts if p)
    if text:
        block["hint"] = plain(clip(text, MAX_HINT))
    return block


def text_input(
    block_id: str, label: str, limit: int, *, multiline: bool, optional: bool, hint: str | None
) -> Block:
    block: Block = {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": plain(label),
        "element": {
            "type": "plain_text_input",
            "action_id": INPUT_ACTION,
            "multiline": multiline,
            "max_length": limit,
        },
    }
    if not optional:
        block["element"]["min_length"] = 1
    return with_hint(block, hint)


def _choice_input(number: int, q: FormQuestion, url: str) -> Block:
    label, long_question = _label(number, q)
    options = [_option(i, o) for i, o in enumerate(q.options[:MAX_SELECT_OPTIONS])]
    element: dict[str, Any] = {
        "type": "multi_static_select" if q.multi else "static_select",
        "action_id": INPUT_ACTION,
        "placeholder": plain("Choose one or more…" if q.multi else "Choose one…"),
        "options": options,
    }
    recommended = next((i for i, o in enumerate(q.options) if o.recommended), None)
    if recommended is not None and recommended < len(options):
        if q.multi:
            element["initial_options"] = [options[recommended]]
        else:
            element["initial_option"] = options[recommended]
    hidden = len(q.options) - len(options)
    block: Block = {
        "type": "input",
        "block_id": choice_block(number),
        "optional": q.takes_text,
        "label": plain(label),
        "element": element,
    }
    return with_hint(  # the short notes first: a long question or descriptions may be cut
        block,
        "Choose one or more." if q.multi else None,
        f"{hidden} more options are in the web inbox: {url or 'see the message'}."
        if hidden > 0
        else None,
        long_question,
        _long_descriptions(q),
    )


def _text_input(number: int, q: FormQuestion, limit: int, longer: str | None) -> Block:
    label, long_question = _label(number, q)
    with_options = bool(q.options)
    first = "Choose above, write here, or both." if with_options else long_question
    return text_input(
        text_block(number),
        f"{number}. Or in your own words" if with_options else label,
        limit,
        multiline=True,
        optional=with_options,
        hint=" ".join(p for p in (first, longer) if p),
    )


def form_inputs(e: Elicitation, *, limit: int, full_limit: int, url: str) -> list[Block]:
    """The form's inputs, question by question (``limit``: what a text box takes; ``full_limit``:
    what the source takes, said when it is more; ``url``: the web inbox's page of it)."""
    longer = (
        f"Up to {limit:,} characters here; a longer answer (up to {full_limit:,}) fits in a "
        "thread reply or the web inbox."
        if full_limit > limit
        else None
    )
    blocks: list[Block] = []
    if any(o.recommended for q in e.form for o in q.options):
        blocks.append(context_block("⭐ marks the recommended option, chosen for you already."))
    for number, q in enumerate(e.form, start=1):
        if q.options:
            blocks.append(_choice_input(number, q, url))
        if q.takes_text:
            blocks.append(_text_input(number, q, limit, longer))
    return blocks


def _example(q: FormQuestion) -> str:
    if not q.options:
        return "your words"
    labels = [one_line(o.label) for o in q.options[: 2 if q.multi else 1]]
    return ", ".join(clip(label, 30) for label in labels)


def form_hint(e: Elicitation) -> str:
    """How to answer a form from the message: the form, or one thread reply."""
    example = "; ".join(f"{n}: {_example(q)}" for n, q in enumerate(e.form[:3], start=1))
    more = "; …" if len(e.form) > 3 else ""  # noqa: PLR2004 - three make the point
    return clip(
        "Use *Answer…* for the form, or reply in this message's thread with each question's "
        f"number and your answer: `{escape(example)}{more}`",
        FORM_HINT,
    )


@dataclass(frozen=True)
class FormPick:
    """One question's inputs as submitted: the chosen options' indexes and the typed text."""

    selected: tuple[int | None, ...] = ()
    """None: a value that names no option (refused as not offered)."""
    text: str | None = None


def _index(option: Any) -> int | None:
    raw = option.get("value") if isinstance(option, Mapping) else None
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    index = value.get("i") if isinstance(value, dict) else None
    return index if isinstance(index, int) and not isinstance(index, bool) else None


def _state(values: Mapping[str, Any], block_id: str) -> Mapping[str, Any]:
    block = values.get(block_id)
    element = block.get(INPUT_ACTION) if isinstance(block, Mapping) else None
    return element if isinstance(element, Mapping) else {}


def _pick(values: Mapping[str, Any], number: int) -> FormPick:
    choice = _state(values, choice_block(number))
    chosen = list(choice.get("selected_options") or [])
    if choice.get("selected_option"):
        chosen.append(choice["selected_option"])
    typed = _state(values, text_block(number)).get("value")
    return FormPick(
        tuple(_index(o) for o in chosen), typed if isinstance(typed, str) and typed else None
    )


def read_form(values: Mapping[str, Any], count: int) -> dict[int, FormPick]:
    """The inputs of a form modal's ``state.values``, by question number (1 to ``count``)."""
    return {n: _pick(values, n) for n in range(1, count + 1)}


def form_answers(e: Elicitation, picks: Mapping[int, FormPick]) -> dict[str, dict[str, Any]]:
    """The picks as the core's answers, by question id (the questions answered at all): option
    labels for indexes (one naming no option stays visibly wrong, for the core to refuse)."""
    answers: dict[str, dict[str, Any]] = {}
    for number, pick in sorted(picks.items()):
        if not 1 <= number <= len(e.form):
            continue
        q = e.form[number - 1]
        selected = [
            q.options[i].label if i is not None and 0 <= i < len(q.options) else f"#{i}"
            for i in pick.selected
        ]
        text = pick.text if pick.text is not None and pick.text.strip() else None
        if selected or text is not None:
            answers[q.id] = {"selected": selected, "text": text}
    return answers


def _form_block_ids(view: Mapping[str, Any], values: Mapping[str, Any]) -> dict[int, list[str]]:
    """The form's input block ids by question number: the view's blocks (else the state's)."""
    blocks = view.get("blocks")
    ids = (
        [
            str(b.get("block_id"))
            for b in blocks
            if isinstance(b, Mapping) and b.get("type") == "input"
        ]
        if isinstance(blocks, list)
        else list(values)
    )
    found: dict[int, list[str]] = {}
    for block_id in ids:
        prefix, _, rest = block_id.partition(f"{FORM_BLOCK}.")
        number, _, _ = rest.partition(".")
        if not prefix and number.isdigit():
            found.setdefault(int(number), []).append(block_id)
    return found


def form_errors(view: Mapping[str, Any], limit: Any) -> dict[str, str]:
    """Checks before the ack, on their input: every question answered, no text over ``limit``."""
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    values = values if isinstance(values, Mapping) else {}
    errors: dict[str, str] = {}
    for number, ids in sorted(_form_block_ids(view, values).items()):
        pick = _pick(values, number)
        text = text_block(number)
        if pick.text is not None and isinstance(limit, int) and len(pick.text) > limit:
            errors[text] = f"Your answer is {len(pick.text):,} characters; the limit is {limit:,}."
        elif not pick.selected and (pick.text is None or not pick.text.strip()):
            if choice_block(number) in ids:
                errors[choice_block(number)] = (
                    "Choose an option, or write an answer below."
                    if text in ids
                    else "Choose an option."
                )
            else:
                errors[text] = "Write an answer; it cannot be empty."
    return errors


def questions_of(meta: Mapping[str, Any]) -> int | None:
    """How many questions a reply modal's form has (its metadata's ``"f"``); None: no form."""
    count = meta.get("f")
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None

"""Block Kit and modal limits as Slack enforces them, checked the way the fake Slack API checks
every message and view it is given (:mod:`tests.slack_fake`); unit tests call the same checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
MAX_ID = 255
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_TEXT_OBJECT = 3000
MAX_OPTIONS = 100
MAX_OPTION_TEXT = 75
MAX_OPTION_VALUE = 150
MAX_PLACEHOLDER = 150
MAX_MESSAGE_TEXT = 40_000
MAX_TOTAL_TEXT = 12_000
"""Slack rejects messages whose blocks hold about this much text in all (bolt-js #2509, #2867)."""
MAX_MODAL_BLOCKS = 100
MAX_MODAL_TITLE = 24
MAX_PRIVATE_METADATA = 3000
MAX_INPUT_LENGTH = 3000
MAX_LABEL = 2000
_SELECTS = ("static_select", "multi_static_select")


def _text_object(obj: Any, where: str, limit: int, problems: list[str]) -> int:
    """Check a text object; returns its length (0 when malformed)."""
    if not isinstance(obj, Mapping) or obj.get("type") not in ("plain_text", "mrkdwn"):
        problems.append(f"{where}: must be a plain_text or mrkdwn text object")
        return 0
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        problems.append(f"{where}.text: must be a non-empty string")
        return 0
    if len(text) > limit:
        problems.append(f"{where}.text: {len(text)} characters, more than {limit}")
    return len(text)


def _plain(obj: Any, where: str, limit: int, problems: list[str]) -> int:
    if isinstance(obj, Mapping) and obj.get("type") != "plain_text":
        problems.append(f"{where}: must be plain_text")
    return _text_object(obj, where, limit, problems)


def _check_id(value: Any, where: str, problems: list[str]) -> None:
    if value is not None and (not isinstance(value, str) or not value or len(value) > MAX_ID):
        problems.append(f"{where}: must be a string of 1 to {MAX_ID} characters")


def _element(el: Any, where: str, problems: list[str]) -> int:
    if not isinstance(el, Mapping):
        problems.append(f"{where}: must be an object")
        return 0
    kind = el.get("type")
    _check_id(el.get("action_id"), f"{where}.action_id", problems)
    if kind == "button":
        total = _plain(el.get("text"), f"{where}.text", MAX_BUTTON_TEXT, problems)
        value = el.get("value")
        if value is not None and (not isinstance(value, str) or len(value) > MAX_BUTTON_VALUE):
            problems.append(f"{where}.value: must be a string of at most {MAX_BUTTON_VALUE}")
        url = el.get("url")
        if url is not None and (not isinstance(url, str) or len(url) > MAX_URL):
            problems.append(f"{where}.url: must be a string of at most {MAX_URL}")
        if el.get("style") not in (None, "primary", "danger"):
            problems.append(f"{where}.style: must be primary or danger")
        return total
    if kind in _SELECTS:
        total = 0
        if "placeholder" in el:
            total += _plain(el["placeholder"], f"{where}.placeholder", MAX_PLACEHOLDER, problems)
        options = el.get("options")
        if not isinstance(options, list) or not 1 <= len(options) <= MAX_OPTIONS:
            problems.append(f"{where}.options: must hold 1 to {MAX_OPTIONS} options")
            return total
        for i, option in enumerate(options):
            at = f"{where}.options[{i}]"
            if not isinstance(option, Mapping):
                problems.append(f"{at}: must be an object")
                continue
            total += _plain(option.get("text"), f"{at}.text", MAX_OPTION_TEXT, problems)
            if option.get("description") is not None:
                total += _plain(
                    option["description"], f"{at}.description", MAX_OPTION_TEXT, problems
                )
            value = option.get("value")
            if not isinstance(value, str) or not value or len(value) > MAX_OPTION_VALUE:
                problems.append(f"{at}.value: must be a string of 1 to {MAX_OPTION_VALUE}")
        values = [o.get("value") for o in options if isinstance(o, Mapping)]
        if len(values) != len(set(map(str, values))):
            problems.append(f"{where}.options: option values must be unique")
        initial = list(el.get("initial_options") or [])
        if el.get("initial_option") is not None:
            initial.append(el["initial_option"])
        if kind == "static_select" and "initial_options" in el:
            problems.append(f"{where}.initial_options: only a multi-select has them")
        for i, chosen in enumerate(initial):
            if chosen not in options:
                problems.append(f"{where}.initial_option[{i}]: must match one of its options")
        return total
    if kind in ("overflow", "datepicker", "image", "users_select", "conversations_select"):
        return 0
    problems.append(f"{where}.type: unsupported element {kind!r}")
    return 0


def _block(block: Any, where: str, problems: list[str]) -> int:
    """Check one block; returns the length of its text."""
    if not isinstance(block, Mapping):
        problems.append(f"{where}: must be an object")
        return 0
    _check_id(block.get("block_id"), f"{where}.block_id", problems)
    kind = block.get("type")
    total = 0
    if kind == "header":
        total += _plain(block.get("text"), f"{where}.text", MAX_HEADER_TEXT, problems)
    elif kind == "section":
        text, fields = block.get("text"), block.get("fields")
        if text is None and not fields:
            problems.append(f"{where}: needs text or fields")
        if text is not None:
            total += _text_object(text, f"{where}.text", MAX_SECTION_TEXT, problems)
        if fields is not None:
            if not isinstance(fields, list) or len(fields) > MAX_FIELDS:
                problems.append(f"{where}.fields: at most {MAX_FIELDS}")
            else:
                for i, f in enumerate(fields):
                    total += _text_object(f, f"{where}.fields[{i}]", MAX_FIELD_TEXT, problems)
        if block.get("accessory") is not None:
            total += _element(block["accessory"], f"{where}.accessory", problems)
    elif kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_CONTEXT_ELEMENTS:
            problems.append(f"{where}.elements: must hold 1 to {MAX_CONTEXT_ELEMENTS}")
        else:
            for i, el in enumerate(elements):
                if isinstance(el, Mapping) and el.get("type") == "image":
                    continue
                total += _text_object(el, f"{where}.elements[{i}]", MAX_TEXT_OBJECT, problems)
    elif kind == "actions":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 1 <= len(elements) <= MAX_ACTIONS_ELEMENTS:
            problems.append(f"{where}.elements: must hold 1 to {MAX_ACTIONS_ELEMENTS}")
        else:
            for i, el in enumerate(elements):
                total += _element(el, f"{where}.elements[{i}]", problems)
    elif kind not in ("divider", "image", "rich_text"):
        problems.append(f"{where}.type: unsupported block {kind!r}")
    return total


def block_kit_problems(blocks: Any, text: Any = None) -> list[str]:
    """Every Block Kit limit a message breaks (empty: Slack would take it)."""
    problems: list[str] = []
    if isinstance(text, str) and len(text) > MAX_MESSAGE_TEXT:
        problems.append(f"text: {len(text)} characters, more than {MAX_MESSAGE_TEXT}")
    if blocks is None:
        return problems
    if not isinstance(blocks, list):
        return [*problems, "blocks: must be an array"]
    if len(blocks) > MAX_BLOCKS:
        problems.append(f"blocks: {len(blocks)} blocks, more than {MAX_BLOCKS}")
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, Mapping) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("blocks: block_id values must be unique")
    for i, block in enumerate(blocks):
        _block(block, f"blocks[{i}]", problems)
    return problems


def block_text_length(blocks: Any) -> int:
    """All the text in the blocks, in code points (what the cumulative limit counts)."""
    probe: list[str] = []
    return sum(_block(b, "", probe) for b in blocks) if isinstance(blocks, list) else 0


def _input_block(block: Mapping[str, Any], where: str, problems: list[str]) -> None:
    _plain(block.get("label"), f"{where}.label", MAX_LABEL, problems)
    if block.get("hint") is not None:
        _plain(block.get("hint"), f"{where}.hint", MAX_LABEL, problems)
    el = block.get("element")
    if not isinstance(el, Mapping):
        problems.append(f"{where}.element: required")
        return
    _check_id(el.get("action_id"), f"{where}.element.action_id", problems)
    if el.get("type") == "plain_text_input":
        for name in ("max_length", "min_length"):
            value = el.get(name)
            low = 1 if name == "max_length" else 0
            if value is not None and (not isinstance(value, int) or not low <= value <= 3000):
                problems.append(f"{where}.element.{name}: must be {low} to {MAX_INPUT_LENGTH}")
    elif el.get("type") in _SELECTS:
        _element(el, f"{where}.element", problems)
    else:
        problems.append(f"{where}.element.type: unsupported {el.get('type')!r}")


def view_problems(view: Any) -> list[str]:
    """Every modal limit a ``views.open`` view breaks (empty: Slack would open it)."""
    if not isinstance(view, Mapping) or view.get("type") != "modal":
        return ["view.type: must be modal"]
    problems: list[str] = []
    _plain(view.get("title"), "view.title", MAX_MODAL_TITLE, problems)
    for name in ("submit", "close"):
        if view.get(name) is not None:
            _plain(view[name], f"view.{name}", MAX_MODAL_TITLE, problems)
    _check_id(view.get("callback_id"), "view.callback_id", problems)
    meta = view.get("private_metadata")
    if meta is not None and (not isinstance(meta, str) or len(meta) > MAX_PRIVATE_METADATA):
        problems.append(f"view.private_metadata: at most {MAX_PRIVATE_METADATA} characters")
    blocks = view.get("blocks")
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= MAX_MODAL_BLOCKS:
        return [*problems, f"view.blocks: must hold 1 to {MAX_MODAL_BLOCKS} blocks"]
    block_ids = [b.get("block_id") for b in blocks if isinstance(b, Mapping) and b.get("block_id")]
    if len(block_ids) != len(set(block_ids)):
        problems.append("view.blocks: block_id values must be unique")
    has_input = False
    for i, block in enumerate(blocks):
        if isinstance(block, Mapping) and block.get("type") == "input":
            has_input = True
            _check_id(block.get("block_id"), f"view.blocks[{i}].block_id", problems)
            _input_block(block, f"view.blocks[{i}]", problems)
        else:
            _block(block, f"view.blocks[{i}]", problems)
    if has_input and view.get("submit") is None:
        problems.append("view.submit: required with input blocks")
    return problems

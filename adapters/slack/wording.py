"""How a message says what became of its question, in :mod:`bot.domain.wording`'s words, escaped.
Pure. "Answered" only once the upstream accepted it; the thread note claims no acceptance, so it
never needs taking back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from adapters.slack.markup.blocks import Block, clip, escape, section_block
from bot.domain.model import Answer, Status
from bot.domain.ports import PromptView
from bot.domain.records import Writeback, WritebackState
from bot.domain.views import writeback_note
from bot.domain.wording import Result, answered_note, result_sentence

RESULT_TEXT = 1500
NOTE_TEXT = 1200  # the write-back note (what the upstream said, escaped)

_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_CUT = {"who": 100, "via": 40, "upstream": 100, "reason": RESULT_TEXT - 100}


def _filler(result: Result) -> Callable[[str, str], str]:
    """How a value goes into mrkdwn: escaped and cut; a Slack person with no name known as a
    mention."""

    def fill(name: str, value: str) -> str:
        if name == "who" and not result.has_name and result.respondent is not None:
            platform, _, user = result.respondent.partition(":")
            if platform == "slack" and _SLACK_USER.match(user):
                return f"<@{user}>"
        return clip(escape(value), _CUT.get(name, RESULT_TEXT))

    return fill


def result_line(view: PromptView) -> str:
    """The outcome as one mrkdwn line (:data:`bot.domain.wording.RESULT_LINES`)."""
    result = view.result
    if result is None:
        return "Closed."
    return result_sentence(result, _filler(result))


def note_block(view: PromptView) -> Block | None:
    """The ⚠️ sentence about a write-back the upstream refused, as a section; None otherwise."""
    note = writeback_note(view)
    if note is None:
        return None
    return section_block(clip(escape(note), NOTE_TEXT))


def closed_blocks(view: PromptView) -> list[Block]:
    """What a closed message ends with: the result, then the ⚠️ note when the upstream refused."""
    note = note_block(view)
    return [section_block(result_line(view)), *([note] if note is not None else [])]


def thread_note(view: PromptView, answer: Answer | None = None) -> str:
    """Who answered what, on its way; never "Answered" (the upstream may refuse, and this note
    is not rewritten). ``answer``: just recorded, when ``view`` was read before it."""
    if answer is not None:
        view = just_answered(view, answer)
    result = view.result
    if view.status is not Status.ANSWERED or view.answer is None or result is None:
        return result_line(view)
    return answered_note(result, _filler(result))


def just_answered(view: PromptView, answer: Answer) -> PromptView:
    """``view`` (read before the answer) as it stands once ``answer`` is recorded: answered, its
    write-back on its way (the next round), whatever the view read before said about it."""
    previous = view.writeback
    round_ = 1 if previous is None else previous.round + 1
    return replace(
        view,
        status=Status.ANSWERED,
        answer=answer,
        writeback=Writeback(WritebackState.SENDING, round_),
    )

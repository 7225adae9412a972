"""What one Slack click costs the store (see :mod:`tests.integration.slack.rig`): the click on
an option button reads its elicitation once, and records the answer in the write after that read
(issue 22: it read it twice, in five store calls, before the answer was recorded)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest

from adapters.slack.render import REPLY_ACTION
from bot.domain.model import ElicitationKey, Status
from tests.integration.slack.rig import ALICE, Rig, action_button, button

Message = dict[str, Any]


def count_store_calls(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of a public store method from here on, by name, in order."""
    calls: list[str] = []
    for name, method in inspect.getmembers(type(rig.store), inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _method(rig.store, *args, **kwargs)

        monkeypatch.setattr(rig.store, name, counted)
    return calls


async def clicked(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, case: str, pick: Callable[[Message], Message]
) -> tuple[ElicitationKey, Message, list[str]]:
    """A fixture posted, then one click on the button ``pick`` finds: (key, message, the store
    calls of the click, all of it handled)."""
    key = await rig.intake_fixture(case)
    await rig.drain()
    message = rig.message(key)
    calls = count_store_calls(rig, monkeypatch)
    response = await rig.click(message, pick(message))
    await rig.slack.idle()
    assert response.status_code == 200
    return key, message, calls


async def test_a_click_reads_its_elicitation_once_before_the_answer_is_recorded(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, message, calls = await clicked(
        rig, monkeypatch, "approval-request", lambda m: button(m, "allow_once")
    )

    assert "record_answer" in calls, calls
    before = calls[: calls.index("record_answer") + 1]
    print(f"store calls of one click, up to the answer: {len(before)}: {before}")
    print(f"store calls of the whole click: {len(calls)}: {calls}")
    assert before.count("get") == 1, before
    assert "timelines" not in before, before
    assert before == ["record_raw", "get", "record_answer"]
    assert await rig.status(key) is Status.ANSWERED
    # The thread note is said from the view the one read gave (with the answer), not a new read.
    [note] = rig.thread(message)
    assert note["text"].startswith(f"📨 {ALICE.lower()} answered — "), note["text"]
    assert note["text"].endswith("; sending it to SuperPipeline.")


async def test_reply_opens_its_form_from_the_one_read(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, _, calls = await clicked(
        rig, monkeypatch, "no-options-no-question", lambda m: action_button(m, REPLY_ACTION)
    )

    print(f"store calls of a Reply… click: {len(calls)}: {calls}")
    assert calls == ["record_raw", "get", "handled_raw"]
    [modal] = rig.fake.views()
    assert key in json.loads(modal["private_metadata"]).values(), modal["private_metadata"]

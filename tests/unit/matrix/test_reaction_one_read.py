"""A Matrix reaction reads its elicitation once (issue 22): the core reads it, hands the adapter
the view to translate the reaction against (an :class:`~bot.domain.actions.OnView`), and judges;
the copy's subject (revision, digest) as this process sent it comes with the choice, so a
reaction on a copy of an older digest is refused (rule 2). On the real service and SQLite store,
counting the store's calls as the Slack click test does."""

from __future__ import annotations

import inspect
from typing import Any, cast

import pytest

from adapters.matrix import translate as inbound
from adapters.matrix.chat import MatrixChat
from adapters.matrix.intake.handling import RoomEvents
from adapters.matrix.intake.reactions import KEYCAPS
from bot.domain.model import ElicitationKey, People, Route, Status
from bot.domain.ports import Elicitations
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.contract.test_store import make
from tests.unit.matrix.test_handlers import ALICE, PROMPT, ROOM, Chat, settled

MATRIX = f"matrix:{ROOM}"


class Posted(Chat):
    """The fake chat, having just posted ``PROMPT`` for ``key`` (no delivery ref read)."""

    def __init__(self, key: ElicitationKey, **fields: Any) -> None:
        super().__init__(**fields)
        self.key = key

    def posted_key(self, event_id: str) -> ElicitationKey | None:
        return self.key if event_id == PROMPT else None


def count_store_calls(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name, method in inspect.getmembers(type(store), inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _method(store, *args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    return calls


async def asked(store: SqlStore) -> tuple[Service, ElicitationKey]:
    svc = Service(store, FakeClock(), People(), [Route(destinations=(MATRIX,))])
    e = make(svc.clock.now(), "eli_matrix", subject_expires=3600)
    [outcome] = await svc.intake([Inbound("test", "in-1", e, {})])
    assert outcome.result == "accepted"
    return svc, outcome.key


async def test_a_reaction_reads_its_elicitation_once_before_the_answer_is_recorded(
    sqlite_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, key = await asked(sqlite_store)
    chat = Posted(key)
    events = RoomEvents(cast(MatrixChat, chat), cast(Elicitations, svc), bots=frozenset())
    calls = count_store_calls(sqlite_store, monkeypatch)

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[0]))
    await settled(events)

    assert "record_answer" in calls, calls
    before = calls[: calls.index("record_answer") + 1]
    print(f"store calls of one reaction, up to the answer: {len(before)}: {before}")
    print(f"store calls of the whole reaction: {len(calls)}: {calls}")
    assert before.count("get") == 1, before
    assert before == ["get", "first_time", "record_answer"], before
    stored = await sqlite_store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED
    [(_, notice, _)] = chat.notices
    assert notice.user == f"matrix:{ALICE}"


async def test_a_reaction_on_a_copy_sent_with_an_older_digest_is_refused(
    sqlite_store: SqlStore,
) -> None:
    svc, key = await asked(sqlite_store)
    stored = await sqlite_store.get(key)
    assert stored is not None
    e = stored.elicitation
    assert e.subject is not None
    chat = Posted(key, subjects={PROMPT: (1, e.subject.digest)})  # as this process sent it
    events = RoomEvents(cast(MatrixChat, chat), cast(Elicitations, svc), bots=frozenset())
    subject = e.subject.model_copy(update={"digest": "sha256:77aa"})  # revision stays 1
    changed = e.model_copy(update={"subject": subject, "question": "May I run it on prod?"})
    [outcome] = await svc.intake([Inbound("test", "in-2", changed, {})])
    assert outcome.result == "updated"

    await events.handle(ROOM, inbound.Reaction("$r", ALICE, PROMPT, KEYCAPS[0]))
    await settled(events)

    [(_, notice, _)] = chat.notices
    print("the notice:", notice.text)
    assert notice.text.endswith(
        "The request changed since this message was shown; answer on the updated message."
    ), notice.text
    again = await sqlite_store.get(key)
    assert again is not None
    assert again.status is Status.PENDING
    # The copy edited with the new digest: approving on it counts (Bob: Alice's keycap counted
    # once on this question already).
    chat.subjects[PROMPT] = (1, "sha256:77aa")
    await events.handle(ROOM, inbound.Reaction("$r2", "@bob:localhost", PROMPT, KEYCAPS[0]))
    await settled(events)
    answered = await sqlite_store.get(key)
    assert answered is not None
    assert answered.status is Status.ANSWERED
    assert answered.answer is not None
    assert answered.answer.option_ids == ("yes",)
    assert answered.answer.subject_digest == "sha256:77aa"


async def test_a_thread_reply_under_a_copy_of_an_older_digest_cannot_approve(
    sqlite_store: SqlStore,
) -> None:
    """The same for a thread reply naming the approving option ("1"): the prompt's subject as
    this process sent it comes with the reply."""
    svc, key = await asked(sqlite_store)
    stored = await sqlite_store.get(key)
    assert stored is not None
    e = stored.elicitation
    assert e.subject is not None
    chat = Posted(key, subjects={PROMPT: (1, e.subject.digest)})
    events = RoomEvents(cast(MatrixChat, chat), cast(Elicitations, svc), bots=frozenset())
    subject = e.subject.model_copy(update={"digest": "sha256:77aa"})
    [outcome] = await svc.intake(
        [Inbound("test", "in-2", e.model_copy(update={"subject": subject}), {})]
    )
    assert outcome.result == "updated"

    await events.handle(ROOM, inbound.Reply("$t", ALICE, PROMPT, "1", threaded=True))
    await settled(events)

    [(_, notice, _)] = chat.notices
    assert notice.text.endswith("answer on the updated message."), notice.text
    after = await sqlite_store.get(key)
    assert after is not None
    assert after.status is Status.PENDING

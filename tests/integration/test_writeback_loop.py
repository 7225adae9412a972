"""The write-back loop closed (issue 13, DESIGN rule 5's second half), on every store.

An answer is "Answered" on the copies only once its upstream accepted it: until then the web
inbox says "Sending…" and the chat copies are rewritten once, after the upstream answered (or
when a first attempt did not go through). A permanent refusal reopens the question where the
upstream is still open (or marks it failed where it is not), rewrites every copy with what went
wrong, tells the person who answered privately in their copy's thread, writes one audit row and
counts one refusal in ``/metrics``; the next answer carries its own idempotency key.
Each test runs on SQLite and PostgreSQL (the ``store`` fixture of ``tests/conftest.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import Status
from bot.domain.records import DeadlineKind, NoticeKind, WritebackState
from bot.domain.store import Store
from bot.domain.views import sending, writeback_note
from bot.outbox import MAX_ATTEMPTS, Dispatcher, writeback_key
from bot.service import Service
from tests.conftest import FakeClock
from tests.fakes import FakeChat, FakeSink
from tests.integration.test_outbox import (
    ALICE,
    BOB,
    C1,
    C2,
    PEOPLE,
    ROUTE,
    Rig,
    attempt,
    audit,
    outbox,
    posted,
)

REFUSAL = "SuperPipeline refused the answer (HTTP 422): option allow_once is retired."


def make_rig(db: Store, clock: FakeClock, sink: FakeSink, registry: CollectorRegistry) -> Rig:
    chat = FakeChat("slack")
    dispatcher = Dispatcher(
        db,
        clock,
        {"slack": chat},
        {"superpipeline": sink},
        lambda key: f"http://127.0.0.1:8787/#{key}",
        registry=registry,
    )
    service = Service(db, clock, PEOPLE, [ROUTE], on_change=dispatcher.wake)
    return Rig(db, clock, chat, service, dispatcher)


@dataclass
class Loop:
    """A rig whose sink can be told to fail, and the registry ``/metrics`` would serve."""

    rig: Rig
    sink: FakeSink
    registry: CollectorRegistry


@pytest.fixture
def loop(store: Store, clock: FakeClock) -> Loop:
    sink, registry = FakeSink(), CollectorRegistry()
    return Loop(make_rig(store, clock, sink, registry), sink, registry)


def refused_count(registry: CollectorRegistry, outcome: str) -> float:
    value = registry.get_sample_value(
        "elicitbot_writebacks_refused_total", {"source": "superpipeline", "outcome": outcome}
    )
    return value or 0.0


async def test_copies_say_answered_only_after_the_upstream_accepted(loop: Loop) -> None:
    rig, sink = loop.rig, loop.sink
    key = await posted(rig)
    assert (await rig.service.answer(key, attempt(ALICE, "allow_once"))).won

    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert (stored.writeback.state, stored.writeback.round) == (WritebackState.SENDING, 1)
    view = await rig.service.view(key)
    assert view is not None
    assert sending(view)  # the web inbox says "Sending…"
    assert await outbox(rig.store, key, "update") == []  # no copy says "Answered" yet

    await rig.dispatcher.drain()

    assert [d.idempotency_key for d in sink.delivered] == [writeback_key(key)]
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert stored.writeback.state is WritebackState.ACCEPTED
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]  # one update each
    assert all(not sending(u.view) and u.view.status is Status.ANSWERED for u in rig.chat.updated)


async def test_a_slow_upstream_puts_sending_on_the_copies_then_answered(loop: Loop) -> None:
    rig, sink = loop.rig, loop.sink
    key = await posted(rig)
    sink.fail_next(1, TransientDeliveryError("HTTP 503"))
    assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won

    await rig.dispatcher.drain()
    assert len(rig.chat.updated) == 2
    assert all(sending(u.view) for u in rig.chat.updated)  # "Sending…", not "Answered"

    rig.clock.advance(60)
    await rig.dispatcher.drain()
    assert sink.attempts == [writeback_key(key)] * 2  # the same key on the retry
    assert len(rig.chat.updated) == 4
    assert all(not sending(u.view) for u in rig.chat.updated[2:])


async def test_a_refused_answer_reopens_the_question_says_so_everywhere_and_tells_alice(
    loop: Loop,
) -> None:
    rig, sink, registry = loop.rig, loop.sink, loop.registry
    key = await posted(rig)
    sink.fail_next(1, PermanentDeliveryError(REFUSAL))
    assert (await rig.service.answer(key, attempt(ALICE, "allow_once"))).won

    await rig.dispatcher.drain()

    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert (stored.status, stored.answer) == (Status.PENDING, None)
    assert stored.writeback.state is WritebackState.REFUSED
    assert stored.writeback.reopened
    assert stored.writeback.refused is not None
    assert stored.writeback.refused.respondent == ALICE.key
    # Every copy is open again and says what went wrong.
    assert sorted(u.destination for u in rig.chat.updated) == [C1, C2]
    for u in rig.chat.updated:
        assert u.view.status is Status.PENDING
        note = writeback_note(u.view)
        assert note is not None
        assert note.startswith(
            "⚠️ Alice’s answer (Allow once) was not accepted by SuperPipeline: "  # noqa: RUF001
        )
        assert "option allow_once is retired" in note
        assert note.endswith("The question is open again: answer it again.")
    # Alice is told privately, in the thread of the copy she answered in.
    [told] = rig.chat.notified
    assert (told.destination, told.notice.user, told.notice.kind) == (
        C1,
        ALICE.key,
        NoticeKind.REFUSAL,
    )
    assert told.notice.thread is not None
    assert told.notice.text.startswith(
        "Your answer (Allow once) was not accepted by SuperPipeline: SuperPipeline refused"
    )
    # One audit row, one metric increment, the expiry planned again.
    [row] = await audit(rig.store, key, "writeback_refused")
    assert row.detail is not None
    assert row.detail["reopened"] is True
    assert await audit(rig.store, key, "writeback_failed") == []
    assert refused_count(registry, "reopened") == 1
    kinds = [d.kind for d in await rig.store.deadlines(key) if d.state == "pending"]
    assert DeadlineKind.REMIND in kinds or kinds == [] or DeadlineKind.EXPIRE in kinds

    # Answerable again: Bob's answer is round 2, with its own idempotency key.
    assert (await rig.service.answer(key, attempt(BOB, "deny", via=C2))).won
    await rig.dispatcher.drain()
    assert [d.idempotency_key for d in sink.delivered] == [writeback_key(key, 2)]
    assert writeback_key(key, 2) != writeback_key(key)
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert (stored.status, stored.writeback.state) == (Status.ANSWERED, WritebackState.ACCEPTED)
    assert stored.answer is not None
    assert stored.answer.respondent == BOB.key
    view = await rig.service.view(key)
    assert view is not None
    assert writeback_note(view) is None


async def test_a_refusal_from_an_upstream_that_closed_the_question_marks_it_failed(
    loop: Loop,
) -> None:
    rig, sink, registry = loop.rig, loop.sink, loop.registry
    key = await posted(rig)
    closed = "The question was resolved upstream by usr_bob before this answer arrived."
    sink.fail_next(1, PermanentDeliveryError(closed, reopen=False))
    assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won

    await rig.dispatcher.drain()

    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert stored.status is Status.ANSWERED  # not reopened: closed there too
    assert (stored.writeback.state, stored.writeback.reopened) == (WritebackState.REFUSED, False)
    for u in rig.chat.updated:
        note = writeback_note(u.view)
        assert note == f"⚠️ The answer (Deny) was not accepted by SuperPipeline: {closed}"
    [told] = rig.chat.notified
    assert told.notice.text.endswith(
        "The question is closed there, so it cannot be answered again here."
    )
    assert len(await audit(rig.store, key, "writeback_refused")) == 1
    assert refused_count(registry, "failed") == 1
    refusal = (await rig.service.answer(key, attempt(BOB, "deny", via=C2))).result
    assert getattr(refusal, "code", None) == "already_answered"


async def test_an_upstream_never_reached_is_said_so_not_called_a_refusal(loop: Loop) -> None:
    rig, sink = loop.rig, loop.sink
    key = await posted(rig)
    sink.fail_next(MAX_ATTEMPTS, TransientDeliveryError("HTTP 503"))
    assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won

    for _ in range(MAX_ATTEMPTS + 1):
        await rig.dispatcher.drain()
        rig.clock.advance(3600)

    assert len(sink.attempts) == MAX_ATTEMPTS
    stored = await rig.store.get(key)
    assert stored is not None
    assert stored.writeback is not None
    assert (stored.writeback.state, stored.writeback.gave_up) == (WritebackState.REFUSED, True)
    assert stored.status is Status.ANSWERED  # not known to be refused: nobody can answer again
    note = writeback_note(rig.chat.updated[-1].view)
    assert note is not None
    assert note.startswith("⚠️ SuperPipeline could not be reached to deliver the answer (Deny)")
    [told] = rig.chat.notified
    assert "It may not have arrived" in told.notice.text
    assert len(await audit(rig.store, key, "writeback_gave_up")) == 1
    assert await audit(rig.store, key, "writeback_refused") == []

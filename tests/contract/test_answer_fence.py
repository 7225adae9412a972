"""The answer write is fenced on the version the judgement read, on SQLite and PostgreSQL: a new
revision of the approval subject that lands between :meth:`Service.act`'s read and its write makes
the write lose, and the judgement runs again on the new revision (the race made deterministic: the
revision is taken in by the store's ``record_answer`` itself, just before it writes)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.domain.actions import Choose, Outcome, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Elicitation, Identity, People, RefusalCode, Route, Status
from bot.domain.records import RecordResult, StoredElicitation
from bot.domain.store import Store
from bot.service import Inbound, Service
from tests.conftest import FakeClock
from tests.contract.test_store import SLACK, make

ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


def revised(e: Elicitation) -> Elicitation:
    """The request's next revision: another subject digest, what the approval is about changed."""
    assert e.subject is not None
    subject = e.subject.model_copy(update={"revision": 2, "digest": "sha256:11ee"})
    return e.model_copy(update={"subject": subject, "question": "May I run it on prod?"})


async def racing(
    store: Store, monkeypatch: pytest.MonkeyPatch, svc: Service, e: Elicitation
) -> list[int | None]:
    """Make the first answer write meet a revision taken in after the read; returns the version
    each ``record_answer`` was fenced on."""
    write = store.record_answer
    fenced: list[int | None] = []

    async def revision_first(*args: Any, **kwargs: Any) -> RecordResult:
        if not fenced:
            [outcome] = await svc.intake([Inbound("ce:/test", "ev-2", revised(e), {})])
            assert outcome.result == "updated"
        fenced.append(kwargs.get("version"))
        return await write(*args, **kwargs)

    monkeypatch.setattr(store, "record_answer", revision_first)
    return fenced


async def asked(store: Store, clock: FakeClock) -> tuple[Service, Elicitation]:
    svc = Service(store, clock, People(), [Route(destinations=(SLACK,))])
    e = make(clock.now(), "eli_fence", subject_expires=3600)
    [outcome] = await svc.intake([Inbound("ce:/test", "ev-1", e, {})])
    assert outcome.result == "accepted"
    return svc, e


async def chosen(
    store: Store, monkeypatch: pytest.MonkeyPatch, option: str
) -> tuple[Outcome, list[int | None], StoredElicitation]:
    """``option`` chosen on revision 1 while revision 2 lands between the read and the write:
    (the outcome, the versions the writes were fenced on, the elicitation as stored after)."""
    clock = FakeClock()
    svc, e = await asked(store, clock)
    fenced = await racing(store, monkeypatch, svc, e)
    clock.advance(5)
    outcome = await svc.act(Choose(e.key, ALICE, SLACK, (option,), revision=1, shown=SHOWN_WHOLE))
    stored = await store.get(e.key)
    assert stored is not None
    return outcome, fenced, stored


async def test_approving_the_revision_read_loses_to_a_new_one_and_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, fenced, stored = await chosen(store, monkeypatch, "yes")

    assert outcome.kind is OutcomeKind.REFUSED
    assert outcome.refusal is not None
    assert outcome.refusal.code is RefusalCode.STALE_REVISION
    assert fenced == [1]  # one write, on the version read; the second judgement refused
    assert (stored.status, stored.answer, stored.version) == (Status.PENDING, None, 2)
    assert stored.elicitation.subject is not None
    assert stored.elicitation.subject.revision == 2
    assert await store.count("answer") == 0
    audit = [(a.action, a.code) for a in await store.audit(stored.elicitation.key)]
    assert audit == [("intake", None), ("revised", None), ("refusal", "stale_revision")]


async def test_a_rejection_that_lost_to_a_revision_is_judged_again_and_wins(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, fenced, stored = await chosen(store, monkeypatch, "no")

    assert outcome.kind is OutcomeKind.ANSWERED
    assert fenced == [1, 2]  # lost on the version read, won on the revision's
    assert stored.status is Status.ANSWERED
    assert stored.answer is not None
    assert stored.answer.option_ids == ("no",)
    assert await store.count("answer") == 1


def redigested(e: Elicitation) -> Elicitation:
    """The same revision with another subject digest: the content changed, the revision did not."""
    assert e.subject is not None
    subject = e.subject.model_copy(update={"digest": "sha256:22ff"})
    return e.model_copy(update={"subject": subject, "question": "May I run it on prod?"})


async def test_approving_the_digest_read_loses_to_a_new_digest_on_the_same_revision(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 2 by digest, through the store: the surface showed digest A; digest B (same
    revision) lands between the read and the write; the approval is judged again and refused."""
    clock = FakeClock()
    svc, e = await asked(store, clock)
    assert e.subject is not None
    shown_digest = e.subject.digest
    write = store.record_answer
    fenced: list[int | None] = []

    async def digest_first(*args: Any, **kwargs: Any) -> RecordResult:
        if not fenced:
            [outcome] = await svc.intake([Inbound("ce:/test", "ev-2", redigested(e), {})])
            assert outcome.result == "updated"
        fenced.append(kwargs.get("version"))
        return await write(*args, **kwargs)

    monkeypatch.setattr(store, "record_answer", digest_first)
    clock.advance(5)
    choose = Choose(e.key, ALICE, SLACK, ("yes",), 1, shown_digest, shown=SHOWN_WHOLE)
    outcome = await svc.act(choose)

    assert outcome.kind is OutcomeKind.REFUSED
    assert outcome.refusal is not None
    assert outcome.refusal.code is RefusalCode.STALE_REVISION
    assert fenced == [1]
    stored = await store.get(e.key)
    assert stored is not None
    assert (stored.status, stored.answer) == (Status.PENDING, None)
    assert stored.elicitation.subject is not None
    assert (stored.elicitation.subject.revision, stored.elicitation.subject.digest) == (
        1,
        "sha256:22ff",
    )
    assert await store.count("answer") == 0
    # On the digest it shows now, the same approval is accepted.
    now = Choose(e.key, ALICE, SLACK, ("yes",), 1, "sha256:22ff", shown=SHOWN_WHOLE)
    assert (await svc.act(now)).kind is OutcomeKind.ANSWERED

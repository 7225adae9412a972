"""A quorum's votes in the store (answer rule 9), on SQLite and PostgreSQL: read with the
elicitation, recorded only while nothing changed since that read, and the last vote makes one
answer carrying every approver, even when two last votes race on two replicas."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.domain.actions import Choose, Outcome, OutcomeKind
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import ElicitationKey, Identity, People, RefusalCode, Route, Status
from bot.domain.quorum import Vote
from bot.domain.store import Store
from bot.service import Inbound, Service
from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.contract.test_store import make

ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")
BOB = Identity(platform="slack", user="U0BOB", display_name="Bob")
CAROL = Identity(platform="web", user="carol", display_name="Carol")
APPROVERS = ("slack:U0ALICE", "slack:U0BOB", "web:carol")


def service(store: Store, clock: FakeClock, quorum: int = 2) -> Service:
    return Service(store, clock, People(), [Route(approvers=APPROVERS, quorum=quorum)])


def choose(key: ElicitationKey, who: Identity, option: str = "yes") -> Choose:
    return Choose(key, who, "slack:C0APPROVALS" if who.platform == "slack" else "web", (option,),
                  shown=SHOWN_WHOLE)  # fmt: skip


async def asked(svc: Service, clock: FakeClock) -> ElicitationKey:
    e = make(clock.now(), "eli_q")
    await svc.intake([Inbound("ce:/test", "ev-1", e, {}, None)])
    return e.key


async def test_votes_are_stored_until_the_quorum_and_the_answer_carries_them(store: Store) -> None:
    clock = FakeClock()
    svc = service(store, clock)
    key = await asked(svc, clock)

    first = await svc.act(choose(key, ALICE))
    assert first.kind is OutcomeKind.VOTED
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.PENDING
    assert [(v.person, v.option_id) for v in stored.votes] == [("slack:U0ALICE", "yes")]
    view = await svc.view(key)
    assert view is not None
    assert view.waiting == (  # who may still approve: the route's approvers but Alice
        "Approved by Alice (1 of 2) — waiting for one more approver: slack:U0BOB, carol"
    )
    listed = await store.get_many([key])
    assert listed[key].votes == stored.votes

    again = await svc.act(choose(key, ALICE))
    assert again.refusal is not None
    assert again.refusal.code is RefusalCode.ALREADY_VOTED

    clock.advance(seconds=5)
    last = await svc.act(choose(key, CAROL))
    assert last.kind is OutcomeKind.ANSWERED
    stored = await store.get(key)
    assert stored is not None
    assert stored.status is Status.ANSWERED
    assert stored.answer is not None
    assert stored.answer.respondent == "web:carol"
    assert [a.by for a in stored.answer.approvals] == ["slack:U0ALICE", "web:carol"]
    actions = [(a.action, a.actor) for a in await store.audit(key)]
    assert ("vote", "slack:U0ALICE") in actions
    assert ("answer", "web:carol") in actions
    answer_audit = [a for a in await store.audit(key) if a.action == "answer"]
    assert [x["by"] for x in (answer_audit[0].detail or {})["approvals"]] == [
        "slack:U0ALICE",
        "web:carol",
    ]


async def test_a_vote_is_not_recorded_on_a_stale_read_or_a_closed_question(store: Store) -> None:
    clock = FakeClock()
    svc = service(store, clock)
    key = await asked(svc, clock)
    stored = await store.get(key)
    assert stored is not None
    vote = Vote(person="slack:U0BOB", respondent="slack:U0BOB", option_id="yes", via="web",
                at=clock.now())  # fmt: skip
    assert not await store.record_vote(key, vote, clock.now(), version=stored.version + 1, audit={})
    assert (await store.get(key)).votes == ()  # type: ignore[union-attr]
    await svc.act(choose(key, ALICE, "no"))  # one eligible reject decides at once
    closed = await store.get(key)
    assert closed is not None
    assert closed.status is Status.ANSWERED
    assert not await store.record_vote(key, vote, clock.now(), version=closed.version, audit={})
    assert (await store.get(key)).votes == ()  # type: ignore[union-attr]


async def test_two_last_votes_on_two_replicas_make_one_answer(pg_url: str) -> None:
    clock = FakeClock()
    one, two = SqlStore.from_url(pg_url), SqlStore.from_url(pg_url)
    try:
        first, second = service(one, clock), service(two, clock)
        key = await asked(first, clock)
        assert (await first.act(choose(key, ALICE))).kind is OutcomeKind.VOTED
        outcomes: list[Outcome] = list(
            await asyncio.gather(second.act(choose(key, BOB)), first.act(choose(key, CAROL)))
        )
        kinds = sorted(o.kind.value for o in outcomes)
        assert kinds == ["answered", "refused"], outcomes
        refused = next(o for o in outcomes if o.kind is OutcomeKind.REFUSED)
        assert refused.refusal is not None
        assert refused.refusal.code is RefusalCode.ALREADY_ANSWERED
        assert await one.count("answer") == 1
        writebacks = [r for r in await one.outbox(key) if r.kind == "writeback"]
        assert len(writebacks) == 1, "one write-back"
        stored = await one.get(key)
        assert stored is not None
        assert stored.answer is not None
        assert len(stored.answer.approvals) == 2
    finally:
        await one.close()
        await two.close()


async def test_two_first_votes_racing_are_both_counted_and_decide_once(pg_url: str) -> None:
    """Quorum 2, nobody has voted: the two votes race; one is stored, the other loses its
    write, is judged again on the stored vote and becomes the answer."""
    clock = FakeClock()
    one, two = SqlStore.from_url(pg_url), SqlStore.from_url(pg_url)
    try:
        first, second = service(one, clock), service(two, clock)
        key = await asked(first, clock)
        outcomes = await asyncio.gather(first.act(choose(key, ALICE)), second.act(choose(key, BOB)))
        assert sorted(o.kind.value for o in outcomes) == ["answered", "voted"], outcomes
        stored = await one.get(key)
        assert stored is not None
        assert stored.answer is not None
        assert {a.by for a in stored.answer.approvals} == {"slack:U0ALICE", "slack:U0BOB"}
    finally:
        await one.close()
        await two.close()


async def test_a_new_digest_on_the_same_revision_clears_the_votes_and_the_view_says_so(
    store: Store,
) -> None:
    """Issue 23: a new digest of the approval subject (its revision unchanged) clears the votes
    stored; every copy's tally line (the view's ``waiting``) says so; the same person may approve
    again, and the answer carries only the approvals given on the digest that decided."""
    clock = FakeClock()
    svc = service(store, clock)
    e = make(clock.now(), "eli_qd", subject_expires=3600)
    await svc.intake([Inbound("ce:/test", "ev-1", e, {}, None)])
    assert e.subject is not None
    first = await svc.act(choose(e.key, ALICE))
    assert first.kind is OutcomeKind.VOTED

    subject = e.subject.model_copy(update={"digest": "sha256:5e5e"})
    [changed] = await svc.intake(
        [Inbound("ce:/test", "ev-2", e.model_copy(update={"subject": subject}), {}, None)]
    )
    assert changed.result == "updated"
    stored = await store.get(e.key)
    assert stored is not None
    assert [v.digest for v in stored.votes] == ["sha256:00ff"]  # kept, no longer counted
    view = await svc.view(e.key)
    assert view is not None
    assert view.waiting == (
        "The request changed after Alice approved, so those approvals no longer count"
        " — waiting for 2 more approvers"
    )

    clock.advance(seconds=5)
    again = await svc.act(choose(e.key, ALICE))
    assert again.kind is OutcomeKind.VOTED, again
    assert again.message == "Your approval is recorded (1 of 2); waiting for one more approver."
    clock.advance(seconds=5)
    last = await svc.act(choose(e.key, BOB))
    assert last.kind is OutcomeKind.ANSWERED
    stored = await store.get(e.key)
    assert stored is not None
    assert stored.answer is not None
    assert stored.answer.subject_digest == "sha256:5e5e"
    assert [a.by for a in stored.answer.approvals] == ["slack:U0ALICE", "slack:U0BOB"]
    assert stored.answer.approvals[0].at == clock.now() - timedelta(seconds=5)  # the new vote

"""One judgement per action (:mod:`bot.domain.judge`): properties and the lost-write paths."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from hypothesis import given
from hypothesis import strategies as st

from bot.domain.actions import (
    Choose,
    ClaimIt,
    Command,
    CommandResult,
    Open,
    OutcomeKind,
    Reply,
    Submit,
)
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.judge import (
    Judged,
    Judgement,
    RecordAnswer,
    RecordClaim,
    RecordRefusal,
    after_lost,
    judge,
    judge_command,
    lost_for_good,
)
from bot.domain.model import (
    Answer,
    Attempt,
    Elicitation,
    ElicitationKey,
    Identity,
    People,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.records import RecordResult, StoredElicitation
from bot.domain.rules import offered_options
from tests.unit.domain.builders import CREATED, NOW, sp_options
from tests.unit.domain.test_properties import CUT, FAST, attempts, elicitations, moments, people

ALICE = Identity(platform="slack", user="U0ALICE", team="T1")
BOB = Identity(platform="matrix", user="@bob:example.org")


def stored(e: Elicitation, status: Status = Status.PENDING, answer: Answer | None = None):
    return StoredElicitation(
        elicitation=e,
        status=status,
        answer=answer,
        version=1,
        route=Route(),
        created_at=CREATED,
        updated_at=CREATED,
    )


def as_action(e: Elicitation, attempt: Attempt, kind: str) -> Judged:
    """The same attempt as each surface would send it."""
    who, via = attempt.respondent, attempt.via
    if kind == "choose":
        return Choose(e.key, who, via, attempt.option_ids, attempt.revision, shown=attempt.shown)
    if kind == "form":
        return Choose(
            e.key, who, via, attempt.option_ids, attempt.revision, shown=attempt.shown, form=True
        )
    if kind == "reply":
        words = " ".join(attempt.option_ids) or (attempt.text or "")
        return Reply(e.key, who, via, words, shown=attempt.shown)
    if kind == "claim":
        return ClaimIt(e.key, who, via)
    return Submit(
        e.key,
        who,
        via,
        attempt.option_ids,
        attempt.text,
        attempt.secret,
        revision=attempt.revision,
        shown=attempt.shown,
    )


KINDS = st.sampled_from(["choose", "form", "reply", "submit", "claim"])


@st.composite
def judged(draw: st.DrawFn) -> tuple[Elicitation, Judged, People, datetime]:
    e = draw(elicitations())
    action = as_action(e, draw(attempts(e)), draw(KINDS))
    return e, action, draw(people), draw(moments)


def decides(j: Judgement) -> bool:
    """The judgement writes a decision (an answer or a claim), not just a refusal."""
    return isinstance(j.write, RecordAnswer | RecordClaim)


# --------------------------------------------------------------------------- properties


@FAST
@given(
    judged(),
    st.sampled_from(["asker", "principal", "agent", "bot", "elicitbot"]),
)
def test_the_asker_its_principal_agents_and_bots_never_answer_or_claim(case, who_kind) -> None:
    e, action, p, now = case
    person = action.who
    if who_kind == "asker":
        e = e.model_copy(update={"asker": person.key})
    elif who_kind == "principal":
        p = p.model_copy(update={"principals": {person.key: e.asker}})
    elif who_kind == "agent":
        p = p.model_copy(update={"agents": frozenset({person.key})})
    elif who_kind == "bot":
        action = replace(action, who=person.model_copy(update={"is_bot": True}))
    else:
        p = p.model_copy(update={"bot_identities": frozenset({person.key})})

    j = judge(stored(e), action, p, now)

    assert not decides(j)
    assert j.outcome.kind not in (OutcomeKind.ANSWERED, OutcomeKind.CLAIMED, OutcomeKind.FORM)


@FAST
@given(judged())
def test_an_option_not_offered_on_that_surface_never_counts(case) -> None:
    e, action, p, now = case
    j = judge(stored(e), action, p, now)
    if not isinstance(j.write, RecordAnswer):
        return
    shown = getattr(action, "shown", None)
    surface = shown if shown is not None else CUT
    offered = {o.option.id for o in offered_options(e, now, shown=surface) if o.offered}
    for option_id in j.write.answer.option_ids:
        option = e.option(option_id)
        assert option is not None, "only the elicitation's own options"
        assert option_id in offered, "offered on the surface it came from"
        if option.approving:
            assert shown is not None
            assert shown.whole, "approving only where the whole request was shown"
        if option.admin_only:
            assert action.who.key in p.admins


@FAST
@given(judged())
def test_a_judgement_on_a_closed_question_never_decides(case) -> None:
    e, action, p, now = case
    earlier = Answer(option_ids=(), text="first", respondent="web:someone", via="web", at=CREATED)
    for status, answer in (
        (Status.ANSWERED, earlier),
        (Status.EXPIRED, None),
        (Status.CANCELLED, None),
    ):
        j = judge(stored(e, status, answer), action, p, now)
        assert not decides(j)
        assert j.outcome.kind is not OutcomeKind.FORM


def fenced(state: StoredElicitation, write: RecordAnswer) -> RecordResult:
    """The store's first-answer-wins write, as a model: pending (and not expired) wins."""
    expires = state.elicitation.deadlines.expires_at
    if state.status is Status.PENDING and (expires is None or expires > write.answer.at):
        return RecordResult(True, Status.ANSWERED, write.answer)
    return RecordResult(False, state.status, state.answer)


@FAST
@given(st.data())
def test_the_first_valid_answer_wins_exactly_once(data: st.DataObject) -> None:
    e = data.draw(elicitations())
    p = data.draw(people)
    now = data.draw(moments)
    tries = data.draw(st.lists(st.tuples(attempts(e), KINDS), min_size=1, max_size=6))
    state = stored(e)
    won: list[Answer] = []
    valid = 0
    for attempt, kind in tries:
        action = as_action(e, attempt, kind)
        j = judge(state, action, p, now)
        if isinstance(j.write, RecordAnswer):
            valid += 1
            result = fenced(state, j.write)
            if result.won:
                won.append(j.write.answer)
                state = replace(state, status=Status.ANSWERED, answer=j.write.answer)
                continue
            again = judge(after_lost(state, result), action, p, now)
            assert not decides(again), "a lost write is judged again, never recorded"
        elif won:
            assert j.outcome.kind in (OutcomeKind.REFUSED, OutcomeKind.IGNORED)
    assert len(won) == (1 if valid else 0), "the first valid answer wins, and only it"
    if won:
        assert state.answer == won[0]


# --------------------------------------------------------------------------- examples


def test_a_lost_answer_is_judged_again_on_the_winner_and_says_who_answered() -> None:
    e = sp_options()
    mine = judge(stored(e), Choose(e.key, ALICE, "slack:C1", ("deny",)), People(), NOW)
    assert isinstance(mine.write, RecordAnswer)
    theirs = Answer(option_ids=("allow_once",), respondent=BOB.key, via="matrix:!r", at=NOW)

    lost = after_lost(stored(e), RecordResult(False, Status.ANSWERED, theirs))
    again = judge(lost, Choose(e.key, ALICE, "slack:C1", ("deny",)), People(), NOW)

    assert again.outcome.kind is OutcomeKind.REFUSED
    assert again.outcome.refusal is not None
    assert again.outcome.refusal.code is RefusalCode.ALREADY_ANSWERED
    assert again.outcome.refusal.message.startswith(f"Already answered by {BOB.key}")
    assert isinstance(again.write, RecordRefusal)
    assert again.write.actor == ALICE.key


def test_a_claim_that_kept_losing_is_refused_as_nothing_to_claim() -> None:
    e = sp_options()
    claim = judge(stored(e), ClaimIt(e.key, ALICE, "slack:C1"), People(), NOW)
    assert isinstance(claim.write, RecordClaim)

    closed = lost_for_good(claim)

    assert closed.outcome.refusal is not None
    assert closed.outcome.refusal.code is RefusalCode.CLOSED
    assert closed.write == RecordRefusal(
        ALICE.key, RefusalCode.CLOSED, {"claim": True, "message": closed.outcome.message}
    )


def test_reply_and_review_open_while_pending_and_say_how_it_closed_after() -> None:
    e = sp_options()
    opens = Open(e.key, ALICE, "slack:C1")

    assert judge(stored(e), opens, People(), NOW).outcome.kind is OutcomeKind.FORM
    closed = judge(stored(e, Status.CANCELLED), opens, People(), NOW)
    assert closed.outcome.refusal is not None
    assert closed.outcome.refusal.code is RefusalCode.CLOSED
    assert isinstance(closed.write, RecordRefusal)


def test_an_option_that_needs_a_comment_asks_for_it_where_the_surface_has_a_form() -> None:
    base = sp_options()
    needs = [
        o.model_copy(update={"requires_text": True}) if o.id == "deny" else o for o in base.options
    ]
    e = base.model_copy(update={"options": tuple(needs)})
    pick = Choose(e.key, ALICE, "slack:C1", ("deny",), shown=SHOWN_WHOLE, form=True)

    asked = judge(stored(e), pick, People(), NOW)
    told = judge(stored(e), replace(pick, form=False), People(), NOW)

    assert (asked.outcome.kind, asked.outcome.option_id, asked.write) == (
        OutcomeKind.FORM,
        "deny",
        None,
    )
    assert told.outcome.refusal is not None
    assert told.outcome.refusal.code is RefusalCode.NEEDS_TEXT


def test_an_unknown_elicitation_is_not_found_and_writes_nothing() -> None:
    j = judge(None, Choose(ElicitationKey("nope"), ALICE, "web", ("x",)), People(), NOW)
    assert (j.outcome.kind, j.write) == (OutcomeKind.NOT_FOUND, None)


def test_a_command_is_judged_on_who_may_run_it() -> None:
    admin = Identity(platform="slack", user="U0ADMIN")
    p = People(admins=frozenset({admin.key}))

    assert judge_command(Command(ALICE, "slack:C1", "subscribe acme"), p).refused
    assert not judge_command(Command(ALICE, "slack:C1", "routes", elevated=True), p).refused
    assert judge_command(Command(admin, "slack:C1", "subscribe acme"), p) == CommandResult(
        "subscribe", "acme"
    )
    assert judge_command(Command(ALICE, "slack:C1", "help"), p) == CommandResult("help")

"""Property tests of the answer rules and reply parsing (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import find, given, settings
from hypothesis import strategies as st

from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Answer,
    AnswerMode,
    ApprovalSubject,
    Attempt,
    Disclosure,
    Elicitation,
    Identity,
    Meaning,
    Option,
    People,
    Refusal,
    RefusalCode,
    Status,
)
from bot.domain.replies import Reply, parse_reply
from bot.domain.rules import MAX_FREE_TEXT, AnswerState, decide, judge, offered_options
from tests.unit.domain.builders import CREATED, SUPERPIPELINE_OPTIONS, elicitation

OPTION_IDS = ("allow_once", "allow_always", "deny", "1", "Deny", "x y")
LABELS = ("Allow once", "Always allow", "Deny", "2", "Straße", "Yes, go", "😀")

FAST = settings(max_examples=60, deadline=None)
"""The whole domain suite must run in a few seconds, on a busy machine too."""

option_ids = st.sampled_from(OPTION_IDS)
texts = st.one_of(st.none(), st.text(max_size=80))
moments = st.datetimes(
    min_value=datetime(2026, 11, 1),  # noqa: DTZ001 - hypothesis wants naive bounds
    max_value=datetime(2026, 11, 20),  # noqa: DTZ001
    timezones=st.just(UTC),
)


OPTION_POOL = [
    Option(id=option_id, label=label, meaning=meaning, admin_only=admin, requires_text=needs)
    for option_id, label in zip(OPTION_IDS, LABELS, strict=False)
    for meaning in Meaning
    for admin in (False, True)
    for needs in (False, True)
]
options = st.one_of(
    st.just(()),
    st.lists(st.sampled_from(OPTION_POOL), unique_by=lambda o: o.id, min_size=1, max_size=5).map(
        tuple
    ),
)


some_subject = st.builds(
    ApprovalSubject,
    id=st.just("sub_1"),
    digest=st.sampled_from(["sha256:00", "sha256:01"]),
    schema=st.just("stk/v1"),
    revision=st.integers(0, 3),
    expires_at=st.one_of(st.none(), moments),
    preview_complete=st.booleans(),
)
subjects = st.one_of(st.none(), some_subject)


@st.composite
def elicitations(draw: st.DrawFn, subject: st.SearchStrategy[ApprovalSubject | None] = subjects):
    return Elicitation(
        source="superpipeline",
        source_id="eli_1",
        workspace="acme",
        asker=draw(st.sampled_from(["agt_1", "slack:U0ASKER", "U0ASKER"])),
        answer_mode=draw(st.sampled_from(AnswerMode)),
        options=draw(options),
        max_length=draw(st.one_of(st.none(), st.integers(1, 40))),
        subject=draw(subject),
        created_at=CREATED,
    )


rarely = st.sampled_from([False] * 7 + [True])

CUT = Disclosure(whole=False, review="Use Review… to see all of it.")
disclosures = st.sampled_from([SHOWN_WHOLE, SHOWN_WHOLE, SHOWN_WHOLE, CUT, None])
"""What the surface showed: mostly everything, so approvals are often accepted."""

identities = st.builds(
    Identity,
    platform=st.sampled_from(["slack", "matrix", "web"]),
    user=st.sampled_from(["U0ALICE", "U0ADMIN", "@bob:example.org", "U0ASKER", "B0BOT"]),
    is_bot=rarely,
    display_name=st.sampled_from([None, "Alice", ""]),
)

people = st.builds(
    People,
    admins=st.frozensets(st.sampled_from(["slack:U0ADMIN", "web:U0ADMIN", "slack:U0ALICE"])),
)


@st.composite
def attempts(draw: st.DrawFn, e: Elicitation) -> Attempt:
    """Any attempt, mostly naming ``e``'s own options so that answers are often accepted."""
    offered = st.sampled_from([o.id for o in e.options]) if e.options else option_ids
    some_id = st.one_of(offered, offered, offered, option_ids, st.text(max_size=8))
    text_only = e.answer_mode in (AnswerMode.FREE_TEXT, AnswerMode.SECRET) or not e.options
    if text_only:
        count = draw(st.sampled_from([0, 0, 0, 1]))
    elif e.answer_mode is AnswerMode.MULTI_CHOICE:
        count = draw(st.sampled_from([0, 1, 2, 2, 3]))
    else:
        count = draw(st.sampled_from([0, 1, 1, 1, 1, 2]))
    return Attempt(
        respondent=draw(identities),
        option_ids=tuple(draw(some_id) for _ in range(count)),
        text=draw(texts),
        secret=(e.answer_mode is AnswerMode.SECRET) != draw(rarely),
        via=draw(st.sampled_from(["slack:C0A", "matrix:!r:example.org", "web"])),
        revision=draw(st.one_of(st.none(), st.integers(0, 3))),
        digest=draw(st.sampled_from([None, "sha256:00", "sha256:01"])),
        shown=draw(disclosures),
    )


@st.composite
def cases(
    draw: st.DrawFn, subject: st.SearchStrategy[ApprovalSubject | None] = subjects
) -> tuple[Elicitation, Attempt, People, datetime]:
    e = draw(elicitations(subject))
    return e, draw(attempts(e)), draw(people), draw(moments)


@st.composite
def asker_cases(draw: st.DrawFn) -> tuple[Elicitation, Attempt, People, datetime]:
    """A respondent that is the asker (by principal), a configured agent, or a bot."""
    e, a, _, now = draw(cases())
    key = a.respondent.key
    case = draw(st.sampled_from(["principal", "agent", "bot"]))
    if case == "principal":
        p = People(principals={key: e.asker}, admins=frozenset({key}))
    elif case == "agent":
        p = People(agents=frozenset({key}), admins=frozenset({key}))
    else:
        p = People(admins=frozenset({key}))
        a = a.model_copy(update={"respondent": a.respondent.model_copy(update={"is_bot": True})})
    return e, a, p, now


@given(asker_cases())
@FAST
def test_asker_agent_or_bot_never_answers(case):
    e, a, p, now = case
    result = judge(e, a, p, now)
    assert isinstance(result, Refusal)
    assert decide(e, AnswerState(Status.PENDING), a, p, now).state.status is Status.PENDING


@given(cases(), st.text(min_size=1, max_size=8))
@FAST
def test_option_not_offered_is_never_accepted(case, stranger):
    e, a, p, now = case
    if e.option(stranger) is not None:
        return
    a = a.model_copy(update={"option_ids": (*a.option_ids, stranger)})
    assert isinstance(judge(e, a, p, now), Refusal)


@given(cases(some_subject))
@FAST
def test_approving_never_accepted_while_preview_incomplete(case):
    e, a, p, now = case
    assert e.subject is not None
    e = e.model_copy(update={"subject": e.subject.model_copy(update={"preview_complete": False})})
    result = judge(e, a, p, now)
    if isinstance(result, Answer):
        assert not any(e.option(i).approving for i in result.option_ids)
    approving = [o.id for o in e.options if o.approving]
    if approving:
        forced = a.model_copy(update={"option_ids": (approving[0],)})
        assert isinstance(judge(e, forced, p, now), Refusal)


@given(cases(), st.sampled_from([CUT, None]))
@FAST
def test_approving_is_accepted_only_from_a_surface_that_showed_everything(case, cut):
    """Rule 2's surface half: whatever else holds, an approving option chosen on a surface that
    cut the content (or said nothing) is refused, and never offered there."""
    e, a, p, now = case
    result = judge(e, a.model_copy(update={"shown": cut}), p, now)
    if isinstance(result, Answer):
        assert not any(e.option(i).approving for i in result.option_ids)
    offered = offered_options(e, now, shown=cut or CUT)
    assert not any(o.offered and o.option.approving for o in offered)
    assert all(o.offered for o in offered if not o.option.approving)
    if isinstance(result, Answer):
        assert not any(o.option.approving for o in offered if o.option.id in result.option_ids)


@given(cases(some_subject))
@FAST
def test_approving_is_accepted_only_on_the_revision_and_digest_the_surface_showed(case):
    """Rule 2's staleness half: an accepted approving answer came from a surface that showed the
    subject's current revision and digest (or could not tell, None); one that showed another
    digest on the same revision is refused STALE_REVISION."""
    e, a, p, now = case
    s = e.subject
    assert s is not None
    result = judge(e, a, p, now)
    if isinstance(result, Answer) and any(e.option(i).approving for i in result.option_ids):
        assert a.revision in (None, s.revision)
        assert a.digest in (None, s.digest)
    stale = a.model_copy(update={"revision": s.revision, "digest": s.digest + "x"})
    again = judge(e, stale, p, now)
    if isinstance(again, Answer):
        assert not any(e.option(i).approving for i in again.option_ids)
    if (
        isinstance(result, Answer)
        and result.option_ids
        and all(e.option(i).approving for i in result.option_ids)
    ):
        assert isinstance(again, Refusal)
        assert again.code is RefusalCode.STALE_REVISION


@given(cases())
@FAST
def test_judge_never_raises_and_answers_are_consistent(case):
    e, a, p, now = case
    result = judge(e, a, p, now)
    if isinstance(result, Answer):
        assert set(result.option_ids) <= {o.id for o in e.options}
        assert len(set(result.option_ids)) == len(result.option_ids)
        assert result.at == now
        if e.answer_mode is AnswerMode.SECRET:
            assert result.secret
            assert result.text is None


def _each_mode() -> list[Elicitation]:
    base = elicitation(max_length=10)
    labelled = (*SUPERPIPELINE_OPTIONS, Option(id="2", label="Yes, go"), Option(id="é", label="1"))
    return [
        base.model_copy(update={"answer_mode": mode, "options": opts})
        for mode in AnswerMode
        for opts in ((), SUPERPIPELINE_OPTIONS, labelled)
    ]


reply_targets = st.sampled_from(_each_mode())


@given(st.text(max_size=200), reply_targets)
@settings(max_examples=200, deadline=None)
def test_parse_reply_never_raises(body, e):
    reply: Reply = parse_reply(e, body)
    assert reply is not None


quoted_bodies = st.builds(
    lambda quote, blank, rest: (
        "\n".join(f"> {q}" for q in quote) + ("\n\n" if blank else "\n") + rest
    ),
    st.lists(st.text(max_size=20), max_size=3),
    st.booleans(),
    st.text(alphabet=st.sampled_from("0123456789#., \n>abcdeyn\u00e9\U0001f600"), max_size=20),
)


@given(quoted_bodies, reply_targets)
def test_parse_reply_never_raises_on_reply_shaped_bodies(body, e):
    assert parse_reply(e, body) is not None


@given(cases())
@FAST
def test_deciding_twice_equals_deciding_once(case):
    e, a, p, now = case
    pending = AnswerState(Status.PENDING)
    once = decide(e, pending, a, p, now)
    twice = decide(e, once.state, a, p, now)
    assert twice.state == once.state
    later = decide(e, once.state, a, p, now + timedelta(minutes=5))
    assert later.state == once.state


@given(cases(), st.integers(1, 30), st.sampled_from("aé😀 \n"))
@FAST
def test_free_text_over_max_length_is_never_accepted(case, extra, filler):
    e, a, p, now = case
    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    text = "x" + filler * (limit - 1 + extra)
    assert len(text) > limit
    a = a.model_copy(update={"text": text})
    assert isinstance(judge(e, a, p, now), Refusal)


@given(cases())
@FAST
def test_refusal_leaves_state_pending_and_answer_moves_to_answered(case):
    e, a, p, now = case
    d = decide(e, AnswerState(Status.PENDING), a, p, now)
    if isinstance(d.result, Refusal):
        assert d.state == AnswerState(Status.PENDING)
    else:
        assert d.state == AnswerState(Status.ANSWERED, d.result)


def test_strategies_reach_accepted_answers():
    """Guard against vacuous properties: the generators do produce accepted answers."""
    found = find(
        cases(), lambda c: isinstance(judge(*c), Answer), settings=settings(max_examples=500)
    )
    assert isinstance(judge(*found), Answer)

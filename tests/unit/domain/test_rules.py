"""Answer rules 1-5 and 7: each refusal code, each answer mode, options shown, first answer wins."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.domain.described import describe_answer
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Answer,
    AnswerMode,
    Deadlines,
    Disclosure,
    Identity,
    Meaning,
    Option,
    Refusal,
    RefusalCode,
    Status,
)
from bot.domain.rules import (
    MAX_FREE_TEXT,
    AnswerState,
    approving_withheld,
    decide,
    offered_options,
)
from tests.unit.domain.builders import (
    ADMIN,
    AGENT_BOT,
    AGENT_ID,
    AGENT_MXID,
    ALICE,
    BOB,
    DENY,
    ELICITBOT,
    NOW,
    PENDING,
    PEOPLE,
    SUBJECT_EXPIRES,
    accepted,
    answer,
    attempt,
    elicitation,
    later,
    refused,
    sp_approval,
    sp_bare,
    sp_free_text,
    sp_options,
    subject,
)

# --------------------------------------------------------------------------- rule 1


@pytest.mark.parametrize(
    ("who", "asker", "code"),
    [
        (Identity(platform="slack", user="U0AGENTUSER"), AGENT_ID, RefusalCode.ASKER),  # principal
        (AGENT_MXID, AGENT_ID, RefusalCode.ASKER),  # an agent too: the asker rule wins
        (ALICE, "slack:U0ALICE", RefusalCode.ASKER),  # named by identity key
        (ALICE, "U0ALICE", RefusalCode.ASKER),  # named by platform user id
        (Identity(platform="slack", user="B0AGENTBOT"), AGENT_ID, RefusalCode.AGENT),
        (AGENT_BOT, AGENT_ID, RefusalCode.AGENT),
        (Identity(platform="slack", user="B0OTHER", is_bot=True), AGENT_ID, RefusalCode.BOT),
        (ELICITBOT, AGENT_ID, RefusalCode.BOT),  # elicitbot itself
    ],
)
def test_asker_agents_and_bots_never_answer(who, asker, code):
    e = elicitation(asker=asker)
    assert refused(e, who, "deny").code is code
    # Rule 1 comes before anything else.
    assert refused(e, who, "nope").code is code
    assert (
        refused(sp_free_text().model_copy(update={"asker": asker}), who, text="x" * 5000).code
        is code
    )


def test_respondent_principal_is_recorded_and_the_asker_told_why_not():
    refusal = refused(sp_options(), AGENT_MXID, "deny")
    assert refusal.message == "You asked this question, so you cannot answer it."
    recorded = accepted(sp_options(), ALICE, "deny")
    assert recorded.respondent == "slack:U0ALICE"
    assert recorded.principal == "usr_alice"
    assert recorded.display_name == "Alice"
    assert recorded.via == "slack:C0APPROVALS"
    assert recorded.at == NOW
    assert recorded.option_ids == ("deny",)
    assert recorded.subject_digest is None


# --------------------------------------------------------------------------- rule 2


def test_preview_incomplete_refuses_approve_but_not_deny():
    assert refused(sp_options(), ALICE, "allow_everything").code is RefusalCode.NOT_OFFERED
    e = sp_approval(preview_complete=False)
    refusal = refused(e, ALICE, "allow_once")
    assert refusal.code is RefusalCode.PREVIEW_INCOMPLETE
    assert "preview is incomplete" in refusal.message
    assert accepted(e, ALICE, "deny").option_ids == ("deny",)


def test_expired_subject_refuses_approve_using_server_time():
    e = sp_approval()
    refusal = refused(e, ALICE, "allow_once", now=SUBJECT_EXPIRES)
    assert refusal.code is RefusalCode.SUBJECT_EXPIRED
    assert "2026-11-11 09:30 UTC" in refusal.message
    assert accepted(e, ALICE, "allow_once", now=SUBJECT_EXPIRES - timedelta(seconds=1))
    assert accepted(e, ALICE, "deny", now=SUBJECT_EXPIRES + timedelta(days=1))
    # Expiry is final, so it is the reason given when the preview is incomplete too.
    e = sp_approval(preview_complete=False)
    assert refused(e, ALICE, "allow_once", now=later(days=2)).code is RefusalCode.SUBJECT_EXPIRED
    assert accepted(sp_approval(expires_at=None), ALICE, "allow_once", now=later(days=9999))


def test_stale_revision_refuses_approving_only():
    e = sp_approval(revision=3)
    refusal = refused(e, ALICE, "allow_once", revision=2)
    assert refusal.code is RefusalCode.STALE_REVISION
    assert refusal.message == (
        "The request changed since this message was shown; answer on the updated message."
    )
    assert accepted(e, ALICE, "deny", revision=2)
    assert accepted(e, ALICE, "allow_once", revision=3)
    given = accepted(e, ALICE, "allow_once")  # the surface did not know the revision
    assert given.subject_digest == subject().digest
    assert given.subject_revision == 3


def test_a_new_digest_on_the_same_revision_refuses_approving_what_was_shown_before():
    """Rule 2 by digest: the subject's content changed while its revision did not; a person who
    saw the old digest cannot approve the new content (same refusal as a new revision)."""
    old = subject().digest
    e = sp_approval(revision=3, digest="sha256:" + "ab" * 32)
    refusal = refused(e, ALICE, "allow_once", revision=3, digest=old)
    assert refusal.code is RefusalCode.STALE_REVISION
    assert refusal.message == (
        "The request changed since this message was shown; answer on the updated message."
    )
    assert accepted(e, ALICE, "deny", revision=3, digest=old)  # rejecting what was seen counts
    given = accepted(e, ALICE, "allow_once", revision=3, digest="sha256:" + "ab" * 32)
    assert given.subject_digest == "sha256:" + "ab" * 32
    # A surface that cannot tell which digest it showed (None): today's behaviour, by revision.
    assert accepted(e, ALICE, "allow_once", revision=3)
    assert refused(e, ALICE, "allow_once", revision=2).code is RefusalCode.STALE_REVISION


# --------------------------------------------------------------------------- rule 3


def test_admin_only_option_refused_for_non_admin_naming_the_option():
    refusal = refused(sp_options(), ALICE, "allow_always")
    assert refusal.code is RefusalCode.NOT_ADMIN
    assert "Always allow" in refusal.message
    assert accepted(sp_options(), ADMIN, "allow_always").option_ids == ("allow_always",)
    e = sp_approval(preview_complete=False)
    assert refused(e, ADMIN, "allow_always").code is RefusalCode.PREVIEW_INCOMPLETE
    # Never decided by display name.
    impostor = Identity(platform="slack", user="U0EVIL", display_name="Ada")
    assert refused(sp_options(), impostor, "allow_always").code is RefusalCode.NOT_ADMIN


# --------------------------------------------------------------------------- rule 4: free text


@pytest.mark.parametrize("text", [None, "", "   ", "\n\t "])
def test_free_text_must_not_be_empty(text):
    assert refused(sp_free_text(), ALICE, text=text).code is RefusalCode.EMPTY


def test_free_text_at_the_limit_is_accepted_as_given():
    text = " " + "a" * 1998 + "\n"
    assert accepted(sp_free_text(), ALICE, text=text).text == text
    refusal = refused(sp_free_text(), ALICE, text="a" * 2001)
    assert refusal.code is RefusalCode.TOO_LONG
    assert refusal.message == "Your answer is 2,001 characters; the limit is 2,000."


def test_free_text_counts_code_points_not_bytes():
    e = sp_free_text()
    assert accepted(e, ALICE, text="😀" * 2000).text == "😀" * 2000
    assert refused(e, ALICE, text="😀" * 2001).code is RefusalCode.TOO_LONG
    # A ZWJ sequence is several code points.
    technologist = "\U0001f469\u200d\U0001f4bb"
    assert len(technologist) == 3
    assert refused(e, ALICE, text=technologist * 667).code is RefusalCode.TOO_LONG


def test_free_text_without_max_length_uses_the_default_bound_and_refuses_options():
    e = sp_free_text().model_copy(update={"max_length": None})
    assert accepted(e, ALICE, text="b" * MAX_FREE_TEXT)
    refusal = refused(e, ALICE, text="b" * (MAX_FREE_TEXT + 1))
    assert refusal.code is RefusalCode.TOO_LONG
    assert "32,768." in refusal.message
    assert refused(sp_free_text(), ALICE, "deny", text="main").code is RefusalCode.NOT_OFFERED


# --------------------------------------------------------------------------- answer modes


def test_single_choice_takes_exactly_one_option():
    e = sp_options()
    refusal = refused(e, ALICE)
    assert refusal.code is RefusalCode.EMPTY
    assert refusal.message == "Choose one of the options."
    assert refused(e, ALICE, text="yes please").code is RefusalCode.EMPTY
    assert refused(e, ALICE, "allow_once", "deny").code is RefusalCode.NOT_OFFERED


def test_single_choice_comment_is_kept_and_bounded():
    e = elicitation(max_length=10)
    assert accepted(e, ALICE, "deny", text="too risky").text == "too risky"
    assert accepted(e, ALICE, "deny", text="   ").text is None
    assert refused(e, ALICE, "deny", text="far too risky").code is RefusalCode.TOO_LONG


def test_multi_choice_takes_distinct_offered_options():
    e = elicitation(answer_mode=AnswerMode.MULTI_CHOICE)
    assert accepted(e, ALICE, "deny", "allow_once").option_ids == ("deny", "allow_once")
    assert refused(e, ALICE, "deny", "deny").code is RefusalCode.NOT_DISTINCT
    assert refused(e, ALICE, "deny", "maybe").code is RefusalCode.NOT_OFFERED
    refusal = refused(e, ALICE)
    assert refusal.code is RefusalCode.EMPTY
    assert refusal.message == "Choose at least one of the options."


def test_multi_choice_applies_admin_and_withheld_rules_to_each_option():
    e = sp_approval(preview_complete=False).model_copy(
        update={"answer_mode": AnswerMode.MULTI_CHOICE}
    )
    assert refused(e, ALICE, "deny", "allow_once").code is RefusalCode.PREVIEW_INCOMPLETE
    multi = sp_options().model_copy(update={"answer_mode": AnswerMode.MULTI_CHOICE})
    assert refused(multi, ALICE, "deny", "allow_always").code is RefusalCode.NOT_ADMIN


def test_choice_or_text_takes_an_option_a_text_or_both():
    e = elicitation(answer_mode=AnswerMode.CHOICE_OR_TEXT, max_length=50)
    assert accepted(e, ALICE, "deny").option_ids == ("deny",)
    only_text = accepted(e, ALICE, text="use staging first")
    assert (only_text.option_ids, only_text.text) == ((), "use staging first")
    both = accepted(e, ALICE, "deny", text="use staging first")
    assert (both.option_ids, both.text) == (("deny",), "use staging first")
    refusal = refused(e, ALICE, text=" ")
    assert refusal.code is RefusalCode.EMPTY
    assert refusal.message == "Choose one of the options or write an answer."
    assert refused(e, ALICE, "deny", "allow_once").code is RefusalCode.NOT_OFFERED
    assert refused(e, ALICE, text="x" * 51).code is RefusalCode.TOO_LONG


def test_requires_text_option_needs_a_comment():
    reject = Option(id="reject", label="Reject", meaning=Meaning.REJECT, requires_text=True)
    e = elicitation(options=(reject,))
    for text in (None, "", "  "):
        refusal = refused(e, ALICE, "reject", text=text)
        assert refusal.code is RefusalCode.NEEDS_TEXT
        assert "Reject" in refusal.message
    assert accepted(e, ALICE, "reject", text="wrong account").text == "wrong account"


def test_secret_from_chat_is_refused_and_not_echoed():
    e = elicitation(answer_mode=AnswerMode.SECRET, options=())
    refusal = refused(e, ALICE, text="hunter2-canary")
    assert refusal.code is RefusalCode.SECRET_IN_CHAT
    assert refusal.message == (
        "This answer is a secret: use the private form (Reply… button or web inbox), "
        "not a chat message."
    )
    assert "hunter2" not in refusal.message


def test_secret_from_private_form_is_accepted_but_never_stored():
    e = elicitation(answer_mode=AnswerMode.SECRET, options=(), max_length=20)
    given = accepted(e, ALICE, text="hunter2-canary", secret=True, via="web")
    assert given.secret is True
    assert given.text is None
    assert "hunter2" not in given.model_dump_json()
    assert describe_answer(e, given) == "(secret)"


def test_secret_bounds_are_checked_without_echoing():
    e = elicitation(answer_mode=AnswerMode.SECRET, options=(), max_length=5)
    assert refused(e, ALICE, text=" ", secret=True).code is RefusalCode.EMPTY
    refusal = refused(e, ALICE, text="hunter2-canary", secret=True)
    assert refusal.code is RefusalCode.TOO_LONG
    assert "hunter2" not in refusal.message
    assert refused(e, ALICE, "deny", text="abc", secret=True).code is RefusalCode.NOT_OFFERED
    # A secret attempt on a question that asks for no secret.
    assert refused(sp_free_text(), ALICE, text="main", secret=True).code is RefusalCode.NOT_OFFERED


def test_acknowledge_needs_nothing():
    e = sp_bare()
    given = accepted(e, ALICE)
    assert (given.option_ids, given.text) == ((), None)
    assert accepted(e, ALICE, text="on it").text == "on it"
    assert refused(e, ALICE, "deny").code is RefusalCode.NOT_OFFERED
    assert describe_answer(e, given) == "Acknowledged"


# --------------------------------------------------------------------------- options shown


def test_all_options_offered_normally_and_admin_only_marked():
    shown = offered_options(sp_approval(), NOW, shown=SHOWN_WHOLE)
    assert [o.option.id for o in shown] == ["allow_once", "allow_always", "deny"]
    assert all(o.offered for o in shown)
    assert [o.admin_only for o in shown] == [False, True, False]
    assert all(o.withheld_reason is None for o in shown)
    assert approving_withheld(sp_approval(), NOW) is None


@pytest.mark.parametrize(
    ("e", "now", "reason"),
    [
        (
            sp_approval(preview_complete=False),
            NOW,
            "The preview is incomplete, so approving is not offered.",
        ),
        (sp_approval(), SUBJECT_EXPIRES, "The approval subject expired at 2026-11-11 09:30 UTC."),
    ],
)
def test_withheld_approving_options_are_shown_with_the_reason(e, now, reason):
    assert approving_withheld(e, now) == reason
    shown = offered_options(e, now, shown=SHOWN_WHOLE)
    assert [o.offered for o in shown] == [False, False, True]
    assert [o.withheld_reason for o in shown] == [reason, reason, None]
    assert [o.admin_only for o in shown] == [False, True, False]


# --------------------------------------------------------------------------- what you see (rule 2)

CUT = Disclosure(whole=False, review="Use Review… to see all of it and decide there.")


def test_a_surface_that_cut_the_content_offers_no_approving_option_and_says_where_to_look():
    shown = offered_options(sp_approval(), NOW, shown=CUT)
    assert [o.offered for o in shown] == [False, False, True]
    reason = (
        "This message does not show everything you would approve. "
        "Use Review… to see all of it and decide there."
    )
    assert [o.withheld_reason for o in shown] == [reason, reason, None]


def test_the_elicitations_own_reason_comes_before_the_surfaces():
    shown = offered_options(sp_approval(preview_complete=False), NOW, shown=CUT)
    assert shown[0].withheld_reason == "The preview is incomplete, so approving is not offered."


@pytest.mark.parametrize("shown", [CUT, None])
def test_approving_from_a_surface_that_did_not_show_everything_is_refused(shown):
    refusal = refused(sp_approval(), ALICE, "allow_once", shown=shown)
    assert refusal.code is RefusalCode.NOT_SHOWN
    assert refusal.message.startswith(
        "You cannot choose “Allow once” here: this message does not show everything"
    )
    if shown is CUT:
        assert refusal.message.endswith("Use Review… to see all of it and decide there.")


def test_rejecting_works_from_any_surface():
    assert accepted(sp_approval(), ALICE, "deny", shown=CUT).option_ids == ("deny",)
    assert accepted(sp_approval(), ALICE, "deny", shown=None).option_ids == ("deny",)


def test_approving_from_a_surface_that_showed_everything_is_accepted():
    answer = accepted(sp_approval(), ALICE, "allow_once", shown=SHOWN_WHOLE)
    assert answer.option_ids == ("allow_once",)


# --------------------------------------------------------------------------- decide (rule 5)


def test_first_valid_answer_moves_to_answered():
    d = decide(sp_options(), PENDING, attempt(ALICE, "allow_once"), PEOPLE, NOW)
    assert isinstance(d.result, Answer)
    assert d.state == AnswerState(Status.ANSWERED, d.result)


def test_later_answer_is_told_who_answered_what_when_and_where():
    e = sp_options()
    first = decide(e, PENDING, attempt(ALICE, "allow_once"), PEOPLE, NOW)
    second = decide(e, first.state, attempt(BOB, "deny"), PEOPLE, later(minutes=1))
    assert second.state == first.state
    assert isinstance(second.result, Refusal)
    assert second.result.code is RefusalCode.ALREADY_ANSWERED
    assert second.result.message == (
        "Already answered by Alice (Allow once) at 2026-11-10 09:31 UTC via Slack."
    )


def test_double_click_is_told_it_was_them():
    e = sp_options()
    first = decide(e, PENDING, attempt(BOB, "deny"), PEOPLE, NOW)
    again = decide(e, first.state, attempt(BOB, "allow_once"), PEOPLE, NOW)
    assert isinstance(again.result, Refusal)
    assert (
        again.result.message == "Already answered by you (Deny) at 2026-11-10 09:31 UTC via Matrix."
    )


def test_refusal_does_not_consume_the_first_answer_slot():
    e = sp_options()
    refused_try = decide(e, PENDING, attempt(ALICE, "allow_always"), PEOPLE, NOW)
    assert refused_try.state == PENDING
    admin = decide(e, refused_try.state, attempt(ADMIN, "allow_always"), PEOPLE, NOW)
    assert admin.state.status is Status.ANSWERED


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (Status.EXPIRED, RefusalCode.EXPIRED),
        (Status.CANCELLED, RefusalCode.CLOSED),
        (Status.ANSWERED, RefusalCode.ALREADY_ANSWERED),  # even without the answer at hand
    ],
)
def test_closed_states_refuse_and_stay(status, code):
    state = AnswerState(status)
    d = decide(sp_options(), state, attempt(ADMIN, "deny"), PEOPLE, NOW)
    assert d.state == state
    assert isinstance(d.result, Refusal)
    assert d.result.code is code


def test_pending_past_its_deadline_is_refused_as_expired():
    e = elicitation(deadlines=Deadlines(expires_at=NOW))
    d = decide(e, PENDING, attempt(ALICE, "deny"), PEOPLE, NOW)
    assert d.state == PENDING
    assert isinstance(d.result, Refusal)
    assert d.result.code is RefusalCode.EXPIRED
    assert "2026-11-10 09:31 UTC" in d.result.message
    ok = decide(e, PENDING, attempt(ALICE, "deny"), PEOPLE, NOW - timedelta(seconds=1))
    assert ok.state.status is Status.ANSWERED


# --------------------------------------------------------------------------- describe_answer


def test_describe_options_by_label_in_order():
    e = sp_options()
    assert describe_answer(e, answer(option_ids=("allow_once",))) == "Allow once"
    assert describe_answer(e, answer(option_ids=("allow_once", "deny"))) == "Allow once, Deny"
    assert describe_answer(e, answer(option_ids=("gone",))) == "gone"
    assert describe_answer(e, answer(option_ids=(DENY.id,), text="no")) == "Deny: “no”"
    assert describe_answer(e, answer(secret=True, text=None)) == "(secret)"


def test_describe_text_is_quoted_flattened_and_cut():
    e = sp_free_text()
    assert describe_answer(e, answer(text="use\n  main")) == "“use main”"
    long = describe_answer(e, answer(text="é" * 500))
    assert long == "“" + "é" * 199 + "…”"
    assert describe_answer(e, answer(text="x" * 200)) == "“" + "x" * 200 + "”"

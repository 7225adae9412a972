"""Answer rule 6: thread replies name an option, are the text, or get help."""

from __future__ import annotations

import pytest

from bot.domain.model import Answer, AnswerMode, Meaning, Option, Refusal, RefusalCode
from bot.domain.replies import (
    ChoiceReply,
    HelpReply,
    MultiChoiceReply,
    TextReply,
    help_message,
    parse_reply,
    strip_reply_fallback,
)
from bot.domain.rules import judge
from tests.unit.domain.builders import (
    ALICE,
    NOW,
    PEOPLE,
    attempt,
    elicitation,
    sp_bare,
    sp_free_text,
    sp_options,
)

FALLBACK = "> <@alice:example.org> May I run the migration?\n> 1. Allow once\n\n"


@pytest.mark.parametrize(
    ("body", "option_id"),
    [
        ("1", "allow_once"),
        ("#2", "allow_always"),
        ("3.", "deny"),
        (" 3 ", "deny"),
        ("# 1", "allow_once"),
        ("allow_once", "allow_once"),
        ("ALLOW_ALWAYS", "allow_always"),
        ("Allow once", "allow_once"),
        ("  allow    ONCE ", "allow_once"),
        ("allow\nonce", "allow_once"),
        ("always allow", "allow_always"),
        ("DENY", "deny"),
        ("Deny.", "deny"),
        ("`deny`", "deny"),
        ("“Deny”", "deny"),
    ],
)
def test_reply_names_one_option(body, option_id):
    assert parse_reply(sp_options(), body) == ChoiceReply(option_id)


def test_casefold_matches_beyond_lowercase():
    e = elicitation(options=(Option(id="strasse", label="Straße"),))
    assert parse_reply(e, "STRASSE") == ChoiceReply("strasse")
    assert parse_reply(e, "strasse") == ChoiceReply("strasse")


@pytest.mark.parametrize(
    "body", ["0", "4", "#99", "yes", "allow", "1 or 3", "12345678901234567890"]
)
def test_single_choice_reply_naming_none_gets_help(body):
    reply = parse_reply(sp_options(), body)
    assert isinstance(reply, HelpReply)
    assert "1. Allow once (allow_once)" in reply.message
    assert "2. Always allow (allow_always) (workspace admins only)" in reply.message
    assert "3. Deny (deny)" in reply.message


def test_reply_naming_two_options_at_once_is_not_a_choice():
    # "2" is the second option by number and the first by id: ambiguous, so help.
    e = elicitation(options=(Option(id="2", label="Two"), Option(id="b", label="Bee")))
    assert isinstance(parse_reply(e, "2"), HelpReply)
    assert parse_reply(e, "two") == ChoiceReply("2")


def test_rich_reply_fallback_is_stripped_before_matching():
    assert parse_reply(sp_options(), FALLBACK + "3") == ChoiceReply("deny")


def test_quoted_option_alone_does_not_answer():
    # Rule 8: quoted words are someone else's.
    assert isinstance(parse_reply(sp_options(), "> 1\n\n"), HelpReply)
    assert isinstance(parse_reply(sp_options(), "> 1"), HelpReply)


def test_strip_reply_fallback():
    assert strip_reply_fallback(FALLBACK + "my answer\n> not fallback") == (
        "my answer\n> not fallback"
    )
    assert strip_reply_fallback("no fallback\n\nhere") == "no fallback\n\nhere"
    assert strip_reply_fallback("> a\r\n> b\r\n\r\nreply") == "reply"
    assert strip_reply_fallback("> a\nreply") == "reply"
    assert strip_reply_fallback("> a\n\n\nreply") == "\nreply"
    assert strip_reply_fallback("") == ""


def test_free_text_reply_is_the_answer_even_if_it_looks_like_an_option():
    e = sp_free_text()
    assert parse_reply(e, "  main  ") == TextReply("main")
    assert parse_reply(e, "1") == TextReply("1")
    assert parse_reply(e, FALLBACK + "release/2.0") == TextReply("release/2.0")


def test_free_text_empty_reply_gets_help():
    reply = parse_reply(sp_free_text(), FALLBACK + "   ")
    assert isinstance(reply, HelpReply)
    assert "at most 2,000 characters" in reply.message


def test_over_long_text_is_kept_whole_for_the_rules_to_refuse():
    e = sp_free_text()
    reply = parse_reply(e, FALLBACK + "😀" * 2001)
    assert reply == TextReply("😀" * 2001)
    assert isinstance(reply, TextReply)
    result = judge(e, attempt(ALICE, text=reply.text), PEOPLE, NOW)
    assert isinstance(result, Refusal)
    assert result.code is RefusalCode.TOO_LONG
    assert result.message == "Your answer is 2,001 characters; the limit is 2,000."


def test_length_is_measured_after_the_fallback_is_stripped():
    e = sp_free_text()
    reply = parse_reply(e, "> " + "q" * 5000 + "\n\n" + "😀" * 2000)
    assert isinstance(reply, TextReply)
    assert reply.text == "😀" * 2000
    result = judge(e, attempt(ALICE, text=reply.text), PEOPLE, NOW)
    assert isinstance(result, Answer)
    assert result.text == "😀" * 2000


def test_choice_or_text_reply_names_an_option_or_is_the_text():
    e = elicitation(answer_mode=AnswerMode.CHOICE_OR_TEXT)
    assert parse_reply(e, "deny") == ChoiceReply("deny")
    assert parse_reply(e, "deny, but ask again tomorrow") == TextReply(
        "deny, but ask again tomorrow"
    )
    help_reply = parse_reply(e, "")
    assert isinstance(help_reply, HelpReply)
    assert "Or reply with your own answer as text" in help_reply.message


def test_multi_choice_reply_names_several():
    e = elicitation(answer_mode=AnswerMode.MULTI_CHOICE)
    assert parse_reply(e, "1, 3") == MultiChoiceReply(("allow_once", "deny"))
    assert parse_reply(e, "deny,Allow once,") == MultiChoiceReply(("deny", "allow_once"))
    assert parse_reply(e, "2") == ChoiceReply("allow_always")
    assert parse_reply(e, "1,") == ChoiceReply("allow_once")
    assert parse_reply(e, "1, 1") == MultiChoiceReply(("allow_once", "allow_once"))
    reply = parse_reply(e, "1, maybe")
    assert isinstance(reply, HelpReply)
    assert "separated by commas" in reply.message


def test_multi_choice_label_with_a_comma_is_one_option():
    e = elicitation(
        answer_mode=AnswerMode.MULTI_CHOICE,
        options=(Option(id="a", label="Yes, go"), Option(id="b", label="No")),
    )
    assert parse_reply(e, "yes, go") == ChoiceReply("a")


def test_secret_reply_gets_help_and_is_never_echoed():
    e = elicitation(answer_mode=AnswerMode.SECRET, options=())
    reply = parse_reply(e, "hunter2-canary")
    assert isinstance(reply, HelpReply)
    assert "private form" in reply.message
    assert "hunter2" not in reply.message


def test_acknowledge_reply_is_a_comment():
    assert parse_reply(sp_bare(), "done") == TextReply("done")
    reply = parse_reply(sp_bare(), " ")
    assert isinstance(reply, HelpReply)
    assert "acknowledge" in reply.message


def test_help_marks_options_needing_a_comment():
    reject = Option(id="reject", label="Reject", meaning=Meaning.REJECT, requires_text=True)
    assert "1. Reject (reject) (needs a comment" in help_message(elicitation(options=(reject,)))


def test_decorated_label_matches_plain_reply_and_options_less_choice_gets_help():
    e = elicitation(options=(Option(id="ok", label="Yes."), Option(id="no", label="No")))
    assert parse_reply(e, "yes") == ChoiceReply("ok")
    assert parse_reply(e, "YES.") == ChoiceReply("ok")
    broken = elicitation(answer_mode=AnswerMode.MULTI_CHOICE, options=())
    reply = parse_reply(broken, "1")
    assert isinstance(reply, HelpReply)
    assert "no options" in reply.message

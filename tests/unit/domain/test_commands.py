"""``subscribe``'s policy words, read once for Slack and Matrix (bot.domain.commands): the same
rules and messages as a ``[[routes]]`` block, the wrong word named; and what ``policy`` lists."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bot.app.config import RouteConfig
from bot.domain.actions import Command, CommandResult, parse_command
from bot.domain.commands import channel_policies, describe
from bot.domain.judge import judge_command
from bot.domain.model import Identity, People, Route, RouteMatch
from bot.domain.policy import DEFAULT_POLICY, RoutePolicy, check_approvers
from bot.domain.routing import chat_route, policy_of
from tests.conftest import REPO

ADMIN = Identity(platform="matrix", user="@admin:example.org")
MODERATOR = Identity(platform="matrix", user="@mod:example.org")
PEOPLE = People(admins=frozenset({ADMIN.key}))


def test_every_policy_word_and_its_spellings() -> None:
    parsed = parse_command(
        "subscribe acme board brd_1 approvers slack:U0BOB, matrix:@bob:example.org,admins "
        "quorum 2 approve-on slack,web Anyone-May-Reject"
    )
    assert parsed == CommandResult(
        "subscribe",
        "acme",
        "brd_1",
        policy=RoutePolicy(
            approvers=("slack:U0BOB", "matrix:@bob:example.org", "admins"),
            quorum=2,
            approve_on=("slack", "web"),
            anyone_may_reject=True,
        ),
    )
    # Any order after the workspace; a lone word is the whole policy (the rest: defaults).
    assert parse_command("subscribe acme quorum 3 board b").policy == RoutePolicy(quorum=3)
    assert parse_command("subscribe acme anyone_may_reject").policy == RoutePolicy(
        anyone_may_reject=True
    )
    assert parse_command("subscribe acme quorum 1").policy == DEFAULT_POLICY
    # No policy word: none given (an existing route keeps its own).
    assert parse_command("subscribe acme board b").policy is None


@pytest.mark.parametrize(
    ("words", "problem"),
    [
        ("quorum 0", "quorum: '0' must be a whole number from 1 to 50."),
        ("quorum 51", "quorum: '51' must be a whole number from 1 to 50."),
        ("quorum two", "quorum: 'two' must be a whole number from 1 to 50."),
        ("quorum -1", "quorum: '-1' must be a whole number from 1 to 50."),
        ("quorum", "`quorum` needs a value: quorum 2."),
        ("quorum 2 3", "'3' is not understood here: after the workspace come board <id>, "),
        ("quorum 2 quorum 3", "`quorum` is given twice."),
        ("approvers bob", "approvers: 'bob' is not an approver: use a person (slack:U…, "),
        ("approvers slack:U0A,slack:U0A", "approvers: names slack:U0A more than once."),
        ("approvers , ,", "approvers: must name at least one approver, or be left out"),
        ("approve_on irc,web", "approve_on: 'irc': not a surface (use slack, matrix, web)."),
        ("approve_on web,web", "approve_on: names a surface more than once."),
        ("board", "`board` needs a value: board <id>."),
        ("board <!here>", "'<!here>' is not a workspace or board id."),
        ("shelf 1", "'shelf' is not understood here"),
    ],
)
def test_a_wrong_word_is_named(words: str, problem: str) -> None:
    parsed = parse_command(f"subscribe acme {words}")
    print(f"\nsubscribe acme {words}\n  -> {parsed.problem}")
    assert (parsed.verb, parsed.workspace, parsed.policy) == ("subscribe", None, None)
    assert (parsed.problem or "").startswith(problem)


def test_unsubscribe_takes_no_policy_and_policy_no_arguments() -> None:
    assert parse_command("unsubscribe acme quorum 2").problem == (
        "`quorum` is for subscribe only: unsubscribe takes <workspace> [board <id>]."
    )
    assert parse_command("policy") == CommandResult("policy")
    assert parse_command("POLICY here").problem == "`policy` takes no arguments."
    assert (parse_command("subscribe quorum 2").problem or "").startswith("Usage: subscribe")


@pytest.mark.parametrize(
    "entry",
    [
        "slack:U0BOB",
        "slack:W0GRID",
        "matrix:@bob:example.org",
        "web:dave",
        "web-group:ops",
        "admins",
        "slack:S0DEPLOYERS",
        "matrix-power:50",
        "bob",
        "slack:bob",
        "matrix-power:high",
    ],
)
def test_chat_takes_exactly_the_entries_the_config_takes_with_its_message(entry: str) -> None:
    """The chat and a ``[[routes]]`` block take the same entries, and the chat's message is the
    config's, after the word."""
    parsed = parse_command(f"subscribe acme approvers {entry}")
    problem: str | None = None
    try:
        check_approvers([entry])
    except ValueError as e:
        problem = str(e)
    if problem is None:
        RouteConfig(approvers=(entry,))
        assert parsed.policy == RoutePolicy(approvers=(entry,))
    else:
        with pytest.raises(ValidationError):
            RouteConfig(approvers=(entry,))
        assert parsed.problem == f"approvers: {problem}."


def test_only_workspace_admins_set_who_may_decide() -> None:
    words = "subscribe acme approvers admins"
    by_moderator = judge_command(Command(MODERATOR, "matrix:!r:x", words, elevated=True), PEOPLE)
    assert (by_moderator.refused, by_moderator.admin_only) == (True, True)
    plain = judge_command(
        Command(MODERATOR, "matrix:!r:x", "subscribe acme", elevated=True), PEOPLE
    )
    assert not plain.refused
    by_admin = judge_command(Command(ADMIN, "matrix:!r:x", words), PEOPLE)
    assert not by_admin.refused
    assert by_admin.policy == RoutePolicy(approvers=("admins",))
    stranger = judge_command(Command(MODERATOR, "matrix:!r:x", words), PEOPLE)
    assert (stranger.refused, stranger.admin_only) == (True, False)


def test_policy_lists_the_routes_posting_here_by_name() -> None:
    routes = (
        Route(
            match=RouteMatch(source="superpipeline", workspace="acme"),
            destinations=("slack:C0DEPLOYS", "web"),
            approvers=("slack:U0BOB", "admins"),
            quorum=2,
            approve_on=("web",),
            anyone_may_reject=True,
        ),
        Route(match=RouteMatch(workspace="initech"), destinations=("slack:C0OTHER",)),
        chat_route("acme", "brd_1", "slack:C0DEPLOYS", RoutePolicy(approvers=("web:dave",))),
        chat_route("globex", None, "slack:C0DEPLOYS"),
    )
    lines = channel_policies(routes, "slack:C0DEPLOYS")
    print("\n" + "\n".join(lines))
    assert lines == (
        "source=superpipeline workspace=acme (config): approvers: slack:U0BOB, admins; "
        "quorum: 2; approve_on: web; anyone_may_reject: yes",
        "workspace=acme board=brd_1 (chat): approvers: web:dave; quorum: 1; "
        "approve_on: every surface; anyone_may_reject: no",
        "workspace=globex (chat): approvers: anyone but the asker; quorum: 1; "
        "approve_on: every surface; anyone_may_reject: no",
    )
    assert channel_policies(routes, "matrix:!elsewhere:x") == ()

    # A route an earlier one always matches first never decides anything: it says so.
    shadowed = channel_policies((Route(destinations=("web",)), *routes), "slack:C0DEPLOYS")
    print("\n" + "\n".join(shadowed))
    hidden = " (never used: everything (config) matches first)"
    assert all(line.endswith(hidden) for line in shadowed)
    wider = chat_route("acme", None, "slack:C0DEPLOYS")
    narrower = chat_route("acme", "brd_1", "slack:C0DEPLOYS")
    both = channel_policies((narrower, wider), "slack:C0DEPLOYS")
    assert not any(line.endswith(")") for line in both), "a narrower route does not hide a wider"
    assert channel_policies((wider, narrower), "slack:C0DEPLOYS")[1].endswith(
        " (never used: workspace=acme (chat) matches first)"
    )


@given(
    st.lists(
        st.sampled_from(
            [
                "approvers",
                "quorum",
                "approve_on",
                "board",
                "anyone_may_reject",
                "slack:U0A,",
                "admins",
                "2",
                "0",
                "web",
                "irc",
                ",",
                "x",
            ]
        ),
        max_size=8,
    )
)
def test_a_parsed_policy_always_makes_a_valid_route(words: list[str]) -> None:
    parsed = parse_command("subscribe acme " + " ".join(words))
    assert (parsed.problem is None) == (parsed.workspace == "acme")
    if parsed.policy is not None:
        route = chat_route("acme", parsed.board, "slack:C0X", parsed.policy)
        assert policy_of(route) == parsed.policy
        assert describe(parsed.policy).startswith("approvers: ")


def test_the_commands_docs_approvals_shows_parse() -> None:
    doc = (REPO / "docs" / "approvals.md").read_text(encoding="utf-8")
    shown = [line for line in doc.splitlines() if line.startswith("/elicitbot ")]
    assert len(shown) == 2, shown
    for line in shown:
        parsed = parse_command(line.removeprefix("/elicitbot "))
        assert parsed.problem is None, (line, parsed.problem)
    assert parse_command(shown[0].removeprefix("/elicitbot ")).policy == RoutePolicy(
        approvers=("slack:U0BOB", "slack:U0CAROL", "web:dave", "admins"),
        quorum=2,
        approve_on=("slack", "web"),
        anyone_may_reject=True,
    )


def test_a_web_group_approver_needs_the_groups_header_as_in_the_config() -> None:
    words = "subscribe acme approvers web-group:ops, admins"
    without = judge_command(Command(ADMIN, "matrix:!r:x", words), PEOPLE, web_groups=False)
    print(f"\n{words} (no [web] groups_header)\n  -> {without.problem}")
    assert (without.verb, without.workspace, without.policy) == ("subscribe", None, None)
    assert without.problem == (
        "approvers: web-group:ops needs [web] groups_header in the config, the sign-in proxy's "
        "header naming the user's groups."
    )
    with_header = judge_command(Command(ADMIN, "matrix:!r:x", words), PEOPLE, web_groups=True)
    assert with_header.policy == RoutePolicy(approvers=("web-group:ops", "admins"))
    plain = judge_command(Command(ADMIN, "matrix:!r:x", "subscribe acme"), PEOPLE, web_groups=False)
    assert plain.problem is None

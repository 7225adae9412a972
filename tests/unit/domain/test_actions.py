"""Chat commands, read once for every surface: the grammar and who may run them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.domain.actions import CommandResult, may_command, parse_command
from bot.domain.model import Identity, People
from tests.unit.domain.builders import ALICE

ADMIN = Identity(platform="matrix", user="@admin:example.org")
PEOPLE = People(admins=frozenset({ADMIN.key}))


def test_subscribe_a_workspace_and_a_board() -> None:
    assert parse_command("subscribe acme") == CommandResult("subscribe", "acme")
    assert parse_command("Subscribe acme BOARD brd_1") == CommandResult(
        "subscribe", "acme", "brd_1"
    )
    assert parse_command("unsubscribe acme board brd_1") == CommandResult(
        "unsubscribe", "acme", "brd_1"
    )


def test_routes_and_help() -> None:
    assert parse_command("routes") == CommandResult("routes")
    assert parse_command("") == CommandResult("help")
    assert parse_command("--help") == CommandResult("help")
    assert parse_command("routes now").problem == "`routes` takes no arguments."


def test_what_does_not_parse_says_why() -> None:
    assert (parse_command("subscribe").problem or "").startswith(
        "Usage: subscribe <workspace> [board <id>] "
    )
    # A stray word is named (it used to get the bare usage).
    assert (parse_command("subscribe acme shelf 1").problem or "").startswith(
        "'shelf' is not understood here"
    )
    assert "is not a workspace or board id" in (parse_command("subscribe <!channel>").problem or "")
    assert parse_command("subscribe " + "a" * 129).problem is not None
    unknown = parse_command("deploy prod")
    assert (unknown.verb, unknown.problem) == ("help", "Unknown command 'deploy'.")


def test_admins_and_elevated_members_run_commands_nobody_else() -> None:
    assert may_command(ADMIN, PEOPLE)
    assert not may_command(ALICE, PEOPLE)
    assert may_command(ALICE, PEOPLE, elevated=True)


@given(st.text(max_size=300))
def test_parsing_never_raises_and_a_parsed_command_names_only_safe_ids(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.verb in ("subscribe", "unsubscribe", "routes", "policy", "help")
    for name in (parsed.workspace, parsed.board):
        assert name is None or (0 < len(name) <= 128 and "<" not in name and " " not in name)

"""The words of a chat command after its verb, the same for Slack (``/elicitbot``) and Matrix
(``!elicitbot``). The policy words go through the config's own checks (:mod:`bot.domain.policy`),
so a chat-made route takes exactly what a ``[[routes]]`` block takes, with the same messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bot.domain.model import Route, RouteMatch
from bot.domain.policy import (
    DEFAULT_POLICY,
    MAX_QUORUM,
    RoutePolicy,
    check_approvers,
    check_quorum,
    check_surfaces,
)
from bot.domain.routing import policy_of, route_name

WEB_GROUP = "web-group:"
NAME = re.compile(r"^[\w.:@/-]{1,128}$")
"""A workspace or board id as a command may name it."""

BOARD = "board"
APPROVERS = "approvers"
QUORUM = "quorum"
APPROVE_ON = "approve_on"
ANYONE_MAY_REJECT = "anyone_may_reject"
POLICY_WORDS = (APPROVERS, QUORUM, APPROVE_ON, ANYONE_MAY_REJECT)
_WORDS = {w: w for w in (BOARD, *POLICY_WORDS)} | {
    "approve-on": APPROVE_ON,
    "anyone-may-reject": ANYONE_MAY_REJECT,
}
_ONE_VALUE = frozenset({BOARD, QUORUM})
_NUMBER = re.compile(r"^\d{1,9}$")
_FOLLOWS = "board <id>, approvers <a,b>, quorum <n>, approve_on <surfaces> or anyone_may_reject"


@dataclass(frozen=True)
class Target:
    """What ``subscribe`` (``unsubscribe``) names: the workspace, its board, and for
    ``subscribe`` the policy its words give (None: it gave none)."""

    workspace: str
    board: str | None = None
    policy: RoutePolicy | None = None


def usage(verb: str) -> str:
    if verb == "subscribe":
        return (
            "Usage: subscribe <workspace> [board <id>] [approvers <a,b>] [quorum <n>] "
            "[approve_on <surfaces>] [anyone_may_reject]"
        )
    return f"Usage: {verb} <workspace> [board <id>]"


def read_target(verb: str, rest: Sequence[str]) -> Target:
    """``rest``: the words after ``subscribe`` / ``unsubscribe``. ValueError: what is wrong, the
    word first (``quorum: '0' must be …``)."""
    if not rest or rest[0].lower() in _WORDS:
        raise ValueError(usage(verb))
    workspace = _name(rest[0])
    given = _words(rest[1:])
    board_words = given.pop(BOARD, None)
    board = _name(board_words[0]) if board_words else None
    if given and verb != "subscribe":
        raise ValueError(
            f"`{next(iter(given))}` is for subscribe only: {verb} takes <workspace> [board <id>]."
        )
    if not given:
        return Target(workspace, board)
    try:
        policy = RoutePolicy(
            approvers=_checked(APPROVERS, given, check_approvers),
            quorum=_quorum(given.get(QUORUM)),
            approve_on=_checked(APPROVE_ON, given, check_surfaces),
            anyone_may_reject=ANYONE_MAY_REJECT in given,
        )
    except ValueError as e:
        raise ValueError(f"{e}.") from None
    return Target(workspace, board, policy)


def check_web_groups(policy: RoutePolicy | None, *, web_groups: bool) -> None:
    """A ``web-group:`` approver needs ``[web] groups_header`` (as ``check-config`` says of a
    ``[[routes]]`` block): without it nobody is in the group, and the route would quietly
    refuse everyone it names. ValueError naming the word."""
    grouped = [a for a in (policy.approvers if policy else None) or () if a.startswith(WEB_GROUP)]
    if grouped and not web_groups:
        raise ValueError(
            f"approvers: {', '.join(grouped)} needs [web] groups_header in the config, the "
            "sign-in proxy's header naming the user's groups."
        )


def _words(tokens: Sequence[str]) -> dict[str, list[str]]:
    """Each word given and the tokens after it; ValueError naming a stray token, a repeated word
    or a word missing its value."""
    given: dict[str, list[str]] = {}
    taking: str | None = None
    for token in tokens:
        word = _WORDS.get(token.lower())
        if word is not None:
            if word in given:
                raise ValueError(f"`{word}` is given twice.")
            given[word] = []
            taking = None if word == ANYONE_MAY_REJECT else word
            continue
        if taking is None:
            raise ValueError(
                f"{token[:60]!r} is not understood here: after the workspace come {_FOLLOWS}."
            )
        given[taking].append(token)
        if taking in _ONE_VALUE:
            taking = None
    for word, values in given.items():
        if not values and word != ANYONE_MAY_REJECT:
            raise ValueError(f"`{word}` needs a value: {_example(word)}.")
    return given


def _example(word: str) -> str:
    return {
        BOARD: "board <id>",
        APPROVERS: "approvers slack:U0BOB,matrix:@bob:example.org,admins",
        QUORUM: "quorum 2",
        APPROVE_ON: "approve_on web",
    }[word]


def _name(text: str) -> str:
    if not NAME.match(text):
        raise ValueError(f"{text[:60]!r} is not a workspace or board id.")
    return text


def _checked(
    word: str,
    given: dict[str, list[str]],
    check: Callable[[Iterable[str] | None], tuple[str, ...] | None],
) -> tuple[str, ...] | None:
    tokens = given.get(word)
    if tokens is None:
        return None
    entries = [entry.strip() for token in tokens for entry in token.split(",") if entry.strip()]
    try:
        return check(entries)
    except ValueError as e:
        raise ValueError(f"{word}: {e}") from None


def _quorum(tokens: list[str] | None) -> int:
    if tokens is None:
        return 1
    [token] = tokens
    problem = f"must be a whole number from 1 to {MAX_QUORUM}"
    if _NUMBER.match(token):
        try:
            return check_quorum(int(token))
        except ValueError as e:
            problem = str(e)
    raise ValueError(f"{QUORUM}: {token[:20]!r} {problem}")


def describe(policy: RoutePolicy) -> str:
    """A policy in one line, by the config's key names: ``approvers: slack:U0BOB, admins;
    quorum: 2; approve_on: every surface; anyone_may_reject: no``."""
    approvers = ", ".join(policy.approvers) if policy.approvers else "anyone but the asker"
    surfaces = ", ".join(policy.approve_on) if policy.approve_on else "every surface"
    return (
        f"approvers: {approvers}; quorum: {policy.quorum}; approve_on: {surfaces}; "
        f"anyone_may_reject: {'yes' if policy.anyone_may_reject else 'no'}"
    )


def policy_lines(policy: RoutePolicy | None, previous: RoutePolicy | None) -> str:
    """What a ``subscribe`` reply says after its first sentence: who may decide now (unless it is
    the defaults and nothing was replaced), then the policy it replaced."""
    now = policy or DEFAULT_POLICY
    said = f"\nWho may decide: {describe(now)}" if now != DEFAULT_POLICY or previous else ""
    return said + (f"\nBefore: {describe(previous)}" if previous is not None else "")


def channel_policies(routes: Sequence[Route], destination: str) -> tuple[str, ...]:
    """``policy`` for the channel it is typed in: each route posting there, in order, with who may
    decide; a route an earlier one always matches first says so (its policy never applies)."""
    lines = []
    for i, route in enumerate(routes):
        if destination not in route.destinations:
            continue
        line = f"{route_name(route)} ({route.origin}): {describe(policy_of(route))}"
        first = next((r for r in routes[:i] if _covers(r.match, route.match)), None)
        if first is not None:
            line += f" (never used: {route_name(first)} ({first.origin}) matches first)"
        lines.append(line)
    return tuple(lines)


def _covers(earlier: RouteMatch, later: RouteMatch) -> bool:
    """Every question ``later`` matches, ``earlier`` matches too."""
    fields = ("source", "workspace", "board")
    return all(getattr(earlier, f) in (None, getattr(later, f)) for f in fields)

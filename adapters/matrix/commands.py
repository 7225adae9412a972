"""``!elicitbot`` room commands: admins route workspaces (and boards) to the room they type in.

- ``!elicitbot subscribe <workspace> [board <id>]``: elicitations of that workspace (board) come
  to this room;
- ``!elicitbot unsubscribe <workspace> [board <id>]``: removes routes made that way;
- ``!elicitbot routes``: every route, config and chat-made, first match first;
- ``!elicitbot`` / ``!elicitbot help``: this list.

Accepted from configured workspace admins (``people.admins``, ``matrix:@…``) and from room
members with power level ≥ 50 in the room. The power level lets a moderator route their room; it
does not make them a workspace admin (admin-only options still refuse them).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.domain.ports import Elicitations

PREFIX = "!elicitbot"
MODERATOR_LEVEL = 50
USAGE = (
    "elicitbot commands:\n"
    "!elicitbot subscribe <workspace> [board <id>] — send that workspace's questions here\n"
    "!elicitbot unsubscribe <workspace> [board <id>] — stop sending them here\n"
    "!elicitbot routes — list every route (first match wins)"
)
NOT_ALLOWED = (
    "Only workspace admins or room moderators (power level 50 or more) can run elicitbot commands."
)
_NAME = re.compile(r"^[\w.:@-]{1,128}$")


@dataclass(frozen=True)
class Command:
    verb: str
    """``subscribe``, ``unsubscribe``, ``routes`` or ``help``."""
    workspace: str | None = None
    board: str | None = None
    problem: str | None = None
    """Why the command could not be read (shown with the usage)."""


def parse_command(body: str) -> Command | None:
    """The command in a message body; None when it is not addressed to elicitbot."""
    words = body.split()
    if not words or words[0].lower() != PREFIX:
        return None
    args = words[1:]
    if not args or args[0].lower() in ("help", "-h", "--help"):
        return Command("help")
    verb = args[0].lower()
    if verb == "routes":
        return (
            Command("routes")
            if len(args) == 1
            else Command("routes", problem="`routes` takes no arguments.")
        )
    if verb in ("subscribe", "unsubscribe"):
        rest = args[1:]
        usage = f"Usage: !elicitbot {verb} <workspace> [board <id>]"
        if len(rest) == 1:
            workspace, board = rest[0], None
        elif len(rest) == 3 and rest[1].lower() == "board":  # noqa: PLR2004 - ws board <id>
            workspace, board = rest[0], rest[2]
        else:
            return Command(verb, problem=usage)
        for name in (workspace, board):
            if name is not None and not _NAME.match(name):
                return Command(verb, problem=f"{name[:60]!r} is not a workspace or board id.")
        return Command(verb, workspace, board)
    return Command("help", problem=f"Unknown command {args[0][:40]!r}.")


async def may_command(
    sender: str, elicitations: Elicitations, power_level: Callable[[], Awaitable[int]]
) -> bool:
    """A workspace admin, or a member with power level ≥ 50 in the room."""
    if f"matrix:{sender}" in elicitations.people.admins:
        return True
    return await power_level() >= MODERATOR_LEVEL


async def run_command(
    command: Command,
    *,
    elicitations: Elicitations,
    room_id: str,
    sender: str,
    power_level: Callable[[], Awaitable[int]],
) -> str:
    """Carry out ``command`` typed by ``sender`` in ``room_id``; returns the reply for the room."""
    if command.verb == "help" and command.problem is None:
        return USAGE
    if command.problem is not None:
        return f"{command.problem}\n{USAGE}"
    if not await may_command(sender, elicitations, power_level):
        return NOT_ALLOWED
    destination = f"matrix:{room_id}"
    workspace = command.workspace or ""
    where = f"workspace {workspace}" + (f" board {command.board}" if command.board else "")
    if command.verb == "subscribe":
        added = await elicitations.subscribe(
            workspace, command.board, destination, f"matrix:{sender}"
        )
        if added:
            return f"Subscribed: questions from {where} now come to this room."
        return f"Already subscribed: questions from {where} come to this room."
    if command.verb == "unsubscribe":
        removed = await elicitations.unsubscribe(workspace, command.board, destination)
        if removed:
            return f"Unsubscribed: questions from {where} no longer come to this room."
        return (
            f"No route made from chat sends {where} to this room "
            "(routes in the config file are changed there)."
        )
    lines = await elicitations.routes_text()
    if not lines:
        return "No routes: questions go to the web inbox only."
    return "Routes (first match wins):\n" + "\n".join(f"• {line}" for line in lines)

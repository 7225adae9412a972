"""``!elicitbot`` room commands in Matrix's words: admins route workspaces (and boards) to the room
they type in.

- ``!elicitbot subscribe <workspace> [board <id>]``: elicitations of that workspace (board) come
  to this room;
- ``!elicitbot unsubscribe <workspace> [board <id>]``: removes routes made that way;
- ``!elicitbot routes``: every route, config and chat-made, first match first;
- ``!elicitbot`` / ``!elicitbot help``: this list.

The grammar and who may run them are the core's (``bot.domain.actions.parse_command`` and
``may_command``, run by ``Elicitations.act``): configured workspace admins (``people.admins``,
``matrix:@…``), and room members whose power level in the room is at least ``MODERATOR_LEVEL``
(the listener says so as ``Command.elevated``). The power level lets a moderator route their
room; it does not make them a workspace admin (admin-only options still refuse them). Here is
only what the room reads back.
"""

from __future__ import annotations

from adapters.matrix.inbound import COMMAND_PREFIX
from bot.domain.actions import MODERATOR_LEVEL, CommandResult

PREFIX = COMMAND_PREFIX
USAGE = (
    "elicitbot commands:\n"
    "!elicitbot subscribe <workspace> [board <id>] — send that workspace's questions here\n"
    "!elicitbot unsubscribe <workspace> [board <id>] — stop sending them here\n"
    "!elicitbot routes — list every route (first match wins)"
)
NOT_ALLOWED = (
    f"Only workspace admins or room moderators (power level {MODERATOR_LEVEL} or more) can run "
    "elicitbot commands."
)
_USAGE_PREFIX = "Usage: "


def problem_text(result: CommandResult) -> str | None:
    """Why a command could not be read, naming the room's ``!elicitbot`` prefix in its usage."""
    problem = result.problem
    if problem is not None and problem.startswith(_USAGE_PREFIX):
        return f"{_USAGE_PREFIX}{PREFIX} {problem.removeprefix(_USAGE_PREFIX)}"
    return problem


def reply_text(result: CommandResult) -> str:
    """What the room reads back after the core ran (or refused) a command."""
    problem = problem_text(result)
    if result.verb == "help" and problem is None:
        return USAGE
    if problem is not None:
        return f"{problem}\n{USAGE}"
    if result.refused:
        return NOT_ALLOWED
    where = f"workspace {result.workspace or ''}" + (
        f" board {result.board}" if result.board else ""
    )
    if result.verb == "subscribe":
        if result.changed:
            return f"Subscribed: questions from {where} now come to this room."
        return f"Already subscribed: questions from {where} come to this room."
    if result.verb == "unsubscribe":
        if result.changed:
            return f"Unsubscribed: questions from {where} no longer come to this room."
        return (
            f"No route made from chat sends {where} to this room "
            "(routes in the config file are changed there)."
        )
    if not result.routes:
        return "No routes: questions go to the web inbox only."
    return "Routes (first match wins):\n" + "\n".join(f"• {line}" for line in result.routes)

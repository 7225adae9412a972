"""``!elicitbot`` room commands: what the room reads back. The grammar and who may run them
(workspace admins; room moderators may route their room, never decide as admins) are the core's
(``bot.domain.actions.parse_command``, ``may_command``).
"""

from __future__ import annotations

from adapters.matrix.translate import COMMAND_PREFIX
from bot.domain.actions import MODERATOR_LEVEL, CommandResult
from bot.domain.commands import policy_lines

USAGE = (
    "elicitbot commands:\n"
    "!elicitbot subscribe <workspace> [board <id>] [approvers <a,b>] [quorum <n>] "
    "[approve_on <surfaces>] [anyone_may_reject] — send that workspace's questions here; the "
    "policy words say who may decide, as a [[routes]] block does (given, they are the route's "
    "whole policy; left out, it keeps the one it has)\n"
    "!elicitbot unsubscribe <workspace> [board <id>] — stop sending them here\n"
    "!elicitbot routes — list every route (first match wins)\n"
    "!elicitbot policy — who may decide, for each route posting to this room"
)
NOT_ALLOWED = (
    f"Only workspace admins or room moderators (power level {MODERATOR_LEVEL} or more) can run "
    "elicitbot commands."
)
ADMINS_ONLY = (
    "Only workspace admins (people.admins in the config) can say who may decide (approvers, "
    "quorum, approve_on, anyone_may_reject); subscribe without those words to route this room."
)
_USAGE_PREFIX = "Usage: "


def problem_text(result: CommandResult) -> str | None:
    """Why a command could not be read, naming the room's ``!elicitbot`` prefix in its usage."""
    problem = result.problem
    if problem is not None and problem.startswith(_USAGE_PREFIX):
        return f"{_USAGE_PREFIX}{COMMAND_PREFIX} {problem.removeprefix(_USAGE_PREFIX)}"
    return problem


def reply_text(result: CommandResult) -> str:
    """What the room reads back after the core ran (or refused) a command."""
    problem = problem_text(result)
    if result.verb == "help" and problem is None:
        return USAGE
    if problem is not None:
        return f"{problem}\n{USAGE}"
    if result.refused:
        return ADMINS_ONLY if result.admin_only else NOT_ALLOWED
    where = f"workspace {result.workspace or ''}" + (
        f" board {result.board}" if result.board else ""
    )
    if result.verb == "subscribe":
        return _subscribed(result, where)
    if result.verb == "unsubscribe":
        if result.changed:
            return f"Unsubscribed: questions from {where} no longer come to this room."
        return (
            f"No route made from chat sends {where} to this room "
            "(routes in the config file are changed there)."
        )
    if result.verb == "policy":
        if not result.routes:
            return "No route posts to this room (!elicitbot routes lists them all)."
        return "Who may decide, for the routes posting to this room (first match wins):\n" + (
            "\n".join(f"• {line}" for line in result.routes)
        )
    if not result.routes:
        return "No routes: questions go to the web inbox only."
    return "Routes (first match wins):\n" + "\n".join(f"• {line}" for line in result.routes)


def _subscribed(result: CommandResult, where: str) -> str:
    if result.previous is not None:
        said = (
            f"Updated: questions from {where} come to this room with the policy you gave (the "
            "words left out are back to their defaults)."
        )
    elif result.changed:
        said = f"Subscribed: questions from {where} now come to this room."
    else:
        said = f"Already subscribed: questions from {where} come to this room."
    return said + policy_lines(result.policy, result.previous)

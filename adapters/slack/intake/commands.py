"""``/elicitbot`` slash commands as the core's :class:`~bot.domain.actions.Command`, and the reply
to its ``response_url``. The grammar and who may run them are the core's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.slack.markup.mrkdwn import fence, text
from adapters.slack.translate import text_of
from bot.domain.actions import Command, CommandResult
from bot.domain.commands import policy_lines
from bot.domain.model import Identity


def read_command(body: Mapping[str, Any]) -> tuple[Command, str] | None:
    """The command and the channel it was typed in."""
    user = text_of(body.get("user_id"))
    channel = text_of(body.get("channel_id"))
    if user is None or channel is None:
        return None
    who = Identity(platform="slack", user=user, team=text_of(body.get("team_id")))
    return Command(who, f"slack:{channel}", str(body.get("text") or "")), channel


def command_reply_to(body: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """Its ``response_url``, else an ephemeral to the user in the channel."""
    return (
        text_of(body.get("response_url")),
        text_of(body.get("user_id")),
        text_of(body.get("channel_id")),
    )


REFUSED_COMMAND = "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."
USAGE = (
    "Usage, in the channel to route to:\n"
    "• `/elicitbot subscribe <workspace> [board <id>] [approvers <a,b>] [quorum <n>] "
    "[approve_on <surfaces>] [anyone_may_reject]`: post that workspace's (or board's) requests "
    "here; the policy words say who may decide, as a `[[routes]]` block does (given, they are "
    "the route's whole policy; left out, it keeps the one it has)\n"
    "• `/elicitbot unsubscribe <workspace> [board <id>]`: stop\n"
    "• `/elicitbot routes`: every route, from the config and from chat\n"
    "• `/elicitbot policy`: who may decide, for each route posting to this channel"
)
_USAGE_PREFIX = "Usage: "


def command_text(result: CommandResult, channel: str) -> str:
    if result.refused:
        return REFUSED_COMMAND
    if result.problem is not None:
        problem = result.problem
        if problem.startswith(_USAGE_PREFIX):
            problem = f"{_USAGE_PREFIX}/elicitbot {problem.removeprefix(_USAGE_PREFIX)}"
        return f"{text(problem)}\n{USAGE}"
    if result.verb not in ("routes", "policy", "subscribe", "unsubscribe"):
        return USAGE
    if result.verb == "routes":
        shown = "\n".join(result.routes) if result.routes else "(no routes)"
        return f"Routes, first match wins:\n```{shown}```"
    if result.verb == "policy":
        if not result.routes:
            return f"No route posts to <#{channel}>: `/elicitbot routes` lists them all."
        return (
            f"Who may decide, for the routes posting to <#{channel}> (first match wins):\n"
            + fence("\n".join(result.routes))
        )
    what = f"workspace `{result.workspace}`" + (f", board `{result.board}`" if result.board else "")
    if result.verb == "subscribe":
        return _subscribed(result, what, channel)
    return (
        f"Unsubscribed: {what} no longer comes to <#{channel}>."
        if result.changed
        else f"Nothing to remove: {what} was not subscribed here from chat."
    )


def _subscribed(result: CommandResult, what: str, channel: str) -> str:
    if result.previous is not None:
        said = (
            f"Updated: {what} comes to <#{channel}> with the policy you gave (the words left out "
            "are back to their defaults)."
        )
    elif result.changed:
        said = f"Subscribed: requests of {what} now come to <#{channel}>."
    else:
        said = f"Already subscribed: {what} comes to <#{channel}>."
    return said + text(policy_lines(result.policy, result.previous))

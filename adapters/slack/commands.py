"""``/elicitbot`` slash commands: the payload as the core's :class:`~bot.domain.actions.Command`,
and what it did in Slack's words, for the one who ran it (to its ``response_url``).

- ``/elicitbot subscribe <workspace> [board <id>]``: that workspace's (board's) requests come to
  the channel it is typed in;
- ``/elicitbot unsubscribe <workspace> [board <id>]``: removes routes made that way;
- ``/elicitbot routes``: every route, config and chat-made, first match first.

The grammar and who may run them are the core's (``bot.domain.actions.parse_command`` and
``may_command``, run by ``Elicitations.act``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.slack.translate import text_of
from bot.domain.actions import Command, CommandResult
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
    """Where a command's reply goes: (its ``response_url``, else an ephemeral to the user in the
    channel)."""
    return (
        text_of(body.get("response_url")),
        text_of(body.get("user_id")),
        text_of(body.get("channel_id")),
    )


REFUSED_COMMAND = "Only elicitbot admins (`people.admins` in the config) can use /elicitbot."
USAGE = (
    "Usage, in the channel to route to:\n"
    "• `/elicitbot subscribe <workspace> [board <id>]`: post that workspace's (or board's) "
    "requests here\n"
    "• `/elicitbot unsubscribe <workspace> [board <id>]`: stop\n"
    "• `/elicitbot routes`: every route, from the config and from chat"
)


def command_text(result: CommandResult, channel: str) -> str:
    """What a ``/elicitbot`` command did, for the one who ran it."""
    if result.refused:
        return REFUSED_COMMAND
    if result.problem is not None or result.verb not in ("routes", "subscribe", "unsubscribe"):
        return USAGE
    if result.verb == "routes":
        shown = "\n".join(result.routes) if result.routes else "(no routes)"
        return f"Routes, first match wins:\n```{shown}```"
    what = f"workspace `{result.workspace}`" + (f", board `{result.board}`" if result.board else "")
    if result.verb == "subscribe":
        return (
            f"Subscribed: requests of {what} now come to <#{channel}>."
            if result.changed
            else f"Already subscribed: {what} comes to <#{channel}>."
        )
    return (
        f"Unsubscribed: {what} no longer comes to <#{channel}>."
        if result.changed
        else f"Nothing to remove: {what} was not subscribed here from chat."
    )

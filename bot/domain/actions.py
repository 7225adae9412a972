"""What people do, as the core's events, and what the core says back.

Every surface (Slack, Matrix, the web inbox) translates its platform payloads into one of these
and calls :meth:`bot.domain.ports.Elicitations.act`; the core applies the answer rules (reply
parsing, who may answer, admin-only options, claims, chat commands) and returns an
:class:`Outcome` the surface shows. No surface judges, parses a reply or checks an admin itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from bot.domain.deadlines import Claim
from bot.domain.model import Answer, Disclosure, Identity, People, Refusal
from bot.domain.policy import NO_STANDING, Standing

if TYPE_CHECKING:  # ports imports this module
    from bot.domain.ports import PromptView

# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class Choose:
    """Options chosen on a message: a button, a select, a keycap reaction, a multi-select."""

    key: str
    who: Identity
    via: str
    """The destination it came through (``slack:C…``, ``matrix:!room``, ``web``)."""
    option_ids: tuple[str, ...]
    revision: int | None = None
    """The approval subject revision the person saw, when the surface knows it."""
    shown: Disclosure | None = None
    """What the message (or review) it came from showed: approving needs ``whole`` (rule 2).
    The surface decides it from its own rendering, never from the payload."""
    form: bool = False
    """The surface can open a form for a comment: one option that needs a comment, which this
    person may pick here, comes back as :attr:`OutcomeKind.FORM` (nothing written) rather than
    refused for the missing comment."""
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (rule 9's approvers)."""


@dataclass(frozen=True)
class Open:
    """Reply… or Review…: the person asks for a form to answer in. While the question waits the
    outcome is :attr:`OutcomeKind.FORM`; once it closed, the refusal that says how."""

    key: str
    who: Identity
    via: str
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (rule 9's approvers)."""


@dataclass(frozen=True)
class Reply:
    """A thread reply (or its edit) under a posted copy: the core reads it (a number, an id or a
    label names an option; on a free-text question the reply is the answer)."""

    key: str
    who: Identity
    via: str
    text: str
    shown: Disclosure | None = None
    """What the copy replied under showed (rule 2), as for :class:`Choose`."""
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (rule 9's approvers)."""


@dataclass(frozen=True)
class Submit:
    """A form: a modal, the web inbox's form. ``secret``: ``text`` goes upstream, never stored."""

    key: str
    who: Identity
    via: str
    option_ids: tuple[str, ...] = ()
    text: str | None = None
    secret: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    revision: int | None = None
    shown: Disclosure | None = None
    """What the form (or the message it opened from) showed (rule 2), as for :class:`Choose`."""
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (rule 9's approvers)."""


@dataclass(frozen=True)
class ClaimIt:
    """ "I'm on it"."""

    key: str
    who: Identity
    via: str
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (rule 9's approvers)."""


@dataclass(frozen=True)
class Command:
    """A chat command (``/elicitbot …`` in Slack, ``!elicitbot …`` in Matrix), typed in
    ``destination``. ``elevated``: the platform grants it (a Matrix room moderator)."""

    who: Identity
    destination: str
    text: str
    """The words after the command prefix."""
    elevated: bool = False


@dataclass(frozen=True)
class OnView:
    """An action its surface can name only against the elicitation as it stands: a Slack button
    names its option by the value it carries (an index when the ids were too long), and what the
    message shows (rule 2) is the surface's own rendering of the request now. The core reads the
    elicitation once, hands ``translate`` that view and judges what it returns (None: the click
    answers nothing, :attr:`OutcomeKind.IGNORED`); the outcome carries the view."""

    key: str
    who: Identity
    """Who acts (``translate`` returns their action)."""
    via: str
    translate: Callable[[PromptView], Choose | Open | None]


Action = Choose | Reply | Submit | ClaimIt | Open | OnView | Command


# --------------------------------------------------------------------------- outcomes


class OutcomeKind(StrEnum):
    ANSWERED = "answered"
    """The answer was recorded: it won."""
    REFUSED = "refused"
    """Told privately to the person: why not (``refusal``)."""
    HELP = "help"
    """The reply named nothing this question takes: how to answer (``message``)."""
    IGNORED = "ignored"
    """Nothing to say: chatter in a thread after the answer."""
    CLAIMED = "claimed"
    VOTED = "voted"
    """An approval was counted toward the route's quorum (``message`` says how many)."""
    FORM = "form"
    """Nothing written: the surface opens its form (for ``option_id``'s comment, or Reply…)."""
    COMMAND = "command"
    NOT_FOUND = "not_found"
    """The message is no longer connected to an elicitation elicitbot knows."""


NOT_FOUND_TEXT = "This message is no longer connected to a request elicitbot knows."


@dataclass(frozen=True)
class CommandResult:
    """What a chat command did; each surface writes it in its own words."""

    verb: str
    """``subscribe``, ``unsubscribe``, ``routes`` or ``help``."""
    workspace: str | None = None
    board: str | None = None
    problem: str | None = None
    """Why it could not be read (the usage follows)."""
    refused: bool = False
    """The person may not run commands."""
    changed: int = 0
    """Routes added (subscribe: 0 or 1) or removed (unsubscribe)."""
    routes: tuple[str, ...] = ()
    """Every route, one line each (``routes``)."""


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    key: str | None = None
    message: str = ""
    """The sentence for the person (a refusal, how to answer, a claim's confirmation)."""
    answer: Answer | None = None
    refusal: Refusal | None = None
    claim: Claim | None = None
    command: CommandResult | None = None
    identity_refused: bool = False
    """Refused for who the person is (the asker, an agent, a bot), not for what they said."""
    option_id: str | None = None
    """The option a :attr:`OutcomeKind.FORM` asks a comment for."""
    view: PromptView | None = None
    """For an :class:`OnView`: the elicitation as the judgement read it, before this action's
    write (without the schedule, whose timeline is not read), for what the surface shows next
    (a form, the thread note)."""


# --------------------------------------------------------------------------- chat commands

MODERATOR_LEVEL = 50
"""A Matrix power level at which room members may run commands (not a workspace admin)."""
MAX_ID = 128
_NAME = re.compile(r"^[\w.:@/-]{1,128}$")


def parse_command(text: str) -> CommandResult:
    """``subscribe <workspace> [board <id>]``, ``unsubscribe …``, ``routes``, ``help``."""
    args = text.split()
    if not args or args[0].lower() in ("help", "-h", "--help"):
        return CommandResult("help")
    verb = args[0].lower()
    if verb == "routes":
        return (
            CommandResult("routes")
            if len(args) == 1
            else CommandResult("routes", problem="`routes` takes no arguments.")
        )
    if verb in ("subscribe", "unsubscribe"):
        rest = args[1:]
        usage = f"Usage: {verb} <workspace> [board <id>]"
        if len(rest) == 1:
            workspace, board = rest[0], None
        elif len(rest) == 3 and rest[1].lower() == "board":  # noqa: PLR2004 - ws board <id>
            workspace, board = rest[0], rest[2]
        else:
            return CommandResult(verb, problem=usage)
        for name in (workspace, board):
            if name is not None and not _NAME.match(name):
                return CommandResult(verb, problem=f"{name[:60]!r} is not a workspace or board id.")
        return CommandResult(verb, workspace, board)
    return CommandResult("help", problem=f"Unknown command {args[0][:40]!r}.")


def may_command(who: Identity, people: People, *, elevated: bool = False) -> bool:
    """Workspace admins (``people.admins``) run commands; so does whoever the platform elevates
    (a Matrix room moderator), which does not make them an admin for admin-only options."""
    return who.key in people.admins or elevated

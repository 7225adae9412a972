"""What people do, as the core's events, and what the core says back.

Every surface translates its payloads into one of these and calls
:meth:`bot.domain.ports.Elicitations.act`; the core judges and returns an :class:`Outcome` to
show. No surface judges, parses a reply or checks an admin itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from bot.domain.commands import read_target
from bot.domain.deadlines import Claim
from bot.domain.model import Answer, Disclosure, ElicitationKey, Identity, People, Refusal
from bot.domain.policy import NO_STANDING, RoutePolicy, Standing

if TYPE_CHECKING:  # ports imports this module
    from bot.domain.ports import PromptView


@dataclass(frozen=True)
class _OnElicitation:
    """What every action on one elicitation carries: its key, who acts, and the destination it
    came through (``slack:C…``, ``matrix:!room``, ``web``)."""

    key: ElicitationKey
    who: Identity
    via: str


@dataclass(frozen=True)
class Choose(_OnElicitation):
    """Options chosen on a message: a button, a select, a keycap reaction, a multi-select."""

    option_ids: tuple[str, ...]
    revision: int | None = None
    """The approval subject revision the person saw, when the surface knows it."""
    digest: str | None = None
    """The approval subject digest the person saw (rule 2), when the surface knows it."""
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
class Open(_OnElicitation):
    """Reply… or Review…: the person asks for a form to answer in. While the question waits the
    outcome is :attr:`OutcomeKind.FORM`; once it closed, the refusal that says how."""

    standing: Standing = NO_STANDING


@dataclass(frozen=True)
class Reply(_OnElicitation):
    """A thread reply (or its edit) under a posted copy: the core reads it (a number, an id or a
    label names an option; on a free-text question the reply is the answer)."""

    text: str
    shown: Disclosure | None = None
    """What the copy replied under showed (rule 2), as for :class:`Choose`."""
    revision: int | None = None
    digest: str | None = None
    """The approval subject revision and digest that copy showed, when the surface knows."""
    standing: Standing = NO_STANDING


@dataclass(frozen=True)
class Submit(_OnElicitation):
    """A form: a modal, the web inbox's form. ``secret``: ``text`` goes upstream, never stored."""

    option_ids: tuple[str, ...] = ()
    text: str | None = None
    secret: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    revision: int | None = None
    digest: str | None = None
    """The approval subject revision and digest the form was built on, when known."""
    shown: Disclosure | None = None
    """What the form (or the message it opened from) showed (rule 2), as for :class:`Choose`."""
    standing: Standing = NO_STANDING


@dataclass(frozen=True)
class ClaimIt(_OnElicitation):
    """ "I'm on it"."""

    standing: Standing = NO_STANDING


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
class OnView(_OnElicitation):
    """An action its surface can name only against the elicitation as it stands (a Slack button's
    option index, what the message shows now). The core reads the elicitation once, hands
    ``translate`` that view and judges what it returns (None: :attr:`OutcomeKind.IGNORED`): the
    action of ``who``."""

    translate: Callable[[PromptView], Translated | Awaitable[Translated]]
    """Sync (a Slack click), or async where the surface must ask its platform first (a Matrix
    reaction: the person's name, their dedupe claim, a multiple choice's keycaps)."""


Translated = Choose | Open | ClaimIt | None
"""What an :class:`OnView` becomes against the view (None: nothing to judge)."""
Action = Choose | Reply | Submit | ClaimIt | Open | OnView | Command


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
    """``subscribe``, ``unsubscribe``, ``routes``, ``policy`` or ``help``."""
    workspace: str | None = None
    board: str | None = None
    problem: str | None = None
    """Why it could not be read (the usage follows)."""
    refused: bool = False
    """The person may not run commands."""
    changed: int = 0
    """Routes added or whose policy changed (subscribe: 0 or 1), or removed (unsubscribe)."""
    routes: tuple[str, ...] = ()
    """Every route, one line each (``routes``); this channel's routes and who may decide
    (``policy``, :func:`bot.domain.commands.channel_policies`)."""
    policy: RoutePolicy | None = None
    """``subscribe``: the policy its words give (None: none given, an existing route keeps its
    own); once carried out, the route's policy as stored."""
    previous: RoutePolicy | None = None
    """``subscribe`` that changed an existing route's policy: the policy it replaced."""
    admin_only: bool = False
    """Refused because only workspace admins set who may decide (a Matrix room moderator gave
    policy words)."""


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    key: ElicitationKey | None = None
    message: str = ""
    """The sentence for the person (a refusal, how to answer, a claim's confirmation)."""
    answer: Answer | None = None
    refusal: Refusal | None = None
    claim: Claim | None = None
    command: CommandResult | None = None
    identity_refused: bool = False
    """Refused for who the person is (the asker, an agent, a bot), not for what they said."""
    repeated: bool = False
    """A refusal this person was told before on this question (rule 9's "only the approvers",
    told once): ``message`` is a short reminder for a surface that must answer (a Slack click,
    the web inbox); a surface that need not (a Matrix room) says nothing."""
    option_id: str | None = None
    """The option a :attr:`OutcomeKind.FORM` asks a comment for."""
    view: PromptView | None = None
    """For an :class:`OnView`: the elicitation as the judgement read it, before this action's
    write (without the schedule, whose timeline is not read), for what the surface shows next
    (a form, the thread note)."""


MODERATOR_LEVEL = 50
"""A Matrix power level at which room members may run commands (not a workspace admin)."""


def parse_command(text: str) -> CommandResult:
    """``subscribe <workspace> [board <id>] [approvers <a,b>] [quorum <n>] [approve_on …]
    [anyone_may_reject]`` (:func:`bot.domain.commands.read_target`), ``unsubscribe …``,
    ``routes``, ``policy``, ``help``."""
    args = text.split()
    if not args or args[0].lower() in ("help", "-h", "--help"):
        return CommandResult("help")
    verb = args[0].lower()
    if verb in ("routes", "policy"):
        return (
            CommandResult(verb)
            if len(args) == 1
            else CommandResult(verb, problem=f"`{verb}` takes no arguments.")
        )
    if verb in ("subscribe", "unsubscribe"):
        try:
            target = read_target(verb, args[1:])
        except ValueError as e:
            return CommandResult(verb, problem=str(e))
        return CommandResult(verb, target.workspace, target.board, policy=target.policy)
    return CommandResult("help", problem=f"Unknown command {args[0][:40]!r}.")


def may_command(who: Identity, people: People, *, elevated: bool = False) -> bool:
    """Workspace admins (``people.admins``) run commands; so does whoever the platform elevates
    (a Matrix room moderator), which does not make them an admin for admin-only options."""
    return who.key in people.admins or elevated

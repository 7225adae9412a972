"""The normalised elicitation every source maps to, and the values the answer rules work on.

All datetimes are timezone-aware UTC. Models are frozen: a change is a new value.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, field_validator
from pydantic_core import CoreSchema, core_schema

from bot.domain.policy import NO_STANDING, Standing, check_approvers, check_quorum, check_surfaces

ElicitationKey = NewType("ElicitationKey", str)
"""The always-unique id of an elicitation: ``<source>:<source id>``."""


class Destination(str):
    """Where a copy goes: ``web``, ``slack:<channel or user>`` or ``matrix:<room or user>``. A
    ``str`` that knows its parts, stored and compared as exactly its text; ``Destination(text)``
    takes a value already checked, :meth:`parse` checks one that enters from outside."""

    __slots__ = ()

    @property
    def platform(self) -> str:
        """``web``, ``slack`` or ``matrix`` (whatever precedes the first ``:``)."""
        return self.partition(":")[0]

    @property
    def target(self) -> str:
        """The channel, room or person after the platform; empty for ``web``."""
        return self.partition(":")[2]

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """In a model: validated as a ``str`` (the model's own validator checks the form), then
        wrapped; serialised as the text."""
        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema())

    @classmethod
    def parse(cls, value: str) -> Destination:
        """``value`` as a destination; ValueError when it is not one."""
        d = cls(value)
        if d != "web" and not (d.platform in ("slack", "matrix") and d.target):
            msg = f"{value!r} is not 'web', 'slack:<id>' or 'matrix:<id>'"
            raise ValueError(msg)
        return d


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Status(StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class Kind(StrEnum):
    QUESTION = "question"
    APPROVAL = "approval"
    TASK = "task"


class AnswerMode(StrEnum):
    SINGLE_CHOICE = "single_choice"
    MULTI_CHOICE = "multi_choice"
    FREE_TEXT = "free_text"
    CHOICE_OR_TEXT = "choice_or_text"
    SECRET = "secret"  # noqa: S105 - an answer mode, not a password
    ACKNOWLEDGE = "acknowledge"


class Meaning(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    REVISE = "revise"
    CHOOSE = "choose"
    DEFER = "defer"


class Scope(StrEnum):
    ONCE = "once"
    RUN = "run"
    ALWAYS = "always"


class Option(Frozen):
    id: str
    label: str
    meaning: Meaning = Meaning.CHOOSE
    scope: Scope | None = None
    admin_only: bool = False
    description: str | None = None
    recommended: bool = False
    style: str | None = None
    outcome: str | None = None
    """A source's own outcome for the option (handup: approve / deny)."""
    requires_text: bool = False
    """Choosing it needs a text too (handup ``feedback: required_on_deny``)."""

    @property
    def approving(self) -> bool:
        return self.meaning is Meaning.APPROVE

    @property
    def rejecting(self) -> bool:
        return self.meaning is Meaning.REJECT


class PreviewItem(Frozen):
    """One preview entry; ``type`` names its shape (text, field, link, markdown, code, diff...)."""

    type: str
    label: str | None = None
    text: str | None = None
    value: str | None = None
    url: str | None = None
    language: str | None = None


class TypedAnswer(Frozen):
    """What a form question's typed answer must be, when its source says (an MCP form's
    ``requestedSchema`` property): checked when the person answers (:mod:`bot.domain.forms`)."""

    kind: Literal["string", "number", "integer"] = "string"
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    """A regular expression the text must contain a match of (JSON Schema ``pattern``)."""
    format: Literal["email", "uri", "date", "date-time"] | None = None
    minimum: float | None = None
    maximum: float | None = None


class FormQuestion(Frozen):
    """One question of a form (handup ``input.questions``): answered as
    ``{"selected": [option labels], "text": …}`` under its ``id`` (:mod:`bot.domain.forms`)."""

    id: str
    question: str
    header: str | None = None
    options: tuple[Option, ...] = ()
    """Their ids are the labels the answer carries."""
    multi: bool = False
    allow_free_text: bool = False
    typed: TypedAnswer | None = None
    """The typed answer's rules, where the source has them."""

    @property
    def takes_text(self) -> bool:
        """A typed answer works (it allows free text, or has no options to choose)."""
        return self.allow_free_text or not self.options


class ApprovalSubject(Frozen):
    id: str
    digest: str
    schema_: str = Field(alias="schema")
    revision: int = Field(ge=0)
    expires_at: datetime | None = None
    preview: tuple[PreviewItem, ...] = ()
    preview_complete: bool = True

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def changed_since(self, revision: int | None, digest: str | None) -> bool:
        """A surface that showed ``revision`` and ``digest`` showed another subject than this
        one (rule 2's stale approval). What it does not know (None) is not checked."""
        return (revision is not None and revision != self.revision) or (
            digest is not None and digest != self.digest
        )


class Context(Frozen):
    """Where the question comes from, whatever the source has."""

    board_id: str | None = None
    board_name: str | None = None
    card_id: str | None = None
    card_title: str | None = None
    run_id: str | None = None
    stage_key: str | None = None
    task_id: str | None = None
    conversation_id: str | None = None


class Deadlines(Frozen):
    remind_at: datetime | None = None
    escalate_at: datetime | None = None
    expires_at: datetime | None = None
    on_timeout: str | None = None
    """Outcome recorded as a system decision at expiry (handup: deny / approve / expire)."""


class Elicitation(Frozen):
    """The normalised elicitation. ``asker`` is the principal that may never answer."""

    source: str
    source_id: str
    workspace: str | None = None
    context: Context = Context()
    asker: str
    kind: Kind = Kind.QUESTION
    title: str = ""
    question: str = ""
    answer_mode: AnswerMode
    options: tuple[Option, ...] = ()
    max_length: int | None = Field(default=None, ge=1)
    takes_note: bool = False
    """Chosen options may come with a written note (Pinework ``multi_select``'s optional
    ``answer.text``): a thread reply names the options on its first line, the note follows."""
    form: tuple[FormQuestion, ...] = ()
    """Several questions answered at once (handup ``input.questions``): the answer's
    ``fields["answers"]`` holds one answer per question id, checked by :mod:`bot.domain.forms`."""
    subject: ApprovalSubject | None = None
    deadlines: Deadlines = Deadlines()
    approval_request_id: str | None = None
    created_at: datetime
    extra: dict[str, Any] = Field(default_factory=dict)
    """Source-specific values a write-back needs; never shown, never secret."""

    @field_validator("options")
    @classmethod
    def _distinct_option_ids(cls, options: tuple[Option, ...]) -> tuple[Option, ...]:
        ids = [o.id for o in options]
        if len(set(ids)) != len(ids):
            msg = "option ids must be distinct"
            raise ValueError(msg)
        return options

    @property
    def key(self) -> ElicitationKey:
        return ElicitationKey(f"{self.source}:{self.source_id}")

    def option(self, option_id: str) -> Option | None:
        return next((o for o in self.options if o.id == option_id), None)

    def context_parts(self, *, workspace: bool = True) -> list[tuple[str, str]]:
        """Where the question comes from, as the (name, value) pairs a message shows."""
        c = self.context
        parts = [
            ("Board", c.board_name or c.board_id),
            ("Card", c.card_title or c.card_id),
            ("Stage", c.stage_key),
            ("Run", c.run_id),
            ("Task", c.task_id),
            ("Workspace", self.workspace if workspace else None),
            ("Asked by", self.asker),
        ]
        return [(name, value) for name, value in parts if value]

    def display_fields(self) -> dict[str, Any]:
        """What a person sees: a change here means every delivered message must be updated."""
        return self.model_dump(
            mode="json",
            include={
                "title",
                "question",
                "options",
                "form",
                "max_length",
                "subject",
                "deadlines",
                "context",
            },
        )


class IdentityKey(str):
    """Who someone is across surfaces: ``slack:<user id>``, ``matrix:@user:server`` or
    ``web:<login>``; like :class:`Destination`, a ``str`` that knows its parts."""

    __slots__ = ()

    @property
    def platform(self) -> str:
        return self.partition(":")[0]

    @property
    def user(self) -> str:
        """The platform's id: ``U0ALICE``, ``@alice:example.org``, ``alice``."""
        return self.partition(":")[2]


class Identity(Frozen):
    """A chat identity: ``platform`` is slack, matrix or web; ``user`` the platform's stable id."""

    platform: str
    user: str
    team: str | None = None
    """Slack ``team_id``; absent elsewhere."""
    is_bot: bool = False
    display_name: str | None = None

    @property
    def key(self) -> IdentityKey:
        return IdentityKey(f"{self.platform}:{self.user}")


class Disclosure(Frozen):
    """What one surface showed a person (rule 2): ``whole``, the whole decisive content, uncut;
    ``review``, where they can see all of it and decide, in the surface's own words, shown with the
    message and told to anyone whose approval it refuses."""

    whole: bool
    review: str | None = None


class Attempt(Frozen):
    """Someone tries to answer: chosen option ids and/or text, through one delivery."""

    respondent: Identity
    option_ids: tuple[str, ...] = ()
    text: str | None = None
    secret: bool = False
    """The text is a secret: it passes upstream and is never stored."""
    via: str
    """The destination the attempt came through (``slack:C123``, ``matrix:!room``, ``web``)."""
    fields: dict[str, Any] = Field(default_factory=dict)
    """A form's answers (Toolshed ``type: form`` data, handup ``input.questions``)."""
    revision: int | None = None
    """The approval subject revision the person saw, when the surface knows it."""
    digest: str | None = None
    """The approval subject digest the person saw, when the surface knows it (rule 2)."""
    shown: Disclosure | None = None
    """What the surface the person acted on showed them; None (said nothing): approving is
    refused (rule 2)."""
    standing: Standing = NO_STANDING
    """What the surface knows of the person beyond their identity (groups, Matrix power), for
    a route's approver entries (rule 9)."""


class Approval(Frozen):
    """One person's approving choice that counted toward a quorum."""

    by: str
    """Identity key they chose with (``slack:U0BOB``)."""
    display_name: str | None = None
    at: datetime
    via: str
    option: str
    """The option id they chose."""


class Answer(Frozen):
    """The one recorded answer. For a secret answer ``text`` is None and ``secret`` is True."""

    option_ids: tuple[str, ...] = ()
    text: str | None = None
    secret: bool = False
    respondent: str
    """Identity key, e.g. ``slack:U0ALICE``; ``system`` for a timeout decision."""
    principal: str | None = None
    display_name: str | None = None
    via: str
    at: datetime
    fields: dict[str, Any] = Field(default_factory=dict)
    """A form's answers, as given (never a secret)."""
    subject_digest: str | None = None
    subject_revision: int | None = None
    approvals: tuple[Approval, ...] = ()
    """A quorum's approvals (rule 9), in the order given; empty when one person decided."""


class RefusalCode(StrEnum):
    ASKER = "asker"
    AGENT = "agent"
    BOT = "bot"
    NOT_ADMIN = "not_admin"
    NOT_OFFERED = "not_offered"
    PREVIEW_INCOMPLETE = "preview_incomplete"
    SUBJECT_EXPIRED = "subject_expired"
    STALE_REVISION = "stale_revision"
    NOT_SHOWN = "not_shown"
    EMPTY = "empty"
    TOO_LONG = "too_long"
    NOT_DISTINCT = "not_distinct"
    NEEDS_TEXT = "needs_text"
    SECRET_IN_CHAT = "secret_in_chat"  # noqa: S105 - a refusal code
    EXPIRED = "expired"
    CLOSED = "closed"
    ALREADY_ANSWERED = "already_answered"
    NOT_APPROVER = "not_approver"
    APPROVE_ELSEWHERE = "approve_elsewhere"
    ALREADY_VOTED = "already_voted"
    AWAITING_APPROVERS = "awaiting_approvers"
    """Not a refusal of the person: their approval counted, the quorum is not reached yet."""


class Refusal(Frozen):
    code: RefusalCode
    message: str
    """A sentence for the refused person."""
    once: bool = False
    """Told once per question and person: a later attempt by them on the same question is not
    told it again (:func:`bot.domain.judge.told_before`). Rule 9's plain "only the approvers"."""


class People(Frozen):
    """Who may do what: from ``[people]`` in the config."""

    admins: frozenset[str] = frozenset()
    """Identity keys of workspace admins."""
    agents: frozenset[str] = frozenset()
    """Identity keys that never answer."""
    principals: dict[str, str] = Field(default_factory=dict)
    """Identity key -> upstream principal."""
    bot_identities: frozenset[str] = frozenset()
    """elicitbot's own identity keys on each platform."""

    def principal_of(self, identity_key: str) -> str | None:
        return self.principals.get(identity_key)


def check_followup_seconds(value: int) -> int:
    if value != 0 and not 5 <= value <= 900:  # noqa: PLR2004 - the contract's bounds
        msg = "followup_seconds must be 0 (off) or between 5 and 900"
        raise ValueError(msg)
    return value


def check_destinations(values: Iterable[str]) -> tuple[Destination, ...]:
    return tuple(Destination.parse(value) for value in values)


class RouteMatch(Frozen):
    source: str | None = None
    workspace: str | None = None
    board: str | None = None


class Route(Frozen):
    """Where an elicitation goes (first match wins). ``followup_seconds``: 0 = off, else 5..900."""

    match: RouteMatch = RouteMatch()
    destinations: tuple[Destination, ...] = (Destination("web"),)
    followup_seconds: int = 0
    escalate_to: tuple[Destination, ...] = ()
    mention: tuple[Destination, ...] = ()
    origin: str = "config"
    """``config`` or ``chat`` (made by an admin command, stored in the database)."""
    approvers: tuple[str, ...] | None = None
    """Who may decide (rule 9, :mod:`bot.domain.policy`); None: anyone but the asker."""
    quorum: int = 1
    """Distinct eligible approvals an approving option needs; one eligible reject decides."""
    approve_on: tuple[str, ...] | None = None
    """Surfaces where approving options count; None: every surface."""
    anyone_may_reject: bool = False
    """A non-approver may still choose a rejecting option."""

    _approvers = field_validator("approvers")(check_approvers)
    _quorum = field_validator("quorum")(check_quorum)
    _approve_on = field_validator("approve_on")(check_surfaces)
    _followup = field_validator("followup_seconds")(check_followup_seconds)
    _destinations = field_validator("destinations", "escalate_to", "mention")(check_destinations)

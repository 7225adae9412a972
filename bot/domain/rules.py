"""The answer rules 1-5 and 7, as pure functions: ``now`` is passed in (aware UTC). Approving is
offered and accepted only where both halves of rule 2 hold: the elicitation's (preview complete,
subject not expired) and the surface's (:mod:`bot.domain.disclosure`). Nothing raises on an attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.domain import deciders, forms
from bot.domain.described import describe_answer, platform_name
from bot.domain.disclosure import not_shown, shows_everything
from bot.domain.model import (
    Answer,
    AnswerMode,
    Attempt,
    Disclosure,
    Elicitation,
    Identity,
    Option,
    People,
    Refusal,
    RefusalCode,
    Route,
    Status,
)
from bot.domain.policy import NO_STANDING, Standing

MAX_FREE_TEXT = 32_768
"""Free-text bound in code points when the source gives no ``maxLength``."""

_TEXT_ONLY_MODES = frozenset({AnswerMode.FREE_TEXT, AnswerMode.SECRET})

_WRITE_AN_ANSWER = "Write an answer; it cannot be empty."
USE_PRIVATE_FORM = (
    "This answer is a secret: use the private form (Reply… button or web inbox), "
    "not a chat message."
)


def format_time(when: datetime) -> str:
    """``2026-11-11 09:30 UTC``: how a time is written in messages."""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class OfferedOption:
    option: Option
    offered: bool
    """False: shown but not answerable now (an approving option withheld)."""
    admin_only: bool
    withheld_reason: str | None
    elsewhere: bool = False
    """Withheld because the route's ``approve_on`` does not name this surface: approving counts
    only there (a copy links to the web inbox where Approve was)."""


def _withheld(e: Elicitation, now: datetime) -> tuple[RefusalCode, str] | None:
    subject = e.subject
    if subject is None:
        return None
    # Expiry first: it is final, while an incomplete preview may still be completed.
    if subject.expires_at is not None and subject.expires_at <= now:
        return (
            RefusalCode.SUBJECT_EXPIRED,
            f"The approval subject expired at {format_time(subject.expires_at)}.",
        )
    if not subject.preview_complete:
        return (
            RefusalCode.PREVIEW_INCOMPLETE,
            "The preview is incomplete, so approving is not offered.",
        )
    return None


def approving_withheld(e: Elicitation, now: datetime) -> str | None:
    """Why approving options are not offered now (preview incomplete, subject expired), or None."""
    withheld = _withheld(e, now)
    return None if withheld is None else withheld[1]


def offered_options(
    e: Elicitation,
    now: datetime,
    *,
    shown: Disclosure,
    surface: str | None = None,
    approve_on: Sequence[str] | None = None,
) -> tuple[OfferedOption, ...]:
    """Every option in order, as the surface ``shown`` describes offers them: approving ones
    withheld while the subject is, where ``approve_on`` does not name the ``surface`` (rule 9), or
    where the content was cut (rule 2), ``withheld_reason`` saying why in that order."""
    reason = approving_withheld(e, now)
    elsewhere = None if reason is not None else deciders.approve_elsewhere(approve_on, surface)
    if elsewhere is not None:
        reason = elsewhere
    if reason is None and not shows_everything(shown):
        reason = not_shown(shown.review)
    return tuple(
        OfferedOption(
            option=o,
            offered=not (o.approving and reason is not None),
            admin_only=o.admin_only,
            withheld_reason=reason if o.approving else None,
            elsewhere=o.approving and elsewhere is not None,
        )
        for o in e.options
    )


@dataclass(frozen=True)
class AnswerState:
    status: Status
    answer: Answer | None = None


@dataclass(frozen=True)
class Decision:
    state: AnswerState
    """The state after the attempt."""
    result: Answer | Refusal
    """The accepted answer, or the refusal to tell the person."""


def _refuse(code: RefusalCode, message: str) -> Refusal:
    return Refusal(code=code, message=message)


@dataclass(frozen=True)
class Pick:
    """An option someone picks, with what the surface they picked it on showed them."""

    option: Option
    now: datetime
    shown: Disclosure | None = None
    revision: int | None = None
    """The approval subject revision the surface showed, when it knows it."""
    via: str | None = None
    """Where it was picked (a route's ``approve_on``)."""
    digest: str | None = None
    """The approval subject digest the surface showed, when it knows it."""


def who_may_decide(
    e: Elicitation,
    who: Identity,
    people: People,
    pick: Pick | None = None,
    *,
    route: Route | None = None,
    standing: Standing = NO_STANDING,
) -> Refusal | None:
    """Who may decide: the one rule for who answers, claims and picks (None: ``who`` may).

    - rule 1: the asker (by identity or principal), configured agents, bots and elicitbot
      itself never decide, whatever they say;
    - rule 2, for ``pick``: an approving option only while it is offered (preview complete,
      subject not expired), on the revision and digest the surface showed, and where it showed
      the whole decisive content;
    - rule 3, for ``pick``: an admin-only option only from a workspace admin;
    - rule 9, for ``route`` (:mod:`bot.domain.deciders`): only its approvers (with what the
      surface knows of them, ``standing``), approving only on its ``approve_on`` surfaces.
    """
    key = who.key
    if e.asker in (key, who.user) or people.principal_of(key) == e.asker:
        return _refuse(RefusalCode.ASKER, "You asked this question, so you cannot answer it.")
    if key in people.agents:
        return _refuse(RefusalCode.AGENT, "Agents cannot answer questions; a person must answer.")
    if who.is_bot or key in people.bot_identities:
        return _refuse(RefusalCode.BOT, "Bots cannot answer questions; a person must answer.")
    if route is not None:
        refusal = (
            deciders.may_take_part(e, route, who, standing, people)
            if pick is None
            else deciders.may_choose(route, who, standing, people, (pick.option,))
        )
        if refusal is not None:
            return refusal
    if pick is None:
        return None
    option = pick.option
    if option.approving:
        withheld = _withheld(e, pick.now)
        if withheld is not None:
            code, reason = withheld
            return _refuse(code, f"You cannot choose “{option.label}” now: {_lower(reason)}")
        subject = e.subject
        if subject is not None and subject.changed_since(pick.revision, pick.digest):
            return _refuse(
                RefusalCode.STALE_REVISION,
                "The request changed since this message was shown; answer on the updated message.",
            )
        if not shows_everything(pick.shown):
            because = _lower(not_shown(pick.shown.review if pick.shown is not None else None))
            return _refuse(
                RefusalCode.NOT_SHOWN, f"You cannot choose “{option.label}” here: {because}"
            )
        elsewhere = None if route is None else deciders.approve_here(route, option, pick.via)
        if elsewhere is not None:
            return elsewhere
    if option.admin_only and key not in people.admins:
        only = f"Only a workspace admin can choose “{option.label}”."
        return _refuse(RefusalCode.NOT_ADMIN, only)
    return None


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def _check_text(
    text: str | None, limit: int, *, required: bool = False, byte_limit: int | None = None
) -> Refusal | None:
    """Rule 4 for a text or a comment: non-blank when required, at most ``limit`` code points,
    and at most ``byte_limit`` UTF-8 bytes where the source bounds it so (``TEXT_BYTE_LIMITS``),
    told in bytes."""
    if text is None or not text.strip():
        return _refuse(RefusalCode.EMPTY, _WRITE_AN_ANSWER) if required else None
    if byte_limit is not None and (size := len(text.encode("utf-8", "surrogatepass"))) > byte_limit:
        kib = f" ({byte_limit // 1024} KiB)" if byte_limit % 1024 == 0 else ""
        return _refuse(
            RefusalCode.TOO_LONG,
            f"Your answer is {size:,} bytes of UTF-8; the limit is {byte_limit:,} bytes{kib}.",
        )
    if len(text) > limit:
        return _refuse(
            RefusalCode.TOO_LONG,
            f"Your answer is {len(text):,} characters; the limit is {limit:,}.",
        )
    return None


TEXT_BYTE_LIMITS = {"engine": 32 * 1024}
"""Sources whose upstream bounds an answer's text in UTF-8 bytes, not code points: the engine
(spec 001, "bounded to 32 KiB of UTF-8 bytes"). Checked before the code-point bound, so the
person is told the limit in bytes."""


def _chosen_options(e: Elicitation, attempt: Attempt) -> tuple[Option, ...] | Refusal:
    """Rule 2 (first half) and rule 4's distinctness: every id offered, none repeated."""
    chosen: list[Option] = []
    for option_id in attempt.option_ids:
        option = e.option(option_id)
        if option is None:
            return _refuse(RefusalCode.NOT_OFFERED, "That option is not offered on this question.")
        if option in chosen:
            return _refuse(
                RefusalCode.NOT_DISTINCT,
                f"You chose “{option.label}” more than once; choose each option at most once.",
            )
        chosen.append(option)
    return tuple(chosen)


def _check_count(e: Elicitation, chosen: tuple[Option, ...], has_text: bool) -> Refusal | None:
    """How many options the answer mode takes."""
    mode = e.answer_mode
    if mode in _TEXT_ONLY_MODES and chosen:
        return _refuse(
            RefusalCode.NOT_OFFERED,
            "This question takes a written answer, not an option.",
        )
    if mode is AnswerMode.MULTI_CHOICE:
        if not chosen:
            return _refuse(RefusalCode.EMPTY, "Choose at least one of the options.")
        return None
    if len(chosen) > 1:
        return _refuse(RefusalCode.NOT_OFFERED, "Choose only one of the options.")
    if mode is AnswerMode.SINGLE_CHOICE and not chosen:
        return _refuse(RefusalCode.EMPTY, "Choose one of the options.")
    if mode is AnswerMode.CHOICE_OR_TEXT and not chosen and not has_text:
        if not e.options:
            return _refuse(RefusalCode.EMPTY, _WRITE_AN_ANSWER)
        return _refuse(RefusalCode.EMPTY, "Choose one of the options or write an answer.")
    return None


def judge(
    e: Elicitation,
    attempt: Attempt,
    people: People,
    now: datetime,
    *,
    route: Route | None = None,
) -> Answer | Refusal:
    """Rules 1-4, 7 and 9 (for ``route``, the one ``e`` takes) for an attempt on a pending
    elicitation (``e``'s status is not looked at): the :class:`Answer` to record or a
    :class:`Refusal` with a code and one sentence.
    """
    who, standing = attempt.respondent, attempt.standing
    refusal = who_may_decide(e, who, people, route=route, standing=standing)
    if refusal is not None:
        return refusal

    secret_mode = e.answer_mode is AnswerMode.SECRET
    if secret_mode and not attempt.secret:
        return _refuse(RefusalCode.SECRET_IN_CHAT, USE_PRIVATE_FORM)
    if attempt.secret and not secret_mode:
        return _refuse(
            RefusalCode.NOT_OFFERED,
            "This question does not ask for a secret; answer it in the message.",
        )

    if e.form and (len(e.form) > 1 or attempt.fields.get("answers") is not None):
        if route is not None and (refusal := deciders.may_choose(route, who, standing, people, ())):
            return refusal
        return _judge_form(e, attempt, people, now)

    chosen = _chosen_options(e, attempt)
    if isinstance(chosen, Refusal):
        return chosen

    text = attempt.text
    has_text = text is not None and bool(text.strip())
    refusal = _check_count(e, chosen, has_text)
    if refusal is not None:
        return refusal

    if route is not None and (refusal := deciders.may_choose(route, who, standing, people, chosen)):
        return refusal
    for option in chosen:  # rules 2-4 and 9 for each: who may pick it here, then its comment
        pick = Pick(option, now, attempt.shown, attempt.revision, attempt.via, attempt.digest)
        refusal = who_may_decide(e, who, people, pick, route=route, standing=standing)
        if refusal is None and option.requires_text and not has_text:
            refusal = _refuse(
                RefusalCode.NEEDS_TEXT,
                f"“{option.label}” needs a comment: add a reason with your choice.",
            )
        if refusal is not None:
            return refusal

    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    required = e.answer_mode in _TEXT_ONLY_MODES
    refusal = _check_text(text, limit, required=required, byte_limit=TEXT_BYTE_LIMITS.get(e.source))
    if refusal is not None:
        return refusal

    subject = e.subject
    return _answer(
        attempt,
        people,
        now,
        option_ids=tuple(o.id for o in chosen),
        text=None if secret_mode or not has_text else text,
        secret=secret_mode,
        subject_digest=None if subject is None else subject.digest,
        subject_revision=None if subject is None else subject.revision,
        fields={} if secret_mode else dict(attempt.fields),
    )


def _answer(attempt: Attempt, people: People, now: datetime, **given: Any) -> Answer:
    """The answer ``attempt`` gives, with who gave it, where and when."""
    key = attempt.respondent.key
    return Answer(
        respondent=key,
        principal=people.principal_of(key),
        display_name=attempt.respondent.display_name,
        via=attempt.via,
        at=now,
        **given,
    )


def _judge_form(
    e: Elicitation, attempt: Attempt, people: People, now: datetime
) -> Answer | Refusal:
    """A form (several questions): one answer per question, by the spec's rules
    (:func:`bot.domain.forms.check_answers`); a text with it is a comment."""
    limit = e.max_length if e.max_length is not None else MAX_FREE_TEXT
    checked = forms.check_answers(e.form, attempt.fields.get("answers"), text_limit=limit)
    if isinstance(checked, forms.FormProblem):
        if checked.empty and attempt.fields.get("answers") is None:
            return _refuse(
                RefusalCode.EMPTY,
                "Answer each question of the form: use the form on the message (or the web "
                "inbox), or reply with one line per question, its number and your answer.",
            )
        return _refuse(
            RefusalCode.EMPTY if checked.empty else RefusalCode.NOT_OFFERED, checked.message
        )
    refusal = _check_text(attempt.text, limit)
    if refusal is not None:
        return refusal
    text = attempt.text if attempt.text is not None and attempt.text.strip() else None
    return _answer(attempt, people, now, text=text, fields={**attempt.fields, "answers": checked})


def _closed(e: Elicitation, state: AnswerState, attempt: Attempt, now: datetime) -> Refusal | None:
    """Rule 5: answered, cancelled, or past ``expires_at`` (the scheduler records the expiry)."""
    if state.status is Status.ANSWERED:
        answer = state.answer
        if answer is None:
            return _refuse(RefusalCode.ALREADY_ANSWERED, "This question was already answered.")
        mine = answer.respondent == attempt.respondent.key
        who = "you" if mine else answer.display_name or answer.respondent
        return _refuse(
            RefusalCode.ALREADY_ANSWERED,
            f"Already answered by {who} ({describe_answer(e, answer)}) at "
            f"{format_time(answer.at)} via {platform_name(answer.via)}.",
        )
    if state.status is Status.CANCELLED:
        return _refuse(
            RefusalCode.CLOSED, "This request was cancelled; it can no longer be answered."
        )
    expires_at = e.deadlines.expires_at
    if state.status is Status.EXPIRED or (expires_at is not None and expires_at <= now):
        when = "" if expires_at is None else f" at {format_time(expires_at)}"
        return _refuse(
            RefusalCode.EXPIRED, f"This request expired{when}; it can no longer be answered."
        )
    return None


def decide(
    e: Elicitation,
    state: AnswerState,
    attempt: Attempt,
    people: People,
    now: datetime,
    *,
    route: Route | None = None,
) -> Decision:
    """The pure model of the store's first-answer-wins update (rule 5): closed (:func:`_closed`),
    refused with the state unchanged; else :func:`judge`, an answer moving the state to ANSWERED."""
    result = _closed(e, state, attempt, now) or judge(e, attempt, people, now, route=route)
    if isinstance(result, Refusal):
        return Decision(state, result)
    return Decision(AnswerState(Status.ANSWERED, result), result)

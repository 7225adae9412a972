"""Elicitations, people and attempts for the domain tests.

The four SuperPipeline example shapes (``tests/fixtures/superpipeline/valid.json``) are
mapped here by hand; the real parser lives in ``adapters/sources`` and is not imported.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import (
    Answer,
    AnswerMode,
    ApprovalSubject,
    Attempt,
    Context,
    Deadlines,
    Disclosure,
    Elicitation,
    Identity,
    Kind,
    Meaning,
    Option,
    People,
    PreviewItem,
    Refusal,
    Scope,
    Status,
)
from bot.domain.rules import AnswerState, judge

NOW = datetime(2026, 11, 10, 9, 31, tzinfo=UTC)
CREATED = datetime(2026, 11, 10, 9, 30, tzinfo=UTC)
SUBJECT_EXPIRES = datetime(2026, 11, 11, 9, 30, tzinfo=UTC)

AGENT_ID = "agt_9e8d7c6b5a493827"
PRINCIPAL_ID = "prn_0123456789abcdef0123"
BOARD = "brd_134a0ddb6d434478"

ALICE = Identity(platform="slack", user="U0ALICE", team="T0ACME", display_name="Alice")
BOB = Identity(platform="matrix", user="@bob:example.org", display_name="Bob")
ADMIN = Identity(platform="slack", user="U0ADMIN", team="T0ACME", display_name="Ada")
AGENT_BOT = Identity(platform="slack", user="B0AGENTBOT", is_bot=True)
AGENT_MXID = Identity(platform="matrix", user="@agent:example.org")
ELICITBOT = Identity(platform="matrix", user="@elicitbot:example.org")

PEOPLE = People(
    admins=frozenset({"slack:U0ADMIN", "matrix:@alice:example.org"}),
    agents=frozenset({"slack:B0AGENTBOT", "matrix:@agent:example.org"}),
    principals={
        "slack:U0ALICE": "usr_alice",
        "matrix:@agent:example.org": AGENT_ID,
        "slack:U0AGENTUSER": AGENT_ID,
    },
    bot_identities=frozenset({"matrix:@elicitbot:example.org", "slack:U0ELICITBOT"}),
)

ALLOW_ONCE = Option(id="allow_once", label="Allow once", meaning=Meaning.APPROVE, scope=Scope.ONCE)
ALLOW_ALWAYS = Option(
    id="allow_always",
    label="Always allow",
    meaning=Meaning.APPROVE,
    scope=Scope.ALWAYS,
    admin_only=True,
)
DENY = Option(id="deny", label="Deny", meaning=Meaning.REJECT)
SUPERPIPELINE_OPTIONS = (ALLOW_ONCE, ALLOW_ALWAYS, DENY)

_SP_CONTEXT = Context(
    board_id=BOARD,
    board_name="Developer Experience",
    card_id="crd_0f3c9a2b7d4e4a11",
    card_title="Research this",
    run_id="run_0123456789abcdef",
    stage_key="research",
)


def elicitation(**changes: Any) -> Elicitation:
    """A SuperPipeline-like single-choice question; ``changes`` override any field."""
    fields: dict[str, Any] = {
        "source": "superpipeline",
        "source_id": "eli_1a2b3c4d5e6f7081",
        "workspace": "acme",
        "context": _SP_CONTEXT,
        "asker": AGENT_ID,
        "kind": Kind.QUESTION,
        "question": "May I run the migration?",
        "answer_mode": AnswerMode.SINGLE_CHOICE,
        "options": SUPERPIPELINE_OPTIONS,
        "created_at": CREATED,
    }
    fields.update(changes)
    return Elicitation(**fields)


def sp_options() -> Elicitation:
    """valid.json "options": three options, one admin-only, no subject."""
    return elicitation()


def sp_free_text() -> Elicitation:
    """valid.json "free-text": no options, ``freeText.maxLength`` 2000."""
    return elicitation(
        source_id="eli_2b3c4d5e6f708192",
        question="Which branch should I base this on?",
        answer_mode=AnswerMode.FREE_TEXT,
        options=(),
        max_length=2000,
    )


def sp_bare() -> Elicitation:
    """valid.json "no-options-no-question": nothing to choose or type; acknowledged."""
    return elicitation(
        source_id="eli_3c4d5e6f70819203",
        question="",
        answer_mode=AnswerMode.ACKNOWLEDGE,
        options=(),
    )


def subject(**changes: Any) -> ApprovalSubject:
    fields: dict[str, Any] = {
        "id": "sub_7d6c5b4a39281706",
        "digest": "sha256:4f2a0c1e9b8d7f6a5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7",
        "schema": "stk-capability/v1",
        "revision": 1,
        "expires_at": SUBJECT_EXPIRES,
        "preview": (
            PreviewItem(type="text", label="Post", text="We shipped the decision envelope."),
            PreviewItem(type="field", label="Account", value="@example"),
            PreviewItem(type="link", label="Draft", url="https://example.com/draft"),
        ),
        "preview_complete": True,
    }
    fields.update(changes)
    return ApprovalSubject(**fields)


def sp_approval(**subject_changes: Any) -> Elicitation:
    """valid.json "approval-request": a broker approval with a subject and a remind deadline."""
    return elicitation(
        source_id="apr_4d5e6f7081920314",
        context=Context(board_name="Developer Experience"),
        asker=PRINCIPAL_ID,
        kind=Kind.APPROVAL,
        subject=subject(**subject_changes),
        approval_request_id="apr_4d5e6f7081920314",
        deadlines=Deadlines(remind_at=datetime(2026, 11, 10, 10, 30, tzinfo=UTC)),
    )


_VIA = {"slack": "slack:C0APPROVALS", "matrix": "matrix:!room:example.org"}


def attempt(
    who: Identity = ALICE,
    *options: str,
    text: str | None = None,
    secret: bool = False,
    via: str | None = None,
    revision: int | None = None,
    shown: Disclosure | None = SHOWN_WHOLE,
    digest: str | None = None,
) -> Attempt:
    """An attempt from a surface that showed everything, unless ``shown`` says otherwise."""
    return Attempt(
        respondent=who,
        option_ids=options,
        text=text,
        secret=secret,
        via=via if via is not None else _VIA.get(who.platform, "web"),
        revision=revision,
        digest=digest,
        shown=shown,
    )


def later(**delta: float) -> datetime:
    return NOW + timedelta(**delta)


PENDING = AnswerState(Status.PENDING)


def refused(e: Elicitation, *args: Any, now: datetime = NOW, **kwargs: Any) -> Refusal:
    """``judge`` an :func:`attempt` built from ``args``/``kwargs``; it must be refused."""
    result = judge(e, attempt(*args, **kwargs), PEOPLE, now)
    assert isinstance(result, Refusal), result
    return result


def accepted(e: Elicitation, *args: Any, now: datetime = NOW, **kwargs: Any) -> Answer:
    """``judge`` an :func:`attempt` built from ``args``/``kwargs``; it must be accepted."""
    result = judge(e, attempt(*args, **kwargs), PEOPLE, now)
    assert isinstance(result, Answer), result
    return result


def answer(**fields: Any) -> Answer:
    """A recorded answer from Alice through Slack at ``NOW``."""
    return Answer(respondent="slack:U0ALICE", via="slack:C0APPROVALS", at=NOW, **fields)

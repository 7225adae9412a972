"""Answers back to Pinework: the answer route and the secret route (a secret's value is never
stored, logged or put in an error message)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import structlog

from adapters.shared.webhook import HTTP_REDIRECT, TIMEOUT_SECONDS, Receiver, post_json
from adapters.sources.pinework import models as upstream
from adapters.sources.pinework.parse import (
    SECRET_MAX,
    answer_body,
    error_code,
    parse_question,
    question_url,
    unwrap_question,
)
from bot.domain.errors import PayloadRejected, PermanentDeliveryError, TransientDeliveryError
from bot.domain.model import AnswerMode
from bot.domain.ports import PromptView

log = structlog.get_logger("elicitbot.pinework")

ANSWER_ROUTE = Receiver(
    "Pinework unreachable for the answer: {error}", "Pinework answered HTTP {status} to the answer"
)
SECRET_ROUTE = Receiver(
    "Pinework unreachable for the secret: {error}; try again",
    "Pinework answered HTTP {status} to the secret",
)

MESSAGES = {
    "invalid_option_key": "a chosen option is not one of the question's options any more",
    "answer_mode_mismatch": (
        "the answer does not fit the question's answer mode (a single_select question needs "
        "exactly one option, a multi_select one at least one, free_text a text)"
    ),
    "invalid_answer": "a free-text answer must not be empty",
    "agent_cannot_answer_question": (
        "Pinework takes answers from people only, and the credential elicitbot uses is an "
        "agent's: configure a person's token in sources.pinework.token_env"
    ),
    "question_not_found": "the question is gone from Pinework or not visible to elicitbot's token",
    "question_needs_secret": "a secret_input question takes its answer on the secret route",
    "question_not_secret_input": "the question does not ask for a secret",
    "secret.duplicate_name": "a secret with the requested name already exists in the workspace",
    "secret_provider_unbrokerable": "Pinework can no longer broker the requested provider",
    "secret_input_requires_agent": "the asking agent no longer exists",
    "http_exception": "Pinework refused elicitbot's credential for this route",
}


class _Client:
    """What both sinks share; ``tokens`` maps an ``account_key`` to its bearer token."""

    def __init__(self, client: httpx.AsyncClient, tokens: Mapping[str, str]) -> None:
        self.client = client
        self._tokens = dict(tokens)

    def __repr__(self) -> str:  # never the tokens
        return f"{type(self).__name__}(accounts={sorted(self._tokens)})"

    def _target(self, view: PromptView) -> tuple[str, dict[str, str]]:
        extra = view.elicitation.extra
        if (token := self._tokens.get(str(extra.get("account")))) is None:
            raise PermanentDeliveryError(
                f"no [[sources.pinework]] entry for {extra.get('account')!r} any more"
            )
        url = question_url(str(extra["baseUrl"]), str(extra["questionId"]))
        return url, {"Authorization": f"Bearer {token}"}

    async def _get_question(self, view: PromptView) -> upstream.Question | None:
        url, headers = self._target(view)
        try:
            response = await self.client.get(url, headers=headers, timeout=TIMEOUT_SECONDS)
            if response.status_code >= HTTP_REDIRECT:
                return None
            return parse_question(unwrap_question(response.json()))
        except (httpx.HTTPError, ValueError, PayloadRejected):
            return None


def reply_code(response: httpx.Response) -> str | None:
    try:
        return error_code(response.json())
    except ValueError:
        return None


CLOSED_THERE = frozenset({"question_resolved", "question_not_found"})
"""Refusals that mean the question is no longer open in Pinework: ours is marked failed, not
reopened for another answer."""


def _refused(route: str, status: int, code: str | None) -> PermanentDeliveryError:
    reason = MESSAGES.get(code or "", "")
    named = f"{code}, HTTP {status}" if code else f"HTTP {status}"
    sentence = f"Pinework refused the {route} ({named})"
    return PermanentDeliveryError(
        f"{sentence}: {reason}." if reason else f"{sentence}.", reopen=code not in CLOSED_THERE
    )


class PineworkSink(_Client):
    """The outbox write-back for source ``pinework``: one POST per answer, idempotent by key."""

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        if (body := answer_body(view)) is None:
            return  # not ours to write: resolved upstream, withdrawn, or a secret already sent
        url, headers = self._target(view)
        response = await post_json(
            self.client,
            url + "/answer",
            body,
            idempotency_key=idempotency_key,
            receiver=ANSWER_ROUTE,
            headers=headers,
            read_refusals=True,
        )
        if response.is_success:
            return
        code = reply_code(response)
        if code == "question_resolved":
            await self._already_resolved(view, body)
            return
        raise _refused("answer", response.status_code, code)

    async def _already_resolved(self, view: PromptView, sent: dict[str, Any]) -> None:
        """Ours landed before (a retry after a lost reply): done; anyone else's: permanent."""
        if (question := await self._get_question(view)) is None:
            raise TransientDeliveryError("Pinework says resolved; reading its answer failed")
        given = question.answer or upstream.UpstreamAnswer()
        mine = sent["answer"]
        if given.text == mine["text"] and (given.selected or None) == mine["selected"]:
            log.info("pinework.answer_already_there", key=view.elicitation.key)
            return
        by = question.answered_by.id if question.answered_by else None
        what = given.text or ", ".join(given.selected or ()) or "(no text)"
        who = f"by {by}" if by else "by the system"
        raise PermanentDeliveryError(
            f"The question was resolved in Pinework {who} before this answer arrived "
            f"(question_resolved): Pinework keeps “{what[:200]}”; this answer was not applied.",
            reopen=False,
        )


class PineworkSecretSink(_Client):
    """The secret route for ``secret_input`` questions, called from a private surface only."""

    async def deliver_secret(self, view: PromptView, secret: str, *, idempotency_key: str) -> None:
        if view.elicitation.answer_mode is not AnswerMode.SECRET:
            raise PermanentDeliveryError("This question does not ask for a secret.")
        if not 1 <= len(secret) <= SECRET_MAX:
            raise PermanentDeliveryError(
                f"A secret must be 1 to {SECRET_MAX:,} characters; nothing was sent."
            )
        url, headers = self._target(view)
        response = await post_json(
            self.client,
            url + "/secret",
            {"value": secret},
            idempotency_key=idempotency_key,
            receiver=SECRET_ROUTE,
            headers=headers,
            read_refusals=True,
            confidential=True,  # the value stays out of every error and traceback
        )
        if response.is_success:
            log.info("pinework.secret_delivered", key=view.elicitation.key)
            return
        code = reply_code(response)
        if code == "question_resolved":
            raise PermanentDeliveryError(
                "The question was already resolved in Pinework; the secret was not sent."
            )
        raise _refused("secret", response.status_code, code)

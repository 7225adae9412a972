"""The Pinework poller: open questions in, closes mirrored. What is tracked is stored, so a
question resolved while elicitbot was down is still closed; only a complete listing tells which
questions are gone."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import structlog

from adapters.shared.webhook import HTTP_REDIRECT, TIMEOUT_SECONDS, retry_after
from adapters.sources.pinework import models as upstream
from adapters.sources.pinework.parse import (
    PAGE_LIMIT,
    QUESTIONS_PATH,
    SOURCE,
    account_key,
    base_of,
    channel_of,
    inbound_id,
    parse_question,
    question_url,
    read_page,
    to_elicitation,
    unwrap_question,
    upstream_close,
)
from adapters.sources.pinework.sink import reply_code
from bot.clock import SystemClock
from bot.domain.bounds import ID_MAX, check_elicitation
from bot.domain.errors import PayloadRejected
from bot.domain.model import Answer, ElicitationKey, Status
from bot.domain.ports import Clock, Elicitations, Inbound
from bot.domain.store import Values

log = structlog.get_logger("elicitbot.pinework")

MAX_PAGES = 1_000
MAX_BACKOFF_SECONDS = 60.0
HTTP_NOT_FOUND = 404
NOT_FOUND_CODES = (None, "question_not_found")  # a 404 saying the question is gone
NOT_FOUND_TEXT = "[system:question_not_found] The question is gone from Pinework."


class PollError(Exception):
    """A listing failed or was incomplete: nothing is concluded from it."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class PineworkPoller:
    def __init__(
        self,
        *,
        base_url: str,
        workspace: str,
        poll_seconds: float,
        client: httpx.AsyncClient,
        elicitations: Elicitations,
        token: str,
        state: Values,
        clock: Clock | None = None,
    ) -> None:
        self.base_url = base_of(base_url)
        self.workspace = workspace
        self.poll_seconds = poll_seconds
        self.client = client
        self.elicitations = elicitations
        self._token = token
        self.state = state
        self.clock: Clock = clock or SystemClock()
        self.channel = channel_of(self.base_url)
        self.account = account_key(self.base_url, workspace)
        self._state_key = f"pinework:tracked:{self.account}"
        self._sent: dict[str, str] = {}  # question id -> the inbound id last taken in
        self._refused: dict[str, str] = {}  # question id -> the problems last logged for it
        self.connected = False  # for /readyz: the last listing succeeded
        self._log = log.bind(pinework=self.base_url, workspace=workspace)

    def __repr__(self) -> str:  # never the token
        return f"PineworkPoller({self.base_url!r}, workspace={self.workspace!r})"

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}

    async def run(self, stop: asyncio.Event) -> None:
        """Poll every ``poll_seconds`` until ``stop`` is set; failures back off, up to 60 s."""
        failures = 0
        while not stop.is_set():
            wait = self.poll_seconds
            try:
                await self.poll_once()
                failures = 0
            except PollError as exc:
                failures += 1
                wait = max(
                    exc.retry_after or 0.0,
                    min(MAX_BACKOFF_SECONDS, self.poll_seconds * 2 ** min(failures, 6)),
                )
                self._log.warning("pinework.poll_failed", error=str(exc), retry_in=wait)
            except Exception:  # the loop's one broad boundary: log it and poll again
                failures += 1
                self._log.exception("pinework.poll_error")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)

    async def poll_once(self) -> dict[str, int]:
        """One round; counts ``listed``, ``taken_in``, ``closed``. PollError: nothing was closed."""
        try:
            questions = await self._list_open()
        except PollError:
            self.connected = False
            raise
        self.connected = True
        open_ids: list[str] = []
        fresh: list[tuple[str, Inbound]] = []
        for raw in questions:
            question = self._parse(raw)
            if question is None or question.status != upstream.OPEN:
                continue
            if question.workspace_id and question.workspace_id != self.workspace:
                continue
            e = to_elicitation(
                question, base_url=self.base_url, workspace=self.workspace, now=self.clock.now()
            )
            if problems := check_elicitation(e):
                # Out of the intake bounds: logged and skipped, as if not listed (a copy taken
                # in before stays tracked while Pinework still has the question open).
                self._refuse(question.id, str(PayloadRejected(problems)))
                continue
            open_ids.append(question.id)
            ident = inbound_id(e)
            if self._sent.get(question.id) != ident:
                audit = {"pinework": self.base_url, "questionId": question.id}
                fresh.append((question.id, Inbound(self.channel, ident, e, audit)))
        taken = 0
        if fresh:
            outcomes = await self.elicitations.intake([inbound for _, inbound in fresh])
            for (question_id, inbound), outcome in zip(fresh, outcomes, strict=True):
                self._sent[question_id] = inbound.inbound_id
                taken += outcome.result in ("accepted", "updated")
        closed = await self._keep_in_step(open_ids)
        return {"listed": len(open_ids), "taken_in": taken, "closed": closed}

    def _parse(self, raw: Any) -> upstream.Question | None:
        try:
            return parse_question(raw)
        except PayloadRejected as exc:
            self._refuse(raw.get("id") if isinstance(raw, dict) else None, str(exc))
            return None

    def _refuse(self, ident: object, problems: str) -> None:
        """Log a refused question once per distinct refusal (not at every poll)."""
        shown = None if ident is None else str(ident)[:ID_MAX]  # out of bounds: any length
        if self._refused.get(str(shown)) != problems:
            self._refused[str(shown)] = problems
            self._log.warning("pinework.question_refused", question=shown, problems=problems)

    async def _list_open(self) -> list[Any]:
        """Every open question, page by page; PollError unless the listing is complete."""
        found: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            params = {"status": upstream.OPEN, "limit": str(PAGE_LIMIT)}
            if cursor is not None:
                params["startingAfter"] = cursor
            body = await self._get(f"{self.base_url}{QUESTIONS_PATH}", params)
            try:
                page = read_page(body, limit=PAGE_LIMIT)
            except ValueError as exc:
                raise PollError(str(exc)) from None
            found.extend(page.questions)
            if page.starting_after is None:
                return found
            if page.starting_after in seen:
                raise PollError(f"the cursor {page.starting_after!r} came back: listing stopped")
            seen.add(page.starting_after)
            cursor = page.starting_after
        raise PollError(f"more than {MAX_PAGES} pages of open questions")

    async def _get(self, url: str, params: dict[str, str] | None = None) -> Any:
        try:
            response = await self.client.get(
                url, params=params, headers=self._headers, timeout=TIMEOUT_SECONDS
            )
        except httpx.HTTPError as exc:
            raise PollError(f"Pinework unreachable: {type(exc).__name__}") from None
        if response.status_code >= HTTP_REDIRECT:
            code = reply_code(response)
            named = f" ({code})" if code else ""
            raise PollError(
                f"Pinework answered HTTP {response.status_code}{named}", retry_after(response)
            )
        try:
            return response.json()
        except ValueError:
            raise PollError("Pinework answered with a body that is not JSON") from None

    async def _keep_in_step(self, open_ids: list[str]) -> int:
        """Close ours for tracked questions no longer open upstream; save what stays tracked."""
        tracked = await self._tracked()
        still_open = set(open_ids)
        keep: set[str] = set()
        closed = 0
        for question_id in sorted(tracked - still_open):
            if (outcome := await self._settle(question_id)) is None:
                keep.add(question_id)
            else:
                closed += outcome
        now_tracked = still_open | keep
        if now_tracked != tracked:
            await self.state.set_value(self._state_key, json.dumps(sorted(now_tracked)))
        return closed

    async def _tracked(self) -> set[str]:
        if not (saved := await self.state.get_value(self._state_key)):
            return set()
        try:
            ids = json.loads(saved)
        except ValueError:
            return set()
        return {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()

    async def _settle(self, question_id: str) -> int | None:
        """A tracked question that left the open list: 1 if ours was closed now, 0 if there was
        nothing to close, None to keep tracking it (still open, or unreadable for now)."""
        key = ElicitationKey(f"{SOURCE}:{question_id}")
        view = await self.elicitations.view(key)
        if view is None or view.status is not Status.PENDING:
            return 0
        url = question_url(self.base_url, question_id)
        try:
            response = await self.client.get(url, headers=self._headers, timeout=TIMEOUT_SECONDS)
        except httpx.HTTPError:
            return None
        now = self.clock.now()
        if response.status_code == HTTP_NOT_FOUND and reply_code(response) in NOT_FOUND_CODES:
            gone = Answer(text=NOT_FOUND_TEXT, respondent="system", via=SOURCE, at=now)
            done = await self.elicitations.close(
                key, Status.CANCELLED, answer=gone, reason="question_not_found"
            )
            return int(done)
        if response.status_code >= HTTP_REDIRECT:
            return None
        try:
            question = parse_question(unwrap_question(response.json()))
        except (ValueError, PayloadRejected):
            return None
        if (closing := upstream_close(question, view.elicitation, now)) is None:
            return None
        status, answer = closing
        reason = "answered in Pinework" if status is Status.ANSWERED else "closed by Pinework"
        done = await self.elicitations.close(key, status, answer=answer, reason=reason)
        self._log.info("pinework.resolved_upstream", question=question_id, status=status.value)
        return int(done)

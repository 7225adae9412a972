"""The inbox page, its live updates, and what people do on it (answer, "I'm on it"), passed to
:meth:`Elicitations.act` with the same rules and the same atomic first answer as chat."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from adapters.shared.openapi import FORM
from adapters.web import cards, pages
from adapters.web.cards import Notice
from adapters.web.pages import InboxPage, Viewer
from adapters.web.reads import PAGE_LIMIT, RECENT_SCAN, Reads
from adapters.web.session import SECURITY_HEADERS, Session, filters_of, first, parse_form
from bot.domain.actions import ClaimIt, OutcomeKind, Submit
from bot.domain.bounds import lookup_problem
from bot.domain.described import describe_answer
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.errors import DeliveryError, PermanentDeliveryError
from bot.domain.model import Answer, ElicitationKey, RefusalCode, Status
from bot.domain.ports import Elicitations
from bot.domain.records import StoredElicitation
from bot.domain.rules import format_time
from bot.domain.wording import title_of

HISTORY_LIMIT = 50
NOT_FOUND = "No such elicitation."
UPSTREAM = "The answer could not be passed on to the system that asked: try again."
REFUSAL_STATUS = {
    RefusalCode.ALREADY_ANSWERED: 409,
    RefusalCode.ALREADY_VOTED: 409,
    RefusalCode.EXPIRED: 409,
    RefusalCode.CLOSED: 409,
    RefusalCode.ASKER: 403,
    RefusalCode.AGENT: 403,
    RefusalCode.BOT: 403,
    RefusalCode.NOT_ADMIN: 403,
    RefusalCode.NOT_APPROVER: 403,
    RefusalCode.APPROVE_ELSEWHERE: 403,
}
"""Any other refusal is 422: the answer itself is not acceptable."""


class InboxRoutes:
    """``GET /``, ``/inbox/live``, ``/inbox/version`` and ``POST /inbox/answer``."""

    def __init__(self, elicitations: Elicitations, reads: Reads, session: Session) -> None:
        self.elicitations = elicitations
        self.reads = reads
        self.session = session

    async def page(
        self,
        request: Request,
        viewer: Viewer,
        *,
        key: str = "",
        card_notice: Notice | None = None,
        draft: str = "",
    ) -> InboxPage:
        filters = filters_of(request)
        reads = self.reads
        version = await reads.fingerprint.get()
        if key:
            stored = await reads.one(key)
            shown = []
            if stored is not None:
                shown = [cards.card_view(await reads.view(stored), draft=draft, notice=card_notice)]
            waiting = [c for c in shown if c.pending]
            closed = [c for c in shown if not c.pending]
            return InboxPage(viewer, filters, waiting, closed, version, key=key)
        after = request.query_params.get("after") or None
        recent = await reads.store.list_elicitations(limit=RECENT_SCAN)
        pending: list[StoredElicitation] = []
        history: list[StoredElicitation] = []
        more = None
        if filters.status in ("", "pending"):
            pending, more = await reads.scan("pending", filters, after, PAGE_LIMIT)
        if filters.status == "":
            done = [s for s in recent if s.status is not Status.PENDING]
            done.sort(key=lambda s: s.updated_at, reverse=True)
            history = [s for s in done if filters.matches(s.elicitation)][:HISTORY_LIMIT]
        elif filters.status != "pending":
            history, more = await reads.scan(filters.status, filters, after, PAGE_LIMIT)
        views = await reads.views([*pending, *history])
        return InboxPage(
            viewer,
            filters,
            [cards.card_view(v) for v in views[: len(pending)]],
            [cards.card_view(v) for v in views[len(pending) :]],
            version,
            choices=pages.filter_choices(s.elicitation for s in recent),
            more=filters.query(after=more) if more else None,
        )

    async def inbox(self, request: Request) -> Response:
        found = self.session.viewer_of(request)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        page = await self.page(request, viewer, key=request.query_params.get("key", ""))
        done = await self.reads.one(request.query_params.get("done", ""))
        answer = done.answer if done is not None else None
        if done is not None and answer is not None and answer.respondent == viewer.identity.key:
            page.notice = Notice("done", recorded(done, answer))
        body = pages.render_inbox(page, self.session.links)
        return self.session.html(body, cookie=viewer if fresh else None)

    async def live(self, request: Request) -> Response:
        found = self.session.viewer_of(request)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        page = await self.page(request, viewer, key=request.query_params.get("key", ""))
        response = self.session.html(pages.render_live(page), cookie=viewer if fresh else None)
        response.headers["X-Inbox-Version"] = page.version
        return response

    async def version(self, request: Request) -> Response:
        found = self.session.viewer_of(request, as_json=True)
        if isinstance(found, Response):
            return found
        version = await self.reads.fingerprint.get()
        return _json({"version": version})

    async def answer(self, request: Request) -> Response:
        as_json = "application/json" in request.headers.get("accept", "")
        session = self.session
        found = session.viewer_of(request, as_json=as_json)
        if isinstance(found, Response):
            return found
        viewer = found[0]
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != FORM:
            return session.problem(415, f"Send the answer as {FORM}.", as_json=as_json)
        try:
            form = parse_form(await request.body())
        except ValueError:
            return session.problem(400, "The form could not be read.", as_json=as_json)
        refused = session.csrf_refusal(request, form)
        if refused is not None:
            return session.problem(403, refused, as_json=as_json)
        named = first(form, "key")
        bad_key = lookup_problem(named)
        if bad_key is not None:
            return session.problem(400, f"key: {bad_key}", as_json=as_json)
        key = ElicitationKey(named)
        if first(form, "claim") == "1":
            return await self.claim(request, viewer, key, as_json=as_json)
        submit = submit_of(viewer, key, form)
        try:
            outcome = await self.elicitations.act(submit)
        except PermanentDeliveryError as exc:
            # Refused upstream (a secret's route): say what it said, by its code and sentence
            # (the error never holds the value), so the person can act on it.
            told = f"{exc} Nothing was stored." if submit.secret else str(exc)
            return await self.refused(request, viewer, key, 502, ("upstream", told), submit)
        except DeliveryError:
            return await self.refused(request, viewer, key, 502, ("upstream", UPSTREAM), submit)
        if outcome.kind is OutcomeKind.NOT_FOUND:
            return session.problem(404, NOT_FOUND, as_json=as_json)
        done = outcome.key or key
        if outcome.kind is OutcomeKind.ANSWERED and outcome.answer is not None:
            if not as_json:
                return _back_to(done)
            stored = await self.reads.store.get(done)
            message = recorded(stored, outcome.answer) if stored else "Your answer was recorded."
            return _json({"ok": True, "key": done, "message": message})
        if outcome.kind is OutcomeKind.VOTED:  # counted toward the route's quorum
            if as_json:
                return _json({"ok": True, "key": done, "message": outcome.message})
            page = await self.page(
                request, viewer, key=done, card_notice=Notice("done", outcome.message)
            )
            return self.session.html(pages.render_inbox(page, self.session.links))
        refusal = outcome.refusal
        code = refusal.code.value if refusal is not None else outcome.kind.value
        message = refusal.message if refusal is not None else outcome.message
        status = REFUSAL_STATUS.get(refusal.code, 422) if refusal is not None else 422
        return await self.refused(request, viewer, done, status, (code, message), submit)

    async def claim(
        self, request: Request, viewer: Viewer, key: ElicitationKey, *, as_json: bool
    ) -> Response:
        """ "I'm on it": escalation and follow-ups wait; every copy shows who."""
        claim = ClaimIt(key, viewer.identity, "web", standing=viewer.standing)
        outcome = await self.elicitations.act(claim)
        if outcome.kind is OutcomeKind.NOT_FOUND:
            return self.session.problem(404, NOT_FOUND, as_json=as_json)
        if outcome.kind is not OutcomeKind.CLAIMED or outcome.claim is None:
            message = outcome.refusal.message if outcome.refusal else "Nothing to claim."
            return await self.refused(request, viewer, key, 409, ("claim", message))
        message = (
            f"You're on it until {format_time(outcome.claim.until)}: "
            "escalation and follow-ups wait for you."
        )
        return _json({"ok": True, "key": key, "message": message}) if as_json else _back_to(key)

    async def refused(
        self,
        request: Request,
        viewer: Viewer,
        key: ElicitationKey,
        status: int,
        why: tuple[str, str],
        submit: Submit | None = None,
    ) -> Response:
        """The refusal: JSON for the script, else the one card again with the message and the
        typed text (never a secret's)."""
        code, message = why
        if "application/json" in request.headers.get("accept", ""):
            return _json({"ok": False, "code": code, "message": message}, status)
        draft = "" if submit is None or submit.secret else (submit.text or "")
        page = await self.page(
            request, viewer, key=key, card_notice=Notice("refused", message), draft=draft
        )
        return self.session.html(pages.render_inbox(page, self.session.links), status)


def _json(body: dict[str, object], status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _back_to(key: str) -> RedirectResponse:
    """After a browser's form post: the inbox, saying what was recorded."""
    return RedirectResponse(f"/?{urlencode({'done': key})}#{key}", status_code=303)


def submit_of(viewer: Viewer, key: ElicitationKey, form: Mapping[str, list[str]]) -> Submit:
    """The answer a form carries. Text keeps what was typed (CRLF as LF), except a secret's,
    which passes exactly as typed."""
    secret = first(form, "secret") == "1"
    raw = first(form, "text")
    text = raw if secret else raw.replace("\r\n", "\n")
    revision = first(form, "revision")
    answers = form_answers(form)
    return Submit(
        key=key,
        who=viewer.identity,
        via="web",
        fields={"answers": answers} if answers else {},
        option_ids=tuple(form.get("option", [])),
        text=text if text.strip() else None,
        secret=secret,
        revision=int(revision) if revision.isdigit() else None,
        digest=first(form, "digest") or None,  # the subject digest the card showed (rule 2)
        shown=SHOWN_WHOLE,  # the inbox's card shows every preview item whole (the reference)
        standing=viewer.standing,
    )


def form_answers(form: Mapping[str, list[str]]) -> dict[str, dict[str, object]]:
    """A form's answers from its ``q.<id>`` (chosen labels) and ``q.<id>.text`` fields, in the
    spec's shape; the domain checks them against the questions."""
    answers: dict[str, dict[str, object]] = {}
    for name, values in form.items():
        if not name.startswith("q."):
            continue
        qid, is_text = (name[2:-5], True) if name.endswith(".text") else (name[2:], False)
        entry = answers.setdefault(qid, {"selected": [], "text": None})
        if is_text:
            typed = (values[0] if values else "").replace("\r\n", "\n")
            entry["text"] = typed if typed.strip() else None
        else:
            entry["selected"] = [v for v in values if v]
    return answers


def recorded(stored: StoredElicitation, answer: Answer) -> str:
    title = title_of(stored.elicitation)
    return f"Recorded: {describe_answer(stored.elicitation, answer)} (on “{title}”)."

"""The Review flow (rule 2): open the review modal, page through it, decide in it, and share a
request too long for a modal as a file in the message's thread.

Paging rewrites one modal (``views.update`` with the hash the click saw), not ``views.push``: Slack
keeps at most three views on a stack. Pages move one at a time, so the last page reached means
every page was shown. Beyond a modal, the modal opens at once (the trigger id lasts 3 s), then the
file is uploaded once per message and revision (two replicas racing can still both upload).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import structlog

from adapters.slack.chat import SlackChat, view_conflict
from adapters.slack.markup.blocks import escape
from adapters.slack.modals.reply import reply_modal
from adapters.slack.review import modal as rm
from adapters.slack.review import pages as review
from adapters.slack.translate import Click, Where, chosen_id, refusal_text
from adapters.slack.wording import just_answered, result_line
from bot.domain.actions import NOT_FOUND_TEXT, Choose, Open, Outcome, OutcomeKind
from bot.domain.errors import DeliveryError
from bot.domain.model import Identity, Status
from bot.domain.ports import Elicitations, PromptView

log = structlog.get_logger("elicitbot.slack.review")

Act = Callable[[Choose | Open, Where, PromptView | None], Awaitable[Outcome | None]]
Tell = Callable[[Identity, Where, str], Awaitable[None]]

NOT_OPENED = "The review could not be opened; click Review… again, or use the web inbox."
ANSWERED = "✅ Done: your answer is recorded."


class ReviewFlow:
    """The review modal's I/O. ``act`` returns the core's outcome untold (the modal says it);
    ``tell`` is the app's ephemeral, for when the modal cannot."""

    def __init__(
        self, chat: SlackChat, elicitations: Elicitations, *, act: Act, tell: Tell
    ) -> None:
        self.chat = chat
        self.elicitations = elicitations
        self.act = act
        self.tell = tell
        self._attached: set[tuple[str, str, str]] = set()
        """(channel, thread, file) shared from here; elsewhere, the thread is looked in."""
        self._attaching = asyncio.Lock()
        """One upload at a time (they are rare): two quick Review… clicks share one file."""

    async def open(self, click: Click, view: PromptView) -> None:
        """Review… on a message: the modal on its first page (or, beyond a modal, the file)."""
        where = click.where
        if click.trigger_id is None:
            return
        meta = rm.meta_for(
            view, channel=where.channel, message_ts=click.message_ts, thread_ts=where.thread_ts
        )
        fits = review.review_fits(view)
        modal = (
            rm.review_modal(view, meta) if fits else rm.file_modal(view, meta, state=rm.ATTACHING)
        )
        try:
            opened = await self.chat.open_view(click.trigger_id, modal)
        except DeliveryError as exc:
            log.warning("slack.review_not_opened", key=meta.key, error=str(exc))
            await self.tell(click.who, where, NOT_OPENED)
            return
        log.info("slack.review_opened", key=meta.key, pages=meta.pages, fits=fits)
        if fits or opened.id is None or where.root_ts is None:
            return
        attached = await self._attach(view, where.channel, where.root_ts)
        state = rm.ATTACHED if attached else rm.NOT_ATTACHED
        await self._update(opened.id, rm.file_modal(view, meta, state=state), opened.hash)

    async def _attach(self, view: PromptView, channel: str, root_ts: str) -> bool:
        """The whole request as a file in the message's thread, once: True when it is there."""
        name = rm.file_name(view.elicitation)
        slot = (channel, root_ts, name)
        async with self._attaching:
            if slot in self._attached:
                return True
            try:
                if not await self.chat.thread_has_file(channel, root_ts, name):
                    await self.chat.upload_snippet(
                        channel,
                        root_ts,
                        filename=name,
                        title=f"The whole request: {name}",
                        content=rm.file_text(view),
                    )
                    log.info("slack.review_file_shared", key=view.elicitation.key, file=name)
            except DeliveryError as exc:
                log.warning("slack.review_file_failed", key=view.elicitation.key, error=str(exc))
                return False
            self._attached.add(slot)
            return True

    async def on_click(self, click: rm.ReviewClick) -> None:
        """A click inside a review modal: a page, a decision, Reply…."""
        meta = click.meta
        where = Where(meta.channel, meta.thread_ts or meta.message_ts, meta.thread_ts)
        view = await self.elicitations.view(meta.key)
        if view is None:
            await self._say(click, where, NOT_FOUND_TEXT)
            return
        action = click.action_id
        if action == rm.PAGE_ACTION:
            await self._page(click, view)
        elif action == rm.REPLY_ACTION:
            await self._push_reply(click, view, where, option_id=None)
        elif action == rm.MANY_ACTION:  # a selection changing: nothing yet
            return
        else:
            await self._decide(click, view, where)

    async def _page(self, click: rm.ReviewClick, view: PromptView) -> None:
        meta = click.meta
        target = click.value.get("p")
        if click.view_id is None or not isinstance(target, int) or abs(target - meta.page) != 1:
            return
        if view.status is Status.PENDING and not rm.current(meta, view):
            fresh = rm.meta_for(
                view, channel=meta.channel, message_ts=meta.message_ts, thread_ts=meta.thread_ts
            )
            modal = rm.review_modal(view, fresh, notice=rm.CHANGED)
        else:
            modal = rm.review_modal(view, replace(meta, page=target))
        await self._update(click.view_id, modal, click.view_hash)

    async def _push_reply(
        self, click: rm.ReviewClick, view: PromptView, where: Where, *, option_id: str | None
    ) -> None:
        """Reply… (or an option that needs a comment): the reply modal on top of the review."""
        meta = click.meta
        if option_id is None:  # Reply…: it opens while the question waits (the core says)
            opens = Open(meta.key, click.who, where.via)
            outcome = await self._decide(click, view, where, action=opens)
            if outcome is None or outcome.kind is not OutcomeKind.FORM:
                return
        if click.trigger_id is None:
            return
        shown = rm.review_shown(meta, view)
        modal = reply_modal(
            view,
            channel=meta.channel,
            message_ts=meta.message_ts,
            thread_ts=meta.thread_ts,
            option_id=option_id,
            shown=shown,
            reviewed=meta.content if shown.whole else None,
            pushed=True,
            digest=meta.digest,
        )
        try:
            await self.chat.push_view(click.trigger_id, modal)
        except DeliveryError as exc:
            log.warning("slack.review_reply_not_opened", key=meta.key, error=str(exc))
            await self.tell(click.who, where, NOT_OPENED)

    def _chosen(self, click: rm.ReviewClick, view: PromptView) -> tuple[str, ...] | None:
        """None: the click names no decision."""
        e = view.elicitation
        action = click.action_id
        if action == rm.SUBMIT_ACTION:
            return tuple(chosen_id(e, v) for v in click.selection)
        if action.startswith(rm.OPTION_ACTION + ".") or action == rm.SELECT_ACTION:
            return (chosen_id(e, click.value),)
        if action == rm.ACK_ACTION:
            return ()
        return None

    async def _decide(
        self,
        click: rm.ReviewClick,
        view: PromptView,
        where: Where,
        *,
        action: Open | None = None,
    ) -> Outcome | None:
        """A decision click (or ``action``, Reply…'s opening) handed to the core; the modal says
        the outcome. An option that needs a comment pushes the reply modal for it instead."""
        meta = click.meta
        e = view.elicitation
        if action is None:
            ids = self._chosen(click, view)
            if ids is None:
                return None
            shown = rm.review_shown(meta, view)
            choice = Choose(
                e.key, click.who, where.via, ids, meta.revision, meta.digest, shown=shown, form=True
            )
            outcome = await self.act(choice, where, view)
        else:
            outcome = await self.act(action, where, view)
        if outcome is None:
            return None
        if outcome.kind is OutcomeKind.FORM:
            if action is None:
                await self._push_reply(click, view, where, option_id=outcome.option_id)
            return outcome
        if outcome.kind is OutcomeKind.ANSWERED:
            text = ANSWERED
            if outcome.answer is not None:
                # Its write-back is on its way: "Sending…", not "Answered", until accepted.
                text = result_line(just_answered(view, outcome.answer))
            await self._say(click, where, text, fallback=None)
            return outcome
        reason = refusal_text(outcome) or NOT_FOUND_TEXT
        notice = f"⛔ {escape(reason)}"
        if outcome.kind is OutcomeKind.REFUSED and view.status is Status.PENDING:
            if review.review_fits(view):
                modal = rm.review_modal(view, meta, notice=notice)
            else:
                state = rm.ATTACHED if meta.file else rm.NOT_ATTACHED
                modal = rm.file_modal(view, meta, state=state, notice=notice)
            if not await self._update(click.view_id, modal, click.view_hash):
                await self.tell(click.who, where, reason)
            return outcome
        await self._say(click, where, notice, fallback=reason)
        return outcome

    async def _say(
        self, click: rm.ReviewClick, where: Where, text: str, *, fallback: str | None = ""
    ) -> None:
        """Say ``text`` in the modal (nothing left to click); when the modal cannot be
        rewritten, ``fallback`` goes to the person privately (None: nothing; "": ``text``)."""
        if await self._update(click.view_id, rm.result_modal(text), click.view_hash):
            return
        if fallback is not None:
            await self.tell(click.who, where, fallback or text)

    async def _update(
        self, view_id: str | None, modal: dict[str, Any], view_hash: str | None
    ) -> bool:
        """Rewrite the modal; False when it cannot be (closed, changed since, Slack refused)."""
        if view_id is None:
            return False
        try:
            await self.chat.update_view(view_id, modal, view_hash=view_hash)
        except DeliveryError as exc:
            if view_conflict(exc):
                log.info("slack.review_moved_on", view_id=view_id)
            else:
                log.warning("slack.review_not_updated", view_id=view_id, error=str(exc))
            return False
        return True

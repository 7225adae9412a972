"""A :class:`~bot.domain.ports.PromptView` as Matrix event content: a plain ``body`` and an HTML
``formatted_body`` built by us, never copied from the asking agent. Pure: no I/O.

What you see is what you approve (answer rule 2): :func:`layout` first renders the view whole,
nothing decisive cut; when that does not fit the event budget the message is cut, says so, and
offers no approving option until the whole request is in its thread (the copy's ref then says
``full_in_thread``). :func:`shown` is that decision, from the current view and the copy's ref,
never from anything in an event. Agent text is escaped, or sanitised Markdown; links show where
they go; ``m.mentions`` and a broken ``@room`` keep an agent from pinging the room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.matrix.intake.reactions import KEYCAPS
from adapters.matrix.markup.form import form_block, own_text
from adapters.matrix.markup.html import anchor, clip, content_bytes, esc, neutralise
from adapters.matrix.markup.markdown import markdown_html, sanitise
from adapters.matrix.markup.previews import (
    WHOLE,
    Block,
    Cutter,
    ItemLimits,
    context_piece,
    field_line,
    preview_blocks,
)
from adapters.matrix.wording import escalated_to, escalation_block, how_to, result_line, timeline
from bot.domain.deciders import APPROVE_IN_WEB, links_to_web
from bot.domain.disclosure import SHOWN_WHOLE, not_shown
from bot.domain.forms import is_form
from bot.domain.model import ApprovalSubject, Disclosure, Kind, Status
from bot.domain.ports import PromptView
from bot.domain.rules import OfferedOption, approving_withheld, format_time, offered_options
from bot.domain.views import writeback_note
from bot.domain.wording import one_line, shorten_digest, title_of

MARKER = "org.elicitbot"
"""Our content key on every prompt: ``{"key": <elicitation key>, "version": n}``."""

MAX_EVENT_BYTES = 65_536
CONTENT_BUDGET = 30_000
"""Bytes of content JSON a prompt may take. Well under the 65,536-byte event limit: an edit
carries the content again as ``m.new_content`` plus a short fallback, and some clients and
bridges struggle with events near the limit."""
EDIT_FALLBACK = 600
"""Code points of an edit's ``* …`` fallback body; the full text is in ``m.new_content``."""

IN_THREAD = "The whole request is in this message's thread; read it there before approving."
"""What a long copy says once all of it is in its thread (and approving is offered)."""
ALL_IN_THREAD = "The whole request is in this message's thread."
"""The same, on a long copy with nothing to approve."""
TOO_LONG = (
    "It is too long for one message: the whole request goes into this message's thread, and "
    "approving is offered here once all of it is there (or decide in the web inbox)."
)
"""What a long copy says while its thread does not hold everything yet."""


@dataclass(frozen=True)
class Limits:
    """Code points shown of each part (None: all of it); halved until the event fits."""

    question: int | None = None
    item: ItemLimits = WHOLE
    option: int = 300
    description: int = 300
    context_part: int = 150
    result: int = 1_500

    def halved(self) -> Limits:
        item = self.item
        return Limits(
            question=max(200, (self.question or 20_000) // 2),
            item=ItemLimits(
                text=max(80, (item.text or 6_000) // 2),
                label=max(40, (item.label or 300) // 2),
                url=max(100, (item.url or 1_000) // 2),
            ),
            option=max(40, self.option // 2),
            description=max(0, self.description // 2),
            context_part=max(40, self.context_part // 2),
            result=max(200, self.result // 2),
        )


CUT = Limits(question=10_000, item=ItemLimits(text=3_000, label=150, url=500))
"""Where cutting starts when the whole request does not fit."""


@dataclass(frozen=True)
class Rendered:
    body: str
    html: str


@dataclass(frozen=True)
class Layout:
    rendered: Rendered
    disclosure: Disclosure
    """What this copy shows a person (what every answer from it carries)."""
    cut: bool
    """The message cannot hold the whole decisive content: it belongs in the thread."""


class _Doc:
    """Plain and HTML built side by side, one block at a time."""

    def __init__(self) -> None:
        self.plain: list[str] = []
        self.html: list[str] = []

    def add(self, plain: str, markup: str) -> None:
        self.plain.append(plain)
        self.html.append(markup)

    def block(self, block: Block) -> None:
        self.add(block.plain, block.html)

    def result(self) -> Rendered:
        return Rendered("\n".join(self.plain), sanitise("".join(self.html)))


def question_block(text: str, limit: int | None, cutter: Cutter) -> Block | None:
    """The question as Markdown (HTML) and as its own text (plain)."""
    text = text.strip()
    if not text:
        return None
    shown_text, was_cut = cutter.take(text, limit)
    note_plain, note_html = cutter.note(was_cut)
    markup = markdown_html(shown_text)
    if note_html:
        markup += f"<p>{note_html.strip()}</p>"
    return Block(neutralise(shown_text) + note_plain, markup)


def subject_line(s: ApprovalSubject) -> Block:
    plain = [
        f"Subject {clip(s.id, 80)}",
        f"revision {s.revision}",
        f"digest {shorten_digest(s.digest)}",
    ]
    markup = [
        f"Subject <code>{esc(clip(s.id, 80))}</code>",
        f"revision {s.revision}",
        f"digest <code>{esc(shorten_digest(s.digest))}</code>",
    ]
    if s.expires_at is not None:
        plain.append(f"expires {format_time(s.expires_at)}")
        markup.append(f"expires {format_time(s.expires_at)}")
    if not s.preview_complete:
        plain.append("preview incomplete")
        markup.append("<b>preview incomplete</b>")
    return Block(neutralise(" · ".join(plain)), f"<p>{' · '.join(markup)}</p>")


def _option_line(
    number: int,
    offered: OfferedOption,
    limits: Limits,
    *,
    here: bool,
    web: str | None = None,
    to_web: bool = False,
) -> tuple[str, str]:
    """One option: its keycap and label, and notes. An approving option that counts only on
    other surfaces has no keycap: 🔗 where that is the web inbox (``to_web``; ``web``: the page,
    said on the first such option), else •."""
    o = offered.option
    mark = KEYCAPS[number - 1] if number <= len(KEYCAPS) else f"{number}."
    label = clip(one_line(o.label), limits.option)
    if offered.elsewhere:
        mark = "🔗" if to_web else "•"
    plain = f"{mark} {neutralise(label)}"
    markup = f"{mark} <b>{esc(label)}</b>"
    if offered.elsewhere and web:
        plain += f" — {APPROVE_IN_WEB}: {web}"
        markup += f" — {APPROVE_IN_WEB}: {anchor(web)}"
    notes = []
    if o.recommended:
        notes.append("recommended")
    if offered.admin_only:
        notes.append("workspace admins only")
    if offered.elsewhere and not web:
        notes.append("in the web inbox" if to_web else "not offered here")
    elif not offered.offered and not offered.elsewhere:
        notes.append("not offered here" if here else "not offered now")
    if o.requires_text:
        notes.append("needs a comment")
    for note in notes:
        plain += f" ({note})"
        markup += f" <i>({note})</i>"
    if o.description and limits.description > 0:
        description = clip(one_line(o.description), limits.description)
        plain += f" — {neutralise(description)}"
        markup += f" — {esc(description)}"
    return plain, markup


def _options(doc: _Doc, view: PromptView, limits: Limits, shown_: Disclosure) -> None:
    e = view.elicitation
    choices = offered_options(
        e, view.now, shown=shown_, surface="matrix", approve_on=view.approve_on
    )
    approving = any(o.approving for o in e.options)
    withheld_now = approving_withheld(e, view.now)
    elsewhere = next((o.withheld_reason for o in choices if o.elsewhere), None)
    web = view.link if links_to_web(view.approve_on) else None
    note = None
    if approving and withheld_now is not None:
        plain = f"⚠️ {withheld_now} Approving options are not offered now; the other options work."
        doc.add(plain, f"<p>{esc(plain)}</p>")
    elif elsewhere is not None:  # approving counts only on other surfaces (approve_on)
        note = f"⚠️ {elsewhere} The other options work here."
    elif approving and not shown_.whole:
        note = f"⚠️ {not_shown(shown_.review)} The other options work here."
    elif shown_.review == IN_THREAD:
        note = f"🧵 {IN_THREAD if approving else ALL_IN_THREAD}"
    if note is not None:
        doc.add(note, f"<p><b>{esc(note)}</b></p>")
    here = withheld_now is None
    first = next((n for n, o in enumerate(choices, start=1) if o.elsewhere), None)
    lines = [  # the inbox page once, on the first approving option
        _option_line(
            number,
            offered,
            limits,
            here=here,
            web=web if number == first else None,
            to_web=web is not None,
        )
        for number, offered in enumerate(choices, start=1)
    ]
    if lines:
        doc.add("\n".join(p for p, _ in lines), "<p>" + "<br>".join(h for _, h in lines) + "</p>")


def _render(view: PromptView, limits: Limits, shown_: Disclosure, cutter: Cutter) -> Rendered:
    e = view.elicitation
    pending = view.status is Status.PENDING
    doc = _Doc()
    icon = "🔐" if e.kind is Kind.APPROVAL else "❓"
    title = clip(title_of(e), 200)
    doc.add(f"{icon} {neutralise(title)}", f"<h4>{icon} {esc(title)}</h4>")
    note = writeback_note(view)
    if pending:
        escalation = escalation_block(view)
        if escalation is not None:
            doc.block(escalation)
    else:
        result = result_line(view, limits.result)
        doc.add(neutralise(result), f"<p><b>{esc(result)}</b></p>")
    if note is not None:
        note = clip(one_line(note), limits.result)
        doc.add(neutralise(note), f"<p><b>{esc(note)}</b></p>")
    question_limit = limits.question
    if not pending and question_limit is not None:
        question_limit //= 4
    question = question_block(own_text(e), question_limit, cutter)
    if question is not None:
        doc.block(question)
    if pending and is_form(e):
        doc.block(form_block(e.form, label=limits.option, description=limits.description))
    trailing: list[Block] = []
    if e.subject is not None:
        previews, trailing = preview_blocks(e.subject.preview, limits.item, cutter)
        for block in previews:
            doc.block(block)
    metadata = [
        *trailing,
        *(context_piece(n, v, limits.context_part) for n, v in e.context_parts()),
    ]
    if metadata:
        doc.block(field_line(metadata))
    if e.subject is not None:
        doc.block(subject_line(e.subject))
    if pending:
        if not is_form(e):
            _options(doc, view, limits, shown_)
        text = how_to(e)
        doc.add(text, f"<p><i>{esc(text)}</i></p>")
        line = timeline(view)
        if line:
            doc.add(neutralise(line), f"<p><i>{esc(line)}</i></p>")
    doc.add(f"Web inbox: {view.link}", f"<p>{anchor(view.link)}</p>")
    return doc.result()


def _fits(rendered: Rendered, view: PromptView) -> bool:
    return content_bytes(_content(rendered, view)) <= CONTENT_BUDGET


def layout(view: PromptView, *, full_in_thread: bool = False) -> Layout:
    """The message for ``view`` and what it shows: the whole request when it fits the budget;
    otherwise cut to fit, with approving offered only when ``full_in_thread`` (the copy's thread
    holds all of it)."""
    whole = Cutter()
    rendered = _render(view, Limits(), SHOWN_WHOLE, whole)
    if not whole.cut and _fits(rendered, view):
        return Layout(rendered, SHOWN_WHOLE, cut=False)
    disclosure = (
        Disclosure(whole=True, review=IN_THREAD)
        if full_in_thread
        else Disclosure(whole=False, review=TOO_LONG)
    )
    where = "this message's thread and " if full_in_thread else ""
    note_plain = f" (cut: the whole text is in {where}the web inbox: {view.link})"
    note_html = f" <i>(cut: the whole text is in {where}{anchor(view.link)})</i>"
    limits = CUT
    for _ in range(16):
        rendered = _render(view, limits, disclosure, Cutter(note_plain, note_html))
        if _fits(rendered, view):
            return Layout(rendered, disclosure, cut=True)
        limits = limits.halved()
    return Layout(_minimal(view), disclosure, cut=True)


def shown(view: PromptView, *, full_in_thread: bool = False) -> Disclosure:
    """What a copy of ``view`` shows a person (answer rule 2): the whole request, when its
    message holds it or (``full_in_thread``, from the copy's ref) its thread does."""
    return layout(view, full_in_thread=full_in_thread).disclosure


def needs_thread(view: PromptView) -> bool:
    """A pending copy of ``view`` is cut: the whole request goes into its thread."""
    return view.status is Status.PENDING and layout(view).cut


def render(view: PromptView, *, full_in_thread: bool = False) -> Rendered:
    """The view as text and HTML whose content JSON takes at most ``CONTENT_BUDGET`` bytes."""
    return layout(view, full_in_thread=full_in_thread).rendered


def _minimal(view: PromptView) -> Rendered:
    """Last resort when even the smallest limits overflow (thousands of options)."""
    e = view.elicitation
    text = clip(title_of(e), 200)
    if view.status is not Status.PENDING:
        text += " — " + result_line(view, 200)
    else:
        text += " — too long to show here; answer it in the web inbox."
    return Rendered(
        f"{neutralise(text)}\n{view.link}", f"<p>{esc(text)}</p><p>{anchor(view.link)}</p>"
    )


def _content(rendered: Rendered, view: PromptView) -> dict[str, Any]:
    users = escalated_to(view) if view.status is Status.PENDING else []
    return {
        "msgtype": "m.text",
        "body": rendered.body,
        "format": "org.matrix.custom.html",
        "formatted_body": rendered.html,
        "m.mentions": {"user_ids": users} if users else {},
        MARKER: {"key": view.elicitation.key, "version": view.version},
    }


def message_content(view: PromptView, *, full_in_thread: bool = False) -> dict[str, Any]:
    """The ``m.room.message`` content of a prompt (``full_in_thread``: from the copy's ref)."""
    return _content(render(view, full_in_thread=full_in_thread), view)


def edit_content(
    event_id: str, view: PromptView, *, full_in_thread: bool = False
) -> dict[str, Any]:
    """An ``m.replace`` edit of ``event_id`` whose new content is exactly what a post would be
    (so what it shows is what :func:`shown` says), with a short ``* …`` fallback."""
    new = message_content(view, full_in_thread=full_in_thread)
    head = new["body"].split("\n", 2)
    fallback = clip(" — ".join(head[:2]), EDIT_FALLBACK)
    return {
        "msgtype": "m.text",
        "body": f"* {fallback}",
        "format": "org.matrix.custom.html",
        "formatted_body": f"* {esc(fallback)}",
        "m.new_content": new,
        "m.mentions": {},
        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }

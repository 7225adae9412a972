"""A :class:`~bot.domain.ports.PromptView` as Matrix event content: a plain ``body`` and an HTML
``formatted_body`` built by us, never copied from the asking agent; and the reactions seeded on it.

Pure: no I/O. What keeps agent text harmless (the escaping itself is in
:mod:`adapters.matrix.markup`):

- every piece of agent text is HTML-escaped, so it cannot add tags, attributes or links; the only
  links are ours (the web inbox) and a preview item's ``http(s)`` URL, shown as its own text so
  a label cannot disguise where it points;
- every prompt carries ``m.mentions`` (empty, or an escalation's admins), which turns off the
  legacy body-matching push rules, and ``@room`` is broken with a word joiner for clients that
  still match text: an agent cannot ping the room or anyone in it;
- the complete event stays under Matrix's 65,536-byte limit: long text is cut (in code points)
  with a link to :attr:`PromptView.link`, the web inbox's full text.

Options are numbered with keycap emoji (1️⃣ … 🔟) that double as the reactions the bot seeds;
admin-only options are marked; approving options withheld (preview incomplete, subject expired)
are shown as not offered, with the reason. After the answer the message shows the result: who,
what, when and via which platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from adapters.matrix.markup import (
    anchor,
    clip,
    content_bytes,
    esc,
    esc_lines,
    matrix_users,
    neutralise,
    one_line,
    pill,
    safe_url,
)
from adapters.matrix.reactions import ACK_KEY, KEYCAPS
from bot.domain.deadlines import active_claim, claim_line, schedule_line
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    Kind,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.refs import MatrixRef
from bot.domain.rules import (
    OfferedOption,
    approving_withheld,
    describe_answer,
    format_time,
    offered_options,
)
from bot.domain.views import title_of

MARKER = "org.elicitbot"
"""Our content key on every prompt: ``{"key": <elicitation key>, "version": n}``."""

MAX_EVENT_BYTES = 65_536
CONTENT_BUDGET = 60_000
"""Bytes of content JSON for a post; the rest of the event (ids, hashes, signatures) fits in the
remaining 5.5 KiB."""
EDIT_FALLBACK = 600
"""Code points of an edit's ``* …`` fallback body; the full text is in ``m.new_content``."""
_PLATFORMS = {"slack": "Slack", "matrix": "Matrix", "web": "the web inbox"}


@dataclass(frozen=True)
class Limits:
    """How much of each part is shown, in code points; halved until the event fits."""

    question: int = 20_000
    preview_item: int = 4_000
    option: int = 300
    description: int = 300
    context_part: int = 150
    result: int = 1_500

    def halved(self) -> Limits:
        return Limits(
            question=max(200, self.question // 2),
            preview_item=max(80, self.preview_item // 2),
            option=max(40, self.option // 2),
            description=max(0, self.description // 2),
            context_part=max(40, self.context_part // 2),
            result=max(200, self.result // 2),
        )


@dataclass(frozen=True)
class Rendered:
    body: str
    html: str


# --------------------------------------------------------------------------- text helpers


def shorten_digest(digest: str) -> str:
    """``sha256:4f2a0c1e9b8d…`` -> ``sha256:4f2a0c1e…``."""
    algorithm, sep, value = digest.partition(":")
    if sep and len(value) > 8:  # noqa: PLR2004 - eight hex digits identify it to a person
        return f"{algorithm}:{value[:8]}…"
    return clip(digest, 20)


def who(respondent: str, display_name: str | None) -> str:
    """How a respondent is named: the Matrix ID itself (never a display name someone could
    choose to look like another), a Slack person's name, or the timeout rule."""
    platform, _, user = respondent.partition(":")
    if respondent == "system":
        return "the timeout rule"
    if platform == "matrix" and user:
        return user
    return display_name or respondent


def platform_name(via: str) -> str:
    platform = via.partition(":")[0]
    return _PLATFORMS.get(platform, platform)


# --------------------------------------------------------------------------- parts


class _Doc:
    """Plain and HTML built side by side, one block at a time."""

    def __init__(self) -> None:
        self.plain: list[str] = []
        self.html: list[str] = []

    def add(self, plain: str, markup: str) -> None:
        self.plain.append(plain)
        self.html.append(markup)

    def result(self) -> Rendered:
        return Rendered("\n".join(self.plain), "".join(self.html))


def _cut_note(link: str) -> tuple[str, str]:
    return (f" (cut: full text at {link})", f" <i>(cut: {anchor(link)} has the full text)</i>")


def _text_block(doc: _Doc, text: str, limit: int, link: str) -> None:
    """A block of agent text, cut to ``limit`` code points with a link to the full text."""
    text = text.strip()
    if not text:
        return
    if len(text) <= limit:
        doc.add(neutralise(text), f"<p>{esc_lines(text)}</p>")
        return
    head = text[: max(1, limit - 1)] + "…"
    note_plain, note_html = _cut_note(link)
    doc.add(neutralise(head) + note_plain, f"<p>{esc_lines(head)}{note_html}</p>")


def _context_line(e: Elicitation, limit: int) -> str:
    return " · ".join(
        f"{name}: {clip(one_line(value), limit)}" for name, value in e.context_parts()
    )


def _subject(doc: _Doc, s: ApprovalSubject, limits: Limits, link: str) -> None:
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
    doc.add(neutralise(" · ".join(plain)), f"<p>{' · '.join(markup)}</p>")
    if s.preview:
        items = [_preview_item(item, limits.preview_item, link) for item in s.preview]
        doc.add(
            "Preview:\n" + "\n".join(f"• {p}" for p, _ in items),
            "<p>Preview:</p><ul>" + "".join(f"<li>{h}</li>" for _, h in items) + "</ul>",
        )


def _preview_item(item: PreviewItem, limit: int, link: str) -> tuple[str, str]:
    label = clip(one_line(item.label), 150) if item.label else ""
    head_plain = f"{label}: " if label else ""
    head_html = f"<b>{esc(label)}</b>: " if label else ""
    url = safe_url(item.url)
    text = item.text if item.text is not None else item.value
    parts_plain: list[str] = []
    parts_html: list[str] = []
    if text:
        cut = len(text) > limit
        shown = text[: max(1, limit - 1)] + "…" if cut else text
        note_plain, note_html = _cut_note(link) if cut else ("", "")
        if item.type in ("code", "diff", "command", "json"):
            parts_plain.append(neutralise(shown) + note_plain)
            parts_html.append(f"<pre><code>{esc(shown)}</code></pre>{note_html}")
        else:
            parts_plain.append(neutralise(shown) + note_plain)
            parts_html.append(esc_lines(shown) + note_html)
    if url is not None:
        parts_plain.append(clip(url, 500))
        parts_html.append(anchor(url))
    elif item.url:
        shown_url = clip(item.url, 200)
        parts_plain.append(f"{neutralise(shown_url)} (not a web link)")
        parts_html.append(f"<code>{esc(shown_url)}</code> (not a web link)")
    return head_plain + " ".join(parts_plain), head_html + " ".join(parts_html)


def _option_line(number: int, offered: OfferedOption, limits: Limits) -> tuple[str, str]:
    o = offered.option
    mark = KEYCAPS[number - 1] if number <= len(KEYCAPS) else f"{number}."
    label = clip(one_line(o.label), limits.option)
    plain = f"{mark} {neutralise(label)}"
    markup = f"{mark} <b>{esc(label)}</b>"
    if offered.admin_only:
        plain += " (workspace admins only)"
        markup += " <i>(workspace admins only)</i>"
    if not offered.offered:
        plain += " (not offered now)"
        markup += " <i>(not offered now)</i>"
    if o.requires_text:
        plain += " (needs a comment)"
        markup += " <i>(needs a comment)</i>"
    if o.description and limits.description > 0:
        description = clip(one_line(o.description), limits.description)
        plain += f" — {neutralise(description)}"
        markup += f" — {esc(description)}"
    return plain, markup


def _how_to(e: Elicitation) -> str:
    mode = e.answer_mode
    if mode is AnswerMode.SECRET:
        return "This answer is a secret: answer it in the web inbox, never in a chat message."
    if mode is AnswerMode.FREE_TEXT or (mode is AnswerMode.CHOICE_OR_TEXT and not e.options):
        limit = f" (at most {e.max_length:,} characters)" if e.max_length else ""
        return f"To answer, reply in this message's thread with your answer{limit}."
    if not e.options:
        if mode is AnswerMode.ACKNOWLEDGE:
            return f"To acknowledge, react with {ACK_KEY} or reply in this message's thread."
        return "This question offers no options here; answer it in the web inbox."
    how = (
        "To answer, react with the option's number, or reply in this message's thread with "
        "its number, id or label."
    )
    if len(e.options) > len(KEYCAPS):
        how += f" Options after {len(KEYCAPS)} are chosen by a thread reply."
    if mode is AnswerMode.MULTI_CHOICE:
        how += " To choose several, reply with them separated by commas (for example: 1, 3)."
    if mode is AnswerMode.CHOICE_OR_TEXT:
        how += " Or reply with your own answer as text."
    return how


def _result(view: PromptView, limits: Limits) -> str:
    e = view.elicitation
    answer = view.answer
    if view.status is Status.ANSWERED and answer is not None:
        what = clip(describe_answer(e, answer), limits.result)
        if answer.respondent == "system":
            return f"⏱️ Decided at timeout — {what} — {format_time(answer.at)}"
        name = clip(who(answer.respondent, answer.display_name), 200)
        return (
            f"✅ Answered by {name} — {what} — {format_time(answer.at)} "
            f"via {platform_name(answer.via)}"
        )
    if view.status is Status.EXPIRED:
        text = "⌛ Expired — nobody answered"
        if e.deadlines.expires_at is not None:
            text += f" by {format_time(e.deadlines.expires_at)}"
        if answer is not None:
            text += f" — outcome: {clip(describe_answer(e, answer), limits.result)}"
        return text
    if view.status is Status.CANCELLED:
        return "🚫 Cancelled — this request was withdrawn; it can no longer be answered."
    return "Closed."


def escalated_to(view: PromptView) -> list[str]:
    """The Matrix IDs an escalation copy mentions (none on an ordinary prompt)."""
    escalation = getattr(view, "escalation", None)
    return matrix_users(getattr(escalation, "mentions", None) or ())


def _originals(view: PromptView) -> list[str]:
    """Links to the original Matrix copies of an escalated question."""
    escalation = getattr(view, "escalation", None)
    links = []
    for original in getattr(escalation, "originals", None) or ():
        ref = _matrix_ref(getattr(original, "ref", None))
        if ref is not None:
            room, event = quote(ref.room_id, safe="!:"), quote(ref.event_id, safe="$:")
            links.append(f"https://matrix.to/#/{room}/{event}")
    return links


def _matrix_ref(ref: Any) -> MatrixRef | None:
    """A Matrix copy's ref, typed or as its stored JSON; None for another platform's."""
    if isinstance(ref, MatrixRef):
        return ref
    if isinstance(ref, Mapping):
        room_id, event_id = ref.get("room_id"), ref.get("event_id")
        if isinstance(room_id, str) and isinstance(event_id, str):
            return MatrixRef(room_id, event_id)
    return None


def _escalation(doc: _Doc, view: PromptView) -> None:
    """An escalation copy says so first, naming (and mentioning) whom it is escalated to."""
    if getattr(view, "escalation", None) is None:
        return
    users = escalated_to(view)
    plain = "🚨 Escalated: nobody has answered yet."
    markup = esc(plain)
    if users:
        plain += " " + ", ".join(users)
        markup += " " + ", ".join(pill(u) for u in users)
    originals = _originals(view)
    if originals:
        plain += "\nOriginal: " + " ".join(originals)
        markup += "<br/>Original: " + " ".join(anchor(u) for u in originals)
    doc.add(plain, f"<p><b>{markup}</b></p>")


def _render(view: PromptView, limits: Limits) -> Rendered:
    e = view.elicitation
    link = view.link
    pending = view.status is Status.PENDING
    doc = _Doc()
    icon = "🔐" if e.kind is Kind.APPROVAL else "❓"
    title = clip(title_of(e), 200)
    doc.add(f"{icon} {neutralise(title)}", f"<h4>{icon} {esc(title)}</h4>")
    if pending:
        _escalation(doc, view)
    if not pending:
        result = _result(view, limits)
        doc.add(neutralise(result), f"<p><b>{esc(result)}</b></p>")
    _text_block(doc, e.question, limits.question if pending else limits.question // 4, link)
    context = _context_line(e, limits.context_part)
    if context:
        doc.add(neutralise(context), f"<p><i>{esc(context)}</i></p>")
    if e.subject is not None:
        _subject(doc, e.subject, limits, link)
    if pending:
        reason = approving_withheld(e, view.now)
        if reason is not None and any(o.approving for o in e.options):
            note = f"⚠️ {reason} Approving options are not offered now; the other options work."
            doc.add(note, f"<p>{esc(note)}</p>")
        lines = [
            _option_line(number, offered, limits)
            for number, offered in enumerate(offered_options(e, view.now), start=1)
        ]
        if lines:
            doc.add(
                "\n".join(p for p, _ in lines), "<p>" + "<br/>".join(h for _, h in lines) + "</p>"
            )
        how = _how_to(e)
        doc.add(how, f"<p><i>{esc(how)}</i></p>")
        timeline = _timeline(view)
        if timeline:
            doc.add(neutralise(timeline), f"<p><i>{esc(timeline)}</i></p>")
    doc.add(f"Web inbox: {link}", f"<p>{anchor(link)}</p>")
    return doc.result()


def _timeline(view: PromptView) -> str:
    """What happens next and when, and who is on it (times in UTC; Matrix has no per-reader
    date formatting)."""
    parts = []
    if view.schedule:
        parts.append(f"⏱ {clip(schedule_line(view.schedule, now=view.now), 500)}")
    claim = active_claim(view.claim, view.now)
    if claim is not None:
        parts.append(f"🙋 {clip(claim_line(claim, view.now), 200)}")
    return " · ".join(parts)


def render(view: PromptView, *, budget: int = CONTENT_BUDGET) -> Rendered:
    """The view as text and HTML whose content JSON takes at most ``budget`` bytes."""
    limits = Limits()
    for _ in range(16):
        rendered = _render(view, limits)
        if content_bytes(_content(rendered, view)) <= budget:
            return rendered
        limits = limits.halved()
    return _minimal(view)


def _minimal(view: PromptView) -> Rendered:
    """Last resort when even the smallest limits overflow (thousands of options)."""
    e = view.elicitation
    text = clip(title_of(e), 200)
    if view.status is not Status.PENDING:
        text += " — " + _result(view, Limits().halved().halved())
    else:
        text += " — too long to show here; answer it in the web inbox."
    return Rendered(
        f"{neutralise(text)}\n{view.link}", f"<p>{esc(text)}</p><p>{anchor(view.link)}</p>"
    )


# --------------------------------------------------------------------------- event contents


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


def message_content(view: PromptView, *, budget: int = CONTENT_BUDGET) -> dict[str, Any]:
    """The ``m.room.message`` content of a prompt."""
    return _content(render(view, budget=budget), view)


def edit_content(event_id: str, view: PromptView) -> dict[str, Any]:
    """An ``m.replace`` edit of ``event_id`` to the view as it stands now.

    The ``* …`` fallback for clients without edits is short; the full text is the new content.
    """
    new = message_content(view, budget=CONTENT_BUDGET - 4 * EDIT_FALLBACK - 500)
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

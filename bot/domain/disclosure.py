"""Answer rule 2's surface half: what you see is what you approve.

An approving option is offered and accepted on a surface only where it showed the whole decisive
content its digest covers; elsewhere the message says so and offers a review that does. The
renderer decides ``Disclosure.whole`` (it knows what it cut); :func:`decisive` names the strings
to show whole, so a test can check that claim.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.domain.model import Disclosure, Elicitation, PreviewItem


@dataclass(frozen=True)
class Piece:
    """One part of the decisive content and the strings a surface must show of it, whole."""

    where: str
    """``question`` or ``preview <n>`` (1-based), for messages and test failures."""
    texts: tuple[str, ...]


def _item_texts(item: PreviewItem) -> tuple[str, ...]:
    return tuple(t for t in (item.label, item.text, item.value, item.url) if t and t.strip())


def decisive(e: Elicitation) -> tuple[Piece, ...]:
    """Everything an approval binds to, in the order a person reads it: the question, then each
    preview item. An elicitation without a subject has only its question (a plain question's
    "approve" is still a decision on what the message says)."""
    pieces: list[Piece] = []
    question = e.question.strip()
    if question:
        pieces.append(Piece("question", (question,)))
    if e.subject is not None:
        for n, item in enumerate(e.subject.preview, start=1):
            texts = _item_texts(item)
            if texts:
                pieces.append(Piece(f"preview {n}", texts))
    return tuple(pieces)


SHOWN_WHOLE = Disclosure(whole=True)
"""A surface that shows everything (the web inbox, a review that holds it all)."""

UPSTREAM_DECIDED = Disclosure(whole=True)
"""A decision taken on the upstream's own surface and reported to us (Toolshed's resolve route):
what it showed the person is the upstream's to guarantee, not ours."""

NOT_SHOWN_LEAD = "this message does not show everything you would approve"


def not_shown(review: str | None) -> str:
    """The sentence for an approving option not offered (or refused) on a surface that cut the
    content: what is missing and where to see it."""
    lead = NOT_SHOWN_LEAD[:1].upper() + NOT_SHOWN_LEAD[1:] + "."
    return f"{lead} {review}" if review else lead


def shows_everything(shown: Disclosure | None) -> bool:
    """Approving is allowed on this surface: it said it showed the whole decisive content.
    An action that says nothing (``None``) showed nothing we know of: approving is refused."""
    return shown is not None and shown.whole

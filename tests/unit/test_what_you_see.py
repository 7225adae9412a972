"""What you see is what you approve (answer rule 2, issue 12), checked on every surface at once.

For every valid fixture of every source, the fourteen handup preview types, the issue's deploy
request and its 40 KB long case, and (Hypothesis) generated content: each surface — a Slack
message, a Matrix message, the web inbox's card — either offers an approving option and shows
every word of the decisive content (``bot.domain.disclosure.decisive``: the question and every
preview item, which carry the tool and its arguments, the command, the SQL, the diff), or offers
no approving option there. The surface's own ``shown`` must agree with what it rendered, since
the same value decides whether a click from it is accepted.

The web inbox is the reference: it shows everything, always, and always offers approve (when the
elicitation's own rule allows it).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.matrix import render as matrix_render
from adapters.matrix.intake import reactions as matrix_reactions
from adapters.slack import render as slack_render
from adapters.web import cards, pages
from bot.domain.model import (
    AnswerMode,
    ApprovalSubject,
    Elicitation,
    Identity,
    Kind,
    Meaning,
    Option,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import approving_withheld
from tests.showcase import (
    DEPLOY_DECISIVE,
    corpus,
    deploy_elicitation,
    long_elicitation,
    missing_words,
)

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LINK = "http://127.0.0.1:8787/?key=x"


def view_of(e: Elicitation) -> PromptView:
    return PromptView(e, Status.PENDING, None, 1, LINK, NOW)


# --------------------------------------------------------------------------- reading a surface


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(markup: str) -> str:
    parser = _Text()
    parser.feed(markup)
    parser.close()
    return " ".join(parser.parts)


def _strings(node: Any) -> Iterator[str]:
    """Every text a Block Kit structure shows (text objects, rich text elements, fields)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in ("text", "url") and isinstance(value, str):
                yield value
            elif key not in ("action_id", "block_id", "value", "private_metadata"):
                yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _approving_ids(e: Elicitation) -> set[str]:
    return {o.id for o in e.options if o.meaning is Meaning.APPROVE}


def slack_surface(view: PromptView) -> tuple[bool, str]:
    """(an approving option is offered, the visible text) of the Slack message."""
    _, blocks = slack_render.render(view)
    approving = _approving_ids(view.elicitation)
    offered = False
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            values = [element.get("value")] + [
                o.get("value") for o in element.get("options", []) if isinstance(o, Mapping)
            ]
            for value in values:
                if not isinstance(value, str):
                    continue
                data = json.loads(value)
                chosen = data.get("o")
                if chosen is None and "i" in data:
                    chosen = view.elicitation.options[data["i"]].id
                offered = offered or chosen in approving
    # mrkdwn escapes &, < and >: a person reads them decoded.
    return offered, html.unescape("\n".join(_strings(blocks)))


def matrix_surface(view: PromptView) -> tuple[bool, str]:
    """(an approving option is offered — its reaction seeded —, the visible text)."""
    content = matrix_render.message_content(view)
    keys = matrix_reactions.reaction_keys(view, shown=matrix_render.shown(view))
    approving = [
        matrix_reactions.KEYCAPS[n]
        for n, o in enumerate(view.elicitation.options[: len(matrix_reactions.KEYCAPS)])
        if o.meaning is Meaning.APPROVE
    ]
    offered = any(key in keys for key in approving)
    return offered, html_text(content.get("formatted_body", "")) + "\n" + content["body"]


def web_surface(view: PromptView) -> tuple[bool, str]:
    card = cards.card_view(view)
    viewer = pages.Viewer(Identity(platform="web", user="local"), admin=True, csrf="x")
    markup = pages.render_live(pages.InboxPage(viewer, pages.Filters(), [card], [], "v1"))
    approving = _approving_ids(view.elicitation)
    offered = any(o.offered and o.id in approving for o in card.options)
    return offered, html_text(markup)


SURFACES: dict[str, Callable[[PromptView], tuple[bool, str]]] = {
    "slack": slack_surface,
    "matrix": matrix_surface,
    "web": web_surface,
}
SHOWN: dict[str, Callable[[PromptView], Any]] = {
    "slack": slack_render.shown,
    "matrix": matrix_render.shown,
}


def check_surface(name: str, view: PromptView) -> bool:
    """The rule on one surface; returns whether approve was offered there."""
    offered, text = SURFACES[name](view)
    e = view.elicitation
    if offered:
        missing = missing_words(text, e)
        assert missing == [], f"{name} offers approve without showing: {missing[:20]}"
    if name in SHOWN:
        whole = SHOWN[name](view).whole
        if offered:
            assert whole, f"{name} offers approve where its shown() says it cut the content"
        elif whole and _approving_ids(e) and approving_withheld(e, view.now) is None:
            raise AssertionError(f"{name} says it showed everything but offers no approve")
    return offered


# --------------------------------------------------------------------------- the fixtures

CORPUS = corpus(now=NOW)


@pytest.mark.parametrize("surface", sorted(SURFACES))
@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_fixture_shows_what_it_would_approve_or_offers_no_approve(
    case: str, surface: str
) -> None:
    check_surface(surface, view_of(CORPUS[case]))


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_the_web_inbox_offers_approve_on_every_fixture_whose_rule_allows_it(surface: str) -> None:
    """The reference surface shows everything: approve is offered wherever the elicitation's
    own rule allows it (and the chat surfaces do so on the small fixtures too)."""
    for case, e in CORPUS.items():
        if not _approving_ids(e) or approving_withheld(e, NOW) is not None:
            continue
        if surface == "web" or e.subject is None or len(e.subject.preview) < 12:
            assert check_surface(surface, view_of(e)), f"{surface} withholds approve on {case}"


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_the_deploy_request_shows_the_sql_the_diff_and_the_command_with_approve(
    surface: str,
) -> None:
    view = view_of(deploy_elicitation(now=NOW))
    offered, text = SURFACES[surface](view)
    assert offered, f"{surface} does not offer Approve on the deploy request"
    flat = " ".join(text.split())
    for decisive in DEPLOY_DECISIVE:
        assert " ".join(decisive.split()) in flat, (surface, decisive)
    assert check_surface(surface, view)


@pytest.mark.parametrize("surface", ["slack", "matrix"])
def test_the_long_request_offers_no_approve_in_the_message(surface: str) -> None:
    view = view_of(long_elicitation(now=NOW))
    assert not check_surface(surface, view)
    shown = SHOWN[surface](view)
    assert not shown.whole
    assert shown.review


def test_the_long_request_is_whole_in_the_web_inbox() -> None:
    assert check_surface("web", view_of(long_elicitation(now=NOW)))


# --------------------------------------------------------------------------- generated content

_TYPES = ("text", "markdown", "code", "diff", "command", "json", "field", "link", "email", "files")
_ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
_TEXT = st.one_of(
    st.text(_ALPHABET, max_size=60),
    st.sampled_from(["**bold**", "```", "<!channel>", "@room", "<@U0X>", "a\n+b\n-c", "&lt;"]),
    st.integers(100, 9000).map(lambda n: ("word " * n)[:n]),
)


@st.composite
def _items(draw: st.DrawFn) -> PreviewItem:
    kind = draw(st.sampled_from(_TYPES))
    label = draw(st.one_of(st.none(), st.text(_ALPHABET, min_size=1, max_size=20)))
    if kind == "field":
        return PreviewItem(type=kind, label=label or "Field", value=draw(_TEXT) or "v")
    if kind == "link":
        url = draw(st.sampled_from(["https://example.org/a?b=1&c=2", "https://x.example/y"]))
        return PreviewItem(type=kind, label=label, url=url, text=draw(st.none() | _TEXT))
    return PreviewItem(type=kind, label=label, text=draw(_TEXT))


@st.composite
def _elicitations(draw: st.DrawFn) -> Elicitation:
    items = tuple(draw(st.lists(_items(), max_size=12)))
    return Elicitation(
        source="handup",
        source_id="req_generated",
        asker="agt_1",
        kind=Kind.APPROVAL,
        title=draw(st.text(_ALPHABET, max_size=40)),
        question=draw(_TEXT),
        answer_mode=AnswerMode.SINGLE_CHOICE,
        options=(
            Option(id="approve", label="Approve", meaning=Meaning.APPROVE),
            Option(id="deny", label="Deny", meaning=Meaning.REJECT),
        ),
        subject=ApprovalSubject(
            id="req_generated",
            digest="sha256:" + "0" * 64,
            schema_="handup.request",
            revision=0,
            preview=items,
        ),
        created_at=NOW,
    )


@pytest.mark.parametrize("surface", sorted(SURFACES))
@given(e=_elicitations())
@settings(max_examples=40, deadline=None)
def test_an_approve_offered_implies_everything_in_the_digest_was_rendered(
    surface: str, e: Elicitation
) -> None:
    check_surface(surface, view_of(e))

"""Issue 12 on Slack: every preview type, the deploy request whole with its Approve, the long one
with Review… and no Approve, Markdown as mrkdwn, no ping or hidden link, and the review pages.

"Shown" is checked against the text a person reads: every text object of the blocks with the
mrkdwn entities (``&amp;``, ``&lt;``, ``&gt;``) decoded and the zero-width joiners that break
backtick runs removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.slack.markup import mrkdwn
from adapters.slack.markup.blocks import text_length
from adapters.slack.render import (
    MAX_TOTAL_TEXT,
    OPTION_ACTION,
    REVIEW_ACTION,
    REVIEW_HINT,
    render,
    shown,
)
from adapters.slack.review.pages import (
    PAGE_BLOCKS,
    PAGE_TEXT,
    full_text,
    review_blocks,
    review_fits,
)
from adapters.slack.wording import result_line
from bot.domain.disclosure import decisive
from bot.domain.model import Answer, ApprovalSubject, Elicitation, PreviewItem, Status
from bot.domain.ports import PromptView
from tests.showcase import (
    DEPLOY_DECISIVE,
    NOW,
    deploy_elicitation,
    elicitation_of,
    handup_case,
    long_diff,
    long_elicitation,
)
from tests.slack_fake import block_kit_problems, block_text_length, view_problems

LINK = "http://127.0.0.1:8787/#handup:req"
OUTPUT = Path(__file__).resolve().parents[3] / "test-output"
FAST = settings(max_examples=60, deadline=None)


def view_of(
    e: Elicitation, status: Status = Status.PENDING, answer: Answer | None = None
) -> PromptView:
    return PromptView(elicitation=e, status=status, answer=answer, version=1, link=LINK, now=NOW)


def texts(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") in ("plain_text", "mrkdwn") and isinstance(node.get("text"), str):
            yield node["text"]
        for value in node.values():
            yield from texts(value)
    elif isinstance(node, list):
        for value in node:
            yield from texts(value)


def seen(blocks: list[dict[str, Any]]) -> str:
    """What a person reads (entities decoded, joiners gone)."""
    raw = "\n".join(texts(blocks)).replace(mrkdwn.ZWJ, "")
    return raw.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mrkdwn_texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [t for b in blocks for t in texts(b) if t]


def option_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [
        json.loads(el["value"])["o"]
        for b in blocks
        if b["type"] == "actions"
        for el in b["elements"]
        if el["type"] == "button" and el["action_id"].startswith(OPTION_ACTION)
    ]


def review_buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        el
        for b in blocks
        if b["type"] == "actions"
        for el in b["elements"]
        if el.get("action_id") == REVIEW_ACTION
    ]


def assert_valid(text: str, blocks: list[dict[str, Any]]) -> None:
    assert block_kit_problems(blocks, text) == []
    assert text_length(blocks) == block_text_length(blocks) <= MAX_TOTAL_TEXT


def request(*previews: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "kind": "review",
        "title": "Check this",
        "summary": "Please look.",
        **fields,
        "previews": list(previews),
    }


# --------------------------------------------------------------------------- every preview type

DIFF = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old = 1\n+new = 2\n"
PREVIEWS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "text": ({"type": "text", "title": "Why", "inline": "Tom & Jerry <3"}, ("Tom & Jerry <3",)),
    "markdown": (
        {"type": "markdown", "title": "Notes", "inline": "**Renews** on the _1st_"},
        ("*Renews* on the _1st_",),
    ),
    "code": (
        {"type": "code", "title": "Fix", "lang": "sql", "inline": "SELECT 1 < 2;\n  -- done"},
        ("SELECT 1 < 2;\n  -- done", "sql"),
    ),
    "diff": ({"type": "diff", "title": "x.py", "inline": DIFF}, ("-old = 1\n+new = 2",)),
    "files": (
        {
            "type": "files",
            "files": [{"path": "src/a.py", "blob": "f0", "mime": "text/x-python", "size": 21}],
        },
        ("src/a.py (text/x-python, 21 bytes)",),
    ),
    "command": (
        {"type": "command", "command": {"argv": ["rm", "-rf", "/srv/old builds"], "cwd": "/srv"}},
        ("rm -rf '/srv/old builds'", "Runs in", "/srv"),
    ),
    "json": ({"type": "json", "title": "Payload", "inline": '{"a": [1, 2]}'}, ('{"a": [1, 2]}',)),
    "html": (
        {"type": "html", "inline": "<b>Hi</b><script>x()</script>"},
        ("<b>Hi</b><script>x()</script>",),
    ),
    "image": (
        {"type": "image", "name": "chart.png", "mime": "image/png", "size": 2048, "blob": "b3"},
        ("chart.png", "2,048 bytes", "blob b3"),
    ),
    "video": (
        {"type": "video", "title": "Demo", "inline": "https://files.example.org/demo.mp4"},
        ("Demo", "<https://files.example.org/demo.mp4>"),
    ),
    "audio": (
        {"type": "audio", "title": "Voicemail", "inline": "https://files.example.org/vm.ogg"},
        ("Voicemail", "<https://files.example.org/vm.ogg>"),
    ),
    "file": (
        {"type": "file", "name": "report.csv", "mime": "text/csv", "size": 99, "blob": "a1"},
        ("report.csv", "text/csv", "99 bytes"),
    ),
    "pdf": (
        {"type": "pdf", "title": "Quote", "inline": "https://f.example.org/q.pdf", "size": 5},
        ("Quote", "5 bytes", "<https://f.example.org/q.pdf>"),
    ),
    "email": (
        {
            "type": "email",
            "title": "Renewal",
            "email": {
                "to": ["buyer@acme.example"],
                "cc": ["sales@example.org"],
                "subject": "Your renewal",
                "body": "Hello,\nyour plan **renews** on the 1st.",
            },
        },
        (
            "*To*\nbuyer@acme.example",
            "*Cc*\nsales@example.org",
            "*Subject*\nYour renewal",
            "your plan *renews* on the 1st.",
        ),
    ),
}


@pytest.mark.parametrize("kind", sorted(PREVIEWS))
def test_every_preview_type_shows_its_decisive_strings_with_approve(kind: str) -> None:
    preview, expected = PREVIEWS[kind]
    e = elicitation_of(request(preview))
    v = view_of(e)

    text, blocks = render(v)

    shown_text = seen(blocks)
    for part in expected:
        assert part in shown_text, (part, shown_text)
    assert shown(v).whole
    assert "approve" in option_ids(blocks)
    assert review_buttons(blocks) == []
    assert_valid(text, blocks)


@pytest.mark.parametrize("kind", ["code", "diff", "command", "json", "files"])
def test_preformatted_previews_are_code_blocks_with_the_link_outside(kind: str) -> None:
    preview, _ = PREVIEWS[kind]
    item = elicitation_of(request(preview)).subject.preview[0]  # type: ignore[union-attr]
    e = elicitation_of(request()).model_copy(
        update={"subject": _subject(item.model_copy(update={"url": "https://ci.example/1"}))}
    )

    _, blocks = render(view_of(e))

    [section] = [t for t in mrkdwn_texts(blocks) if "```" in t]
    assert section.count("```") == 2
    fence_end = section.rindex("```")
    assert section.index("<https://ci.example/1>") > fence_end


def _subject(*items: PreviewItem) -> ApprovalSubject:
    return ApprovalSubject(
        id="sub_1", digest="sha256:" + "a" * 64, schema_="t", revision=2, preview=items
    )


def test_a_diff_with_backticks_cannot_close_its_code_block() -> None:
    diff = "+```\n+</code> <!channel>\n-`` x ``\n+```python\n"
    e = elicitation_of(request({"type": "diff", "title": "README.md", "inline": diff}))

    _, blocks = render(view_of(e))

    [section] = [t for t in mrkdwn_texts(blocks) if t.startswith("*README.md*")]
    assert section.count("```") == 2, section
    assert section.endswith("\n```")
    assert "&lt;!channel&gt;" in section
    assert seen(blocks).count(diff.rstrip("\n")) == 1


def test_diff_lines_keep_their_plus_and_minus_and_are_counted() -> None:
    e = elicitation_of(request({"type": "diff", "title": "x.py", "inline": DIFF}))

    _, blocks = render(view_of(e))

    [section] = [t for t in mrkdwn_texts(blocks) if t.startswith("*x.py*")]
    assert section.startswith("*x.py* · diff: 1 added, 1 removed\n```\n--- a/x.py\n")
    assert "\n-old = 1\n+new = 2\n```" in section


def test_an_email_draft_shows_its_recipients_and_subject_as_fields() -> None:
    e = elicitation_of(request(PREVIEWS["email"][0]))

    _, blocks = render(view_of(e))

    [fields] = [b for b in blocks if b["type"] == "section" and "fields" in b][:1]
    assert [f["text"] for f in fields["fields"]] == [
        "*To*\nbuyer@acme.example",
        "*Cc*\nsales@example.org",
        "*Subject*\nYour renewal",
    ]


# --------------------------------------------------------------------------- the deploy request


def test_the_deploy_request_shows_everything_with_its_approve_button() -> None:
    e = deploy_elicitation()
    v = view_of(e)

    text, blocks = render(v)

    shown_text = seen(blocks)
    for part in DEPLOY_DECISIVE:
        assert part in shown_text, part
    assert shown(v).whole
    assert option_ids(blocks) == ["approve", "deny"]
    assert review_buttons(blocks) == []
    # The metadata: one compact fields section after the previews, then one context line.
    fields = [i for i, b in enumerate(blocks) if "fields" in b]
    assert len(fields) == 1
    labels = [f["text"].split("\n")[0] for f in blocks[fields[0]]["fields"]]
    assert labels == [
        "*Runs in*",
        "*Environment*",
        "*Risk*",
        "*Tool*",
        "*Agent*",
        "*Session*",
        "*Host*",
        "*Repository*",
        "*Branch*",
        "*Working directory*",
    ]
    command = next(i for i, b in enumerate(blocks) if "./deploy.sh" in json.dumps(b))
    assert fields[0] == command + 1
    context = blocks[fields[0] + 1]
    assert context["type"] == "context"
    assert context["elements"][1]["text"].startswith("Subject `req_deploy_prod_eu` · revision 0")
    assert text == (
        "Deploy 2.4.1 to prod-eu: Ships the checkout fix to production (EU). "
        "Runs the data fix first."
    )
    assert not [t for t in mrkdwn_texts(blocks) if t.startswith("*Risk*:")]
    assert blocks[1]["text"]["text"] == (
        "Ships the checkout fix to *production* (EU). Runs the data fix first."
    )
    assert_valid(text, blocks)

    message = {"text": text, "blocks": blocks}
    print(json.dumps(message, indent=2, ensure_ascii=False))  # what a person sees
    OUTPUT.mkdir(exist_ok=True)
    out = OUTPUT / "slack-deploy-message.json"
    out.write_text(json.dumps(message, indent=2, ensure_ascii=False) + "\n", "utf-8")


def test_the_long_request_offers_review_and_deny_but_no_approve() -> None:
    e = long_elicitation()
    v = view_of(e)

    text, blocks = render(v)

    assert shown(v).whole is False
    assert shown(v).review == REVIEW_HINT
    assert option_ids(blocks) == ["deny"]
    [review] = review_buttons(blocks)
    assert review["text"]["text"] == "Review…"
    assert json.loads(review["value"]) == {"e": e.key, "r": 0}
    lines = mrkdwn_texts(blocks)
    assert any(
        "does not show everything you would approve" in t and "*Review…*" in t for t in lines
    )
    assert "./deploy.sh --env prod-eu" in seen(blocks)
    assert_valid(text, blocks)
    OUTPUT.mkdir(exist_ok=True)
    out = OUTPUT / "slack-long-message.json"
    out.write_text(json.dumps({"text": text, "blocks": blocks}, indent=2) + "\n", "utf-8")


def test_the_review_pages_hold_every_decisive_string_whole() -> None:
    e = long_elicitation()
    v = view_of(e)

    pages = review_blocks(v)

    assert 1 < len(pages) <= 10
    assert review_fits(v)
    everything = seen([b for page in pages for b in page])
    lines = set(everything.split("\n"))
    for line in long_diff().splitlines():
        assert line in lines, line
    for part in DEPLOY_DECISIVE:
        assert part in everything
    for piece in decisive(e):
        if piece.where.startswith("preview"):
            for t in piece.texts:
                assert all(line in lines or line in everything for line in t.splitlines())
    for page in pages:
        assert len(page) <= PAGE_BLOCKS
        assert text_length(page) <= PAGE_TEXT
        modal = {"type": "modal", "title": {"type": "plain_text", "text": "Review"}}
        assert view_problems({**modal, "blocks": page}) == []


def test_beyond_ten_pages_the_review_does_not_fit() -> None:
    huge = elicitation_of(request({"type": "diff", "title": "big", "inline": long_diff(200_000)}))

    assert not review_fits(view_of(huge))
    assert review_fits(view_of(deploy_elicitation()))
    assert long_diff(200_000) in full_text(view_of(huge))


# --------------------------------------------------------------------------- Markdown, escaping


def test_markdown_in_the_question_becomes_mrkdwn() -> None:
    e = elicitation_of(
        request(summary="Ship **v2** _now_, see `notes`.\n\n# Plan\n\n- one\n- two\n\n> careful")
    )

    _, blocks = render(view_of(e))

    assert blocks[1]["text"]["text"] == (
        "Ship *v2* _now_, see `notes`.\n\n*Plan*\n\n•  one\n•  two\n\n> careful"
    )


HOSTILE = (
    "Hi <!channel> and <!here> and @here, <@U123> <#C0GENERAL> "
    "[https://good.example](https://evil.example) <http://evil.example|bank> "
    "![logo](https://evil.example/x.png) [click](javascript:alert(1))"
)
_MARKUP = re.compile(r"<([^<>]*)>")


@pytest.mark.parametrize("kind", ["question", "text", "markdown", "code", "field", "link"])
def test_agent_text_never_pings_or_hides_a_link(kind: str) -> None:
    if kind == "question":
        e = elicitation_of(request(summary=HOSTILE))
    else:
        item = PreviewItem(
            type=kind,
            label=HOSTILE if kind != "link" else "https://good.example",
            text=HOSTILE,
            value=HOSTILE,
            url="https://evil.example/a" if kind == "link" else None,
        )
        e = elicitation_of(request()).model_copy(update={"subject": _subject(item)})

    text, blocks = render(view_of(e))

    for t in [text, *mrkdwn_texts(blocks)]:
        for markup in _MARKUP.findall(t):
            # The only markup left is a link shown as its own URL: no label, no ping.
            assert re.fullmatch(r"https?://[^\s|]+", markup), (markup, t)
    everything = "\n".join(mrkdwn_texts(blocks))
    for forbidden in ("<!channel>", "<!here>", "<@U123>", "<#C0GENERAL>", "|bank>"):
        assert forbidden not in everything
    if kind in ("question", "markdown", "text"):
        assert "https://good.example (<https://evil.example>)" in everything
        assert "🖼 logo (<https://evil.example/x.png>)" in everything
    assert '"verbatim": false' not in json.dumps(blocks)
    assert json.dumps(blocks).count('"type": "mrkdwn"') == json.dumps(blocks).count('"verbatim"')
    assert_valid(text, blocks)


def test_the_markdown_renderer_drops_nothing() -> None:
    assert mrkdwn.to_mrkdwn("[x]: https://unused.example\n\ntext") == (
        "text\n\n[x]: https://unused.example"
    )
    nested = ">" * 30 + " hidden past the nesting limit"
    assert "hidden past the nesting limit" in mrkdwn.to_mrkdwn(nested)
    assert mrkdwn.to_mrkdwn("[mail](mailto:a@b.example) <https://a.example>") == (
        "mail (mailto:a@b.example) <https://a.example>"
    )
    assert mrkdwn.to_mrkdwn("a `` ` `` b") == "a ` b"
    assert mrkdwn.to_mrkdwn("```\nx ``` y\n```") == "```\nx `\u200d`\u200d` y\n```"


# --------------------------------------------------------------------------- options, results


def test_option_descriptions_and_the_recommended_option_are_shown() -> None:
    e = elicitation_of(handup_case("question"))

    _, blocks = render(view_of(e))

    lines = mrkdwn_texts(blocks)
    assert (
        "• *PostgreSQL* ⭐ Recommended — Several replicas share it\n"
        "• *SQLite* — One file, one process"
    ) in lines
    labels = [
        el["text"]["text"]
        for b in blocks
        if b["type"] == "actions"
        for el in b["elements"]
        if el["action_id"].startswith(OPTION_ACTION)
    ]
    assert labels == ["⭐ PostgreSQL", "SQLite"]


def test_a_system_close_shows_its_reason() -> None:
    closed = Answer(
        respondent="system", via="pinework", at=NOW, text="[system:card_archived] <!here> gone"
    )

    line = result_line(view_of(deploy_elicitation(), Status.CANCELLED, closed))

    assert "[system:card_archived]" in line
    assert "<!here>" not in line


@pytest.mark.parametrize(
    ("respondent", "name", "expected"),
    [
        ("slack:U0ALICE", "Alice", "Answered by Alice"),
        ("slack:U0ALICE", None, "Answered by <@U0ALICE>"),
        ("matrix:@bob:example.org", None, "Answered by @bob:example.org"),
    ],
)
def test_the_answer_names_the_person(respondent: str, name: str | None, expected: str) -> None:
    answer = Answer(
        option_ids=("deny",), respondent=respondent, display_name=name, via="slack:C1", at=NOW
    )

    assert expected in result_line(view_of(deploy_elicitation(), Status.ANSWERED, answer))


# --------------------------------------------------------------------------- the rule, generated

KINDS = ("text", "markdown", "code", "diff", "command", "json", "files", "field", "link", "email")
WORDS = st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=12)
TEXTS = st.lists(
    st.tuples(WORDS, st.sampled_from([" ", "\n", " ** ", " _", "`", " <!here> ", " & ", "\n\n"])),
    max_size=100,
).map(lambda pairs: "".join(w + sep for w, sep in pairs))
LONG = st.builds(lambda text, n: f"{text} end\n" * n, TEXTS, st.integers(5, 80))
"""Long text (repeated), so that some messages cannot hold everything."""
ITEMS = st.builds(
    PreviewItem,
    type=st.sampled_from(KINDS),
    label=st.one_of(st.none(), WORDS),
    text=st.one_of(TEXTS, LONG),
    value=st.one_of(st.none(), WORDS),
    url=st.one_of(st.none(), WORDS.map(lambda w: f"https://x.example/{w}")),
)


@FAST
@given(items=st.lists(ITEMS, max_size=40), question=TEXTS)
def test_an_approve_button_means_every_decisive_word_is_in_the_message(
    items: list[PreviewItem], question: str
) -> None:
    e = elicitation_of(request()).model_copy(
        update={"question": question, "subject": _subject(*items)}
    )
    v = view_of(e)

    text, blocks = render(v)

    assert_valid(text, blocks)
    approve = "approve" in option_ids(blocks)
    assert approve == shown(v).whole
    assert approve != bool(review_buttons(blocks))
    if approve:
        words = re.findall(r"[a-j0-9]+", seen(blocks))
        for piece in decisive(e):
            for t in piece.texts:
                for word in re.findall(r"[a-j0-9]+", t):
                    assert word in words, (piece.where, word)
    reviewed = seen([b for page in review_blocks(v) for b in page])
    for piece in decisive(e):
        for t in piece.texts:
            for word in re.findall(r"[a-j0-9]+", t):
                assert word in reviewed

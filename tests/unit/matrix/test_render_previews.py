"""What you see is what you approve, on Matrix (issue 12): every preview type rendered, Markdown
through markdown-it and nh3, the deploy request whole with Approve, and the long request cut
with no Approve until its thread holds everything (adapters/matrix/render.py, previews.py,
markdown.py, thread.py).

The check that matters is :func:`tests.showcase.missing_words`: every word of the decisive
content (the question and every preview item's label, text, value and address) appears in what
a person reads (the plain ``body`` and the HTML's visible text, both), or no approving option is
offered there. The deploy request's HTML goes to ``test-output/matrix-deploy-message.html``.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.matrix.intake.reactions import KEYCAPS, reaction_keys
from adapters.matrix.markup.html import WORD_JOINER, content_bytes
from adapters.matrix.markup.markdown import markdown_html, sanitise
from adapters.matrix.markup.thread import PART_BUDGET, PART_MARKER, part_contents, part_txn
from adapters.matrix.render import (
    CONTENT_BUDGET,
    IN_THREAD,
    MAX_EVENT_BYTES,
    edit_content,
    layout,
    message_content,
    needs_thread,
    shown,
)
from bot.domain.model import (
    Answer,
    Elicitation,
    Meaning,
    Option,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.rules import offered_options
from tests.showcase import (
    DEPLOY_DECISIVE,
    NOW,
    PREVIEWS,
    corpus,
    deploy_elicitation,
    elicitation_of,
    long_diff,
    long_elicitation,
    missing_words,
)
from tests.unit.domain.builders import elicitation, sp_approval
from tests.unit.matrix.test_render import Tags, assert_safe_html

REPO = Path(__file__).resolve().parents[3]
OUTPUT = REPO / "test-output"
LINK = "http://127.0.0.1:8787/#handup:req"


def view(
    e: Elicitation, status: Status = Status.PENDING, answer: Answer | None = None
) -> PromptView:
    return PromptView(elicitation=e, status=status, answer=answer, version=1, link=LINK, now=NOW)


def missing_in_html(text: str, e: Elicitation) -> list[str]:
    """:func:`missing_words` of rendered HTML text: ``_word_`` (Markdown emphasis, one ``\\w+``
    match in the source) is there when the rendered text has ``word``."""
    words = set(re.findall(r"\w+", html.unescape(text).casefold()))
    return [w for w in missing_words(text, e) if w.strip("_") not in words]


def seen(content: dict[str, Any]) -> tuple[str, str]:
    """What a person reads: the plain body, and the HTML's visible text."""
    return content["body"], Tags(content["formatted_body"]).text


def preview(kind: str) -> Elicitation:
    request = {
        "id": f"req_preview_{kind}",
        "title": f"A {kind} preview",
        "previews": [PREVIEWS[kind]],
    }
    return elicitation_of(request)


def approving_offered(v: PromptView, disclosure: Any) -> bool:
    return any(
        o.offered and o.option.approving
        for o in offered_options(v.elicitation, v.now, shown=disclosure)
    )


# --------------------------------------------------------------------------- each preview type


@pytest.mark.parametrize("kind", sorted(PREVIEWS))
def test_each_handup_preview_type_shows_whole_and_offers_approve(kind: str) -> None:
    v = view(preview(kind))
    content = message_content(v)
    body, text = seen(content)

    assert shown(v).whole
    assert missing_words(body, v.elicitation) == []
    assert missing_in_html(text, v.elicitation) == []
    assert_safe_html(content["formatted_body"])
    assert KEYCAPS[0] in reaction_keys(v, shown=shown(v)), "Approve is seeded"
    assert content_bytes(content) <= CONTENT_BUDGET


EXPECTED_HTML = {
    "text": ["<p><b>Plan:</b> Drain node 3, then node 4.</p>"],
    "markdown": [
        "<strong>Careful</strong>",
        "<em>drops</em>",
        "<code>orders_tmp</code>",
        "<li>step one</li>",
    ],
    "code": ['<pre><code class="language-sql">DELETE FROM sessions WHERE last_seen &lt; now()'],
    "diff": [
        '<pre><code class="language-diff">--- a/config.toml\n+++ b/config.toml\n',
        '<font data-mx-color="#cf222e">-replicas = 2</font>',
        '<font data-mx-color="#1a7f37">+replicas = 5</font>',
        "\n```\n</code></pre>",
    ],
    "files": [
        "<li>src/app.py (text/x-python, 2,100 bytes)</li>",
        "<li>migrations/0042_index.py (text/x-python, 640 bytes)</li>",
    ],
    "command": [
        '<pre><code class="language-shell">systemctl restart shop-api</code></pre>',
        "<b>Runs in:</b> /srv/shop · <b>Environment:</b> SHOP_ENV",
    ],
    "json": ['<pre><code class="language-json">{"refund": 1299, "currency": "EUR"}</code></pre>'],
    "html": ["&lt;b&gt;Sale&lt;/b&gt; &lt;script&gt;x()&lt;/script&gt;"],
    "image": [
        '<a href="https://files.example.org/chart.png">https://files.example.org/chart.png</a>',
        "image, chart.png, image/png, 2,048 bytes",
    ],
    "video": ["video, demo.mp4, video/mp4, 9,000,000 bytes"],
    "audio": ["audio, call.ogg, audio/ogg, 120,000 bytes"],
    "file": ['<a href="https://files.example.org/report.csv">'],
    "pdf": ["pdf, contract.pdf, application/pdf, 51,200 bytes"],
    "email": [
        "<b>From:</b> billing@acme.example<br><b>To:</b> ceo@client.example<br>"
        "<b>Cc:</b> legal@acme.example<br><b>Subject:</b> Your renewal: new price from January",
        "<strong>1 January</strong>",
    ],
}


@pytest.mark.parametrize("kind", sorted(PREVIEWS))
def test_each_preview_type_reads_as_what_it_is(kind: str) -> None:
    markup = message_content(view(preview(kind)))["formatted_body"]
    for expected in EXPECTED_HTML[kind]:
        assert expected in markup, (kind, expected, markup)
    assert "<script" not in markup


def test_a_fence_inside_a_diff_stays_inside_the_code_block() -> None:
    body = message_content(view(preview("diff")))["body"]
    diff = "--- a/config.toml\n+++ b/config.toml\n-replicas = 2\n+replicas = 5\n```"
    assert f"config.toml:\n{diff}" in body


@pytest.mark.parametrize(("name", "e"), sorted(corpus().items()))
def test_every_fixture_offers_approve_only_where_everything_is_shown(
    name: str, e: Elicitation
) -> None:
    """The property on every source fixture: an approving option offered on the copy implies
    every decisive word is in what the copy shows."""
    for full_in_thread in (False, True):
        v = view(e)
        fitted = layout(v, full_in_thread=full_in_thread)
        content = message_content(v, full_in_thread=full_in_thread)
        assert content_bytes(content) <= CONTENT_BUDGET, name
        assert_safe_html(content["formatted_body"])
        if approving_offered(v, fitted.disclosure) and not fitted.cut:
            body, text = seen(content)
            assert missing_words(body, e) == [], name
            assert missing_in_html(text, e) == [], name


# --------------------------------------------------------------------------- the deploy request


def test_the_deploy_request_shows_everything_in_order_and_offers_approve() -> None:
    v = view(deploy_elicitation())
    content = message_content(v)
    body, text = seen(content)
    markup = content["formatted_body"]
    print(markup)  # what a person sees, for the run log (-s)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "matrix-deploy-message.html").write_text(
        "<!doctype html><meta charset=utf-8><title>Matrix: the deploy request</title>\n"
        f"{markup}\n<hr><pre>{html.escape(json.dumps(content, indent=1, ensure_ascii=False))}"
        "</pre>\n",
        "utf-8",
    )

    assert shown(v).whole
    for decisive in DEPLOY_DECISIVE:
        assert decisive in body
        assert decisive in text
    assert missing_words(body, v.elicitation) == []
    assert "1️⃣ Approve\n2️⃣ Deny" in body
    assert reaction_keys(v, shown=shown(v)) == KEYCAPS[:2]
    assert "<strong>production</strong>" in markup, "the summary's Markdown is rendered"
    order = [
        "🔐 Deploy 2.4.1 to prod-eu",
        "Ships the checkout fix",
        "• Why:",
        "Data fix:",
        "checkout/charge.py:",
        "Deploy:\n./deploy.sh --env prod-eu",
        "Runs in: /srv/app · Environment: DEPLOY_TOKEN · Risk: high · Tool: Bash · Agent: ",
        "Subject req_deploy_prod_eu",
        "1️⃣ Approve",
        "Web inbox:",
    ]
    positions = [body.index(part) for part in order]
    assert positions == sorted(positions), "title, question, previews, metadata, subject, options"
    metadata = [line for line in body.split("\n") if "Risk: high" in line]
    assert len(metadata) == 1, "the fields are one compact line"
    assert "Branch: release/2.4 · Working directory: /srv/app · Asked by: " in metadata[0]


# --------------------------------------------------------------------------- the long request


def test_the_long_request_offers_no_approve_until_its_thread_holds_everything() -> None:
    v = view(long_elicitation())
    content = message_content(v)
    body = content["body"]

    assert needs_thread(v)
    assert not shown(v).whole
    assert content_bytes(content) <= CONTENT_BUDGET
    assert content_bytes(edit_content("$q", v)) < MAX_EVENT_BYTES - 16_384
    assert "1️⃣ Approve (not offered here)" in body
    assert "⚠️ This message does not show everything you would approve." in body
    assert "the whole request goes into this message's thread" in body
    assert reaction_keys(v, shown=shown(v)) == (KEYCAPS[1],), "no approving reaction"
    assert "(cut: the whole text is in the web inbox: " in body

    complete = shown(v, full_in_thread=True)
    assert complete.whole
    assert complete.review == IN_THREAD
    threaded = message_content(v, full_in_thread=True)
    assert f"🧵 {IN_THREAD}" in threaded["body"]
    assert "1️⃣ Approve\n2️⃣ Deny" in threaded["body"]
    assert (
        "(cut: the whole text is in this message's thread and the web inbox" in (threaded["body"])
    )
    assert reaction_keys(v, shown=complete) == KEYCAPS[:2]
    assert content_bytes(edit_content("$q", v, full_in_thread=True)) < MAX_EVENT_BYTES - 16_384


def test_the_thread_holds_the_whole_long_request_in_parts_under_the_limit() -> None:
    e = long_elicitation()
    parts = part_contents(e, "$q")

    assert len(parts) > 1
    for number, part in enumerate(parts, start=1):
        assert content_bytes(part) <= PART_BUDGET
        assert part["msgtype"] == "m.notice"
        assert part["m.mentions"] == {}
        assert part["m.relates_to"] == {
            "rel_type": "m.thread",
            "event_id": "$q",
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": "$q"},
        }
        assert part[PART_MARKER] == {"key": e.key, "part": number, "of": len(parts)}
        assert_safe_html(part["formatted_body"])
    bodies = "\n".join(p["body"] for p in parts)
    texts = "\n".join(Tags(p["formatted_body"]).text for p in parts)
    assert missing_words(bodies, e) == []
    assert missing_in_html(texts, e) == []
    lines = long_diff().splitlines()
    assert all(line in bodies for line in lines), "split on line boundaries, nothing cut"
    positions = [bodies.index(line) for line in lines[3:50]]
    assert positions == sorted(positions), "in order"
    assert "That is all of it." in parts[-1]["body"]
    assert part_contents(e, "$q") == parts, "the same parts again: a retry repeats them"
    txns = [part_txn("$q", p) for p in parts]
    assert len(set(txns)) == len(parts)
    assert part_txn("$other", part_contents(e, "$other")[0]) != txns[0]


def test_a_single_line_longer_than_a_part_is_split_not_cut() -> None:
    line = "x" * 70_000
    e = sp_approval(preview=(PreviewItem(type="code", label="One line", text=line),))
    parts = part_contents(e, "$q")

    assert len(parts) >= 3
    assert all(content_bytes(p) <= PART_BUDGET for p in parts)
    joined = "".join(
        chunk for p in parts for chunk in p["body"].split("\n") if chunk and set(chunk) == {"x"}
    )
    assert joined == line


# --------------------------------------------------------------------------- Markdown


def test_markdown_is_rendered_and_sanitised() -> None:
    markup = markdown_html(
        "**bold** and _em_ @room `@room`\n"
        "<script>alert(1)</script> <img src=x onerror=alert(1)>\n"
        "[click](javascript:alert(1)) [bank](https://evil.example/x) ![chart](https://i.example/c.png)"
        " [mail me](mailto:a@example.org) <https://ok.example/>"
    )
    tags = Tags(markup)

    assert "<strong>bold</strong>" in markup
    assert "<em>em</em>" in markup
    assert {tag for tag, _ in tags.tags} <= {"p", "strong", "em", "code", "br", "a"}
    assert all(set(attrs) <= {"href"} for _, attrs in tags.tags)
    assert [href for href, _ in tags.links] == [
        "https://evil.example/x",
        "https://i.example/c.png",
        "mailto:a@example.org",
        "https://ok.example/",
    ]
    assert "bank (https://evil.example/x)" in tags.text, "a label cannot hide where it points"
    assert "chart (https://i.example/c.png)" in tags.text, "an image is a link, shown"
    assert "ok.example/ (" not in tags.text, "an autolink already shows its address"
    assert "onerror" not in markup.replace("onerror=alert(1)&gt;", "")
    assert "<script>alert(1)</script>" in tags.text, "raw HTML is text"
    assert "@room" not in tags.text.replace(f"@{WORD_JOINER}room", ""), "in text and code"
    assert_safe_html(markup)


def test_the_sanitiser_keeps_only_the_matrix_allowlist() -> None:
    dirty = (
        '<p onclick="x()" style="color:red">a<mx-reply>forged quote</mx-reply>'
        '<font data-mx-color="red">b</font><font data-mx-color="#aabbcc">c</font>'
        '<code class="language-sql evil">d</code><img src="mxc://x/y">'
        '<a href="javascript:alert(1)">e</a><a href="https://ok.example" target="_blank">f</a>'
        "<details><summary>g</summary>h</details><script>i</script><!-- j --></p>"
    )
    assert sanitise(dirty) == (
        '<p>a<font>b</font><font data-mx-color="#aabbcc">c</font><code>d</code>'
        '<a>e</a><a href="https://ok.example">f</a></p>gh<p></p>'
    ), "details and summary are unwrapped: their content is shown, not folded away"


def test_a_markdown_question_is_rendered_in_the_message_and_kept_as_text_in_the_body() -> None:
    e = elicitation(question="Ship **now**? See [the plan](https://plan.example/p) @room")
    content = message_content(view(e))

    assert "<p>Ship <strong>now</strong>? See <a href" in content["formatted_body"]
    assert "the plan (https://plan.example/p)" in Tags(content["formatted_body"]).text
    assert (
        f"Ship **now**? See [the plan](https://plan.example/p) @{WORD_JOINER}room"
        in (content["body"])
    )
    assert content["m.mentions"] == {}


# --------------------------------------------------------------------------- options and results


def test_the_recommended_option_is_marked_and_descriptions_are_shown() -> None:
    options = (
        Option(
            id="approve",
            label="Approve",
            meaning=Meaning.APPROVE,
            recommended=True,
            description="Ships it to prod-eu now",
        ),
        Option(id="deny", label="Deny", meaning=Meaning.REJECT, description="Nothing runs"),
    )
    rendered = message_content(view(elicitation(options=options)))

    assert (
        "1️⃣ Approve (recommended) — Ships it to prod-eu now\n2️⃣ Deny — Nothing runs"
        in (rendered["body"])
    )
    assert (
        "1️⃣ <b>Approve</b> <i>(recommended)</i> — Ships it to prod-eu now"
        in (rendered["formatted_body"])
    )


def test_a_system_cancel_shows_its_reason() -> None:
    answer = Answer(
        respondent="system",
        text="[system:card_archived] <b>The card</b> was archived",
        via="pinework",
        at=NOW,
    )
    content = message_content(view(elicitation(), Status.CANCELLED, answer))

    assert (
        "🚫 Closed by the system — [system:card_archived] <b>The card</b> was archived — "
        "it can no longer be answered." in content["body"]
    )
    assert "[system:card_archived] &lt;b&gt;The card&lt;/b&gt;" in content["formatted_body"]
    plain = message_content(view(elicitation(), Status.CANCELLED))
    assert "🚫 Cancelled — this request was withdrawn" in plain["body"]


def test_an_item_with_both_text_and_value_shows_both() -> None:
    e = sp_approval(
        preview=(
            PreviewItem(type="text", label="Target", text="the prod cluster", value="eu-west-1"),
            PreviewItem(type="field", label="Tier", value="gold", text="billed monthly"),
        )
    )
    v = view(e)
    body, text = seen(message_content(v))
    assert shown(v).whole
    assert missing_words(body, e) == []
    assert missing_in_html(text, e) == []
    parts = part_contents(e, "$q")
    assert missing_words("\n".join(p["body"] for p in parts), e) == []

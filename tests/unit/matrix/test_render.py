"""adapters/matrix/render.py (and markup, reactions, notices): what a prompt looks like, what
agent text cannot do, event sizes.

The HTML is checked with a real parser (stdlib ``html.parser``): only the Matrix allowlist's
tags and attributes, and every link shows its own address (as its text, or right after it).
Rendering per preview type, Markdown and the long case: test_render_previews.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any

import pytest

from adapters.matrix.intake.notices import notice_content, reply_content
from adapters.matrix.intake.reactions import ACK_KEY, KEYCAPS, key_index, reaction_keys
from adapters.matrix.markup.html import WORD_JOINER, content_bytes, matrix_users, safe_url
from adapters.matrix.markup.markdown import ATTRIBUTES, TAGS
from adapters.matrix.render import (
    CONTENT_BUDGET,
    MARKER,
    MAX_EVENT_BYTES,
    edit_content,
    message_content,
    render,
    shown,
)
from adapters.sources.superpipeline.parse import parse_body
from bot.domain.model import (
    Answer,
    AnswerMode,
    Elicitation,
    Meaning,
    Option,
    PreviewItem,
    Status,
)
from bot.domain.ports import PromptView
from bot.domain.wording import shorten_digest
from tests.unit.domain.builders import (
    NOW,
    SUBJECT_EXPIRES,
    elicitation,
    sp_approval,
    sp_bare,
)
from tests.unit.sources.superpipeline_fixtures import VALID

LINK = "http://127.0.0.1:8787/#superpipeline:eli_1a2b3c4d5e6f7081"
ALLOWED_TAGS = TAGS


def view(
    e: Elicitation,
    status: Status = Status.PENDING,
    result: Answer | None = None,
    *,
    now: Any = NOW,
    version: int = 1,
) -> PromptView:
    return PromptView(
        elicitation=e, status=status, answer=result, version=version, link=LINK, now=now
    )


def fixture(case: str) -> Elicitation:
    return parse_body(copy.deepcopy(VALID[case]), workspace="acme")


BLOCKS = frozenset({"p", "br", "li", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "div", "tr", "td"})


class Tags(HTMLParser):
    """Every tag with its attributes, each link's text, and the visible text (a line break
    where a block starts or ends)."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.links: list[tuple[str | None, str]] = []
        self.after: list[str] = []
        """The text right after each link."""
        self.text = ""
        self._href: str | None = None
        self._link_text = ""
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in BLOCKS:
            self.text += "\n"
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._link_text = ""

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in BLOCKS:
            self.text += "\n"

    def handle_endtag(self, tag: str) -> None:
        if tag in BLOCKS:
            self.text += "\n"
        if tag == "a":
            self.links.append((self._href, self._link_text))
            self.after.append("")
            self._href = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._href is not None:
            self._link_text += data
        elif self.after and not self.after[-1]:
            self.after[-1] = data


def assert_safe_html(markup: str) -> Tags:
    tags = Tags(markup)
    for tag, attrs in tags.tags:
        assert tag in ALLOWED_TAGS, tag
        assert set(attrs) <= ATTRIBUTES.get(tag, set()), (tag, attrs)
        if tag == "code" and "class" in attrs:
            assert str(attrs["class"]).startswith("language-"), attrs
    for (href, text), after in zip(tags.links, tags.after, strict=True):
        assert href is not None
        assert safe_url(href) == href or href.startswith("mailto:"), href
        if href == f"https://matrix.to/#/{text}":
            continue  # a mention pill: our own link to the person it names
        if after.startswith(f" ({href})"):
            continue  # a Markdown link whose text differs: its address follows it
        assert text.rstrip("…") == href[: len(text.rstrip("…"))], (href, text)
    return tags


# --------------------------------------------------------------------------- every fixture


@pytest.mark.parametrize("case", sorted(VALID))
def test_every_superpipeline_fixture_renders_safely_within_the_limit(case: str) -> None:
    e = fixture(case)
    content = message_content(view(e))

    assert content["msgtype"] == "m.text"
    assert content["format"] == "org.matrix.custom.html"
    assert content["m.mentions"] == {}
    assert content[MARKER] == {"key": e.key, "version": 1}
    assert content_bytes(content) <= CONTENT_BUDGET
    tags = assert_safe_html(content["formatted_body"])
    body = content["body"]
    assert (e.title or "") in body
    assert e.question.strip() in body
    assert e.question.strip() in tags.text
    assert f"Web inbox: {LINK}" in body
    assert (LINK, LINK) in tags.links
    for number, option in enumerate(e.options, start=1):
        assert f"{KEYCAPS[number - 1]} {option.label}" in body


def test_options_are_numbered_and_admin_only_is_marked() -> None:
    body = render(view(fixture("options"))).body

    assert "1️⃣ Allow once\n2️⃣ Always allow (workspace admins only)\n3️⃣ Deny" in body
    assert "react with the option's number" in body
    v = view(fixture("options"))
    assert reaction_keys(v, shown=shown(v)) == KEYCAPS[:3]


def test_approval_shows_subject_short_digest_and_preview() -> None:
    e = fixture("approval-request")
    rendered = render(view(e))

    assert rendered.body.startswith("🔐 Developer Experience")
    assert "Subject sub_7d6c5b4a39281706 · revision 1 · digest sha256:4f2a0c1e…" in rendered.body
    assert "expires 2026-11-11 09:30 UTC" in rendered.body
    assert "• Post: We shipped the decision envelope." in rendered.body
    assert "\nAccount: @example\n" in rendered.body, "a field is a compact line"
    assert "• Draft: https://example.com/draft" in rendered.body
    assert e.subject is not None
    assert e.subject.digest not in rendered.body
    tags = assert_safe_html(rendered.html)
    assert ("https://example.com/draft", "https://example.com/draft") in tags.links
    assert shorten_digest("sha256:abc") == "sha256:abc"


def test_free_text_and_bare_questions_say_how_to_answer_and_seed_what_fits() -> None:
    free = view(fixture("free-text"))
    assert "reply in this message's thread with your answer (at most 2,000 characters)" in (
        render(free).body
    )
    assert reaction_keys(free, shown=shown(free)) == ()

    ack = view(sp_bare())
    assert f"To acknowledge, react with {ACK_KEY}" in render(ack).body
    assert reaction_keys(ack, shown=shown(ack)) == (ACK_KEY,)


# --------------------------------------------------------------------------- hostile text


HOSTILE = (
    'Hello @room and @ROOM! <script>alert(1)</script> <a href="https://evil.example">bank</a> '
    "[log in](https://evil.example) <img src=x onerror=alert(1)> &amp; <mx-reply>x</mx-reply>"
)


def test_agent_text_cannot_ping_the_room_inject_html_or_forge_links() -> None:
    e = elicitation(
        title="@room <b>urgent</b>",
        question=HOSTILE,
        options=(
            Option(id="a", label='<a href="https://evil.example">Approve</a> @room'),
            Option(id="b", label="Deny", description="<i>x</i> @room"),
        ),
        subject=None,
    )
    content = message_content(view(e))
    body, markup = content["body"], content["formatted_body"]

    assert content["m.mentions"] == {}, "an empty m.mentions turns off the legacy pings"
    assert "@room" not in body.replace(f"@{WORD_JOINER}room", "")
    assert "@ROOM" not in body.replace(f"@{WORD_JOINER}ROOM", "")
    assert f"@{WORD_JOINER}room" in body
    tags = assert_safe_html(markup)
    assert tags.links == [("https://evil.example", "log in"), (LINK, LINK)]
    assert "log in (https://evil.example)" in tags.text, "a Markdown link shows where it goes"
    assert "<script>" in tags.text, "shown as text, not run"
    assert '<a href="https://evil.example">bank</a>' in tags.text
    assert "&lt;script&gt;" in markup
    assert "<mx-reply>" not in markup


def test_preview_links_show_where_they_go_and_only_web_links_are_links() -> None:
    e = sp_approval(
        preview=(
            PreviewItem(type="link", label="https://bank.example", url="https://evil.example/x"),
            PreviewItem(type="link", label="Click", url="javascript:alert(1)"),
            PreviewItem(type="link", label="Data", url="data:text/html,<b>x</b>"),
            PreviewItem(type="code", label="Command", text="rm -rf / <b>"),
        )
    )
    rendered = render(view(e))

    tags = assert_safe_html(rendered.html)
    hrefs = [href for href, _ in tags.links]
    assert hrefs == ["https://evil.example/x", LINK]
    assert "javascript:alert(1) (not a web link)" in rendered.body
    assert "<pre><code>rm -rf / &lt;b&gt;</code></pre>" in rendered.html
    assert "\nCommand:\nrm -rf / <b>\n" in rendered.body
    assert safe_url("https:///nohost") is None
    assert safe_url(" https://ok.example/a ") == "https://ok.example/a"


# --------------------------------------------------------------------------- withheld options


def test_incomplete_preview_withholds_approving_options_and_says_why() -> None:
    v = view(sp_approval(preview_complete=False))
    rendered = render(v)

    assert "⚠️ The preview is incomplete, so approving is not offered." in rendered.body
    assert "1️⃣ Allow once (not offered now)" in rendered.body
    assert "2️⃣ Always allow (workspace admins only) (not offered now)" in rendered.body
    assert "3️⃣ Deny\n" in rendered.body
    assert reaction_keys(v, shown=shown(v)) == (KEYCAPS[2],), "only what is offered is seeded"


def test_an_expired_subject_withholds_approving_options() -> None:
    v = view(sp_approval(), now=SUBJECT_EXPIRES + timedelta(seconds=1))

    assert "The approval subject expired at 2026-11-11 09:30 UTC." in render(v).body
    assert reaction_keys(v, shown=shown(v)) == (KEYCAPS[2],)


# --------------------------------------------------------------------------- results


def test_answered_shows_who_by_name_what_when_and_via_and_drops_the_options() -> None:
    e = fixture("options")
    result = Answer(
        option_ids=("allow_once",),
        respondent="matrix:@alice:localhost",
        display_name="Alice <b>@room</b>",
        via="matrix:!room:localhost",
        at=NOW,
    )
    v = view(e, Status.ANSWERED, result, version=2)
    rendered = render(v)

    assert (
        f"✅ Answered by Alice <b>@{WORD_JOINER}room</b> — Allow once — 2026-11-10 09:31 UTC "
        "via Matrix" in rendered.body
    )
    assert "Answered by Alice &lt;b&gt;" in rendered.html, "a name is text, never markup"
    assert "2️⃣" not in rendered.body
    assert "react with" not in rendered.body
    assert reaction_keys(v, shown=shown(v)) == ()
    assert_safe_html(rendered.html)
    unnamed = result.model_copy(update={"display_name": "@alice:localhost"})
    assert "✅ Answered by @alice:localhost — Allow once" in (
        render(view(e, Status.ANSWERED, unnamed)).body
    ), "the ID where no name is known"


def test_a_slack_answer_is_shown_by_name_via_slack() -> None:
    result = Answer(
        option_ids=("deny",),
        text="not today",
        respondent="slack:U0ALICE",
        display_name="Alice",
        via="slack:C0APPROVALS",
        at=NOW,
    )
    body = render(view(fixture("options"), Status.ANSWERED, result)).body

    assert "✅ Answered by Alice — Deny: “not today” — 2026-11-10 09:31 UTC via Slack" in body


def test_expired_and_cancelled_say_so() -> None:
    e = elicitation(deadlines={"expires_at": NOW})
    assert (
        "⌛ Expired — nobody answered by 2026-11-10 09:31 UTC"
        in render(view(e, Status.EXPIRED)).body
    )
    assert "🚫 Cancelled" in render(view(e, Status.CANCELLED)).body


# --------------------------------------------------------------------------- size


def huge() -> Elicitation:
    question = ("Ünïcödé 😀 text with emoji and <tags> & more. " * 1200)[:50_000]
    options = tuple(
        Option(id=f"opt_{n}", label=f"{n} " + "😀é" * 150, meaning=Meaning.CHOOSE)
        for n in range(40)
    )
    return elicitation(question=question, options=options, answer_mode=AnswerMode.SINGLE_CHOICE)


def test_an_oversize_question_is_cut_with_a_link_and_stays_under_64_kib() -> None:
    e = huge()
    v = view(e)
    content = message_content(v)

    assert content_bytes(content) <= CONTENT_BUDGET
    assert "(cut: the whole text is in the web inbox: " + LINK + ")" in content["body"]
    assert "11. " in content["body"], "options past the ten keycaps are numbered"
    assert "Options after 10 are chosen by a thread reply." in content["body"]
    assert_safe_html(content["formatted_body"])
    assert len(reaction_keys(v, shown=shown(v))) == 10

    edit = edit_content("$event:localhost", v)
    assert content_bytes(edit) < MAX_EVENT_BYTES - 4096
    assert edit["m.new_content"]["body"].startswith("❓ ")
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$event:localhost"}


def test_an_edit_carries_the_new_content_and_a_short_fallback() -> None:
    e = fixture("options")
    result = Answer(
        option_ids=("deny",), respondent="matrix:@bob:localhost", via="matrix:!r:l", at=NOW
    )
    edit = edit_content("$q", view(e, Status.ANSWERED, result, version=2))

    assert edit["body"].startswith("* ❓ Research this — ✅ Answered by @bob:localhost — Deny")
    assert edit["m.new_content"][MARKER] == {"key": e.key, "version": 2}
    assert edit["m.new_content"]["m.mentions"] == {}
    assert edit["m.mentions"] == {}
    assert "m.relates_to" not in edit["m.new_content"]


# --------------------------------------------------------------------------- notices, keys


def test_a_notice_names_and_mentions_the_person_in_the_thread() -> None:
    content = notice_content(
        "Only a workspace admin can choose “Always allow”. @room",
        users=["@bob:localhost"],
        mention=True,
        thread_root="$q",
        reply_to="$reply",
    )

    assert content["msgtype"] == "m.notice"
    assert content["body"].startswith("@bob:localhost: Only a workspace admin")
    assert f"@{WORD_JOINER}room" in content["body"]
    assert content["m.mentions"] == {"user_ids": ["@bob:localhost"]}
    assert content["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$q",
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": "$reply"},
    }
    tags = assert_safe_html(content["formatted_body"])
    assert tags.links == [("https://matrix.to/#/@bob:localhost", "@bob:localhost")]

    quiet = notice_content("Recorded.", users=["@bob:localhost"], mention=False, thread_root="$q")
    assert quiet["m.mentions"] == {}
    assert quiet["m.relates_to"]["is_falling_back"] is True
    assert quiet["m.relates_to"]["m.in_reply_to"] == {"event_id": "$q"}


def test_a_reminder_names_and_mentions_the_matrix_people_only() -> None:
    users = matrix_users(["", "matrix:@a:l", "slack:U1", "matrix:@b:l", "matrix:@a:l", "web"])
    assert users == ["@a:l", "@b:l"]
    content = notice_content("⏰ Reminder", users=users, mention=True, thread_root="$q")
    assert content["body"] == "@a:l, @b:l: ⏰ Reminder"
    assert content["m.mentions"] == {"user_ids": ["@a:l", "@b:l"]}
    assert content["m.relates_to"]["m.in_reply_to"] == {"event_id": "$q"}
    plain = notice_content("No one", users=[], mention=True, thread_root=None)
    assert (plain["body"], plain["m.mentions"]) == ("No one", {})
    assert "m.relates_to" not in plain


@dataclass(frozen=True)
class Escalated(PromptView):
    """A view carrying an escalation (the outbox sets ``escalation`` on an escalation copy)."""

    escalation: Any = None


@dataclass(frozen=True)
class Escalation:
    mentions: tuple[str, ...]
    originals: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Original:
    destination: str
    ref: dict[str, Any]


def test_an_escalation_copy_mentions_the_admins_and_links_the_original() -> None:
    e = fixture("options")
    escalation = Escalation(
        mentions=("matrix:@alice:localhost", "slack:U0ADMIN"),
        originals=(
            Original("matrix:!room:localhost", {"room_id": "!room:localhost", "event_id": "$q"}),
            Original("slack:C1", {"channel": "C1", "ts": "1.2"}),
        ),
    )
    v = Escalated(e, Status.PENDING, None, 1, LINK, NOW, escalation=escalation)
    content = message_content(v)

    assert content["body"].startswith(
        "❓ Research this\n🚨 Escalated: nobody has answered yet. @alice:localhost\n"
        "Original: https://matrix.to/#/!room:localhost/$q\n"
    )
    assert content["m.mentions"] == {"user_ids": ["@alice:localhost"]}
    tags = assert_safe_html(content["formatted_body"])
    assert ("https://matrix.to/#/!room:localhost/$q", "https://matrix.to/#/!room:localhost/$q") in (
        tags.links
    )
    answered = Escalated(
        e,
        Status.ANSWERED,
        Answer(option_ids=("deny",), respondent="matrix:@b:l", via="matrix:!r:l", at=NOW),
        2,
        LINK,
        NOW,
        escalation=escalation,
    )
    assert message_content(answered)["m.mentions"] == {}, "an edit to the result pings nobody"
    assert message_content(view(e))["m.mentions"] == {}


def test_a_command_reply_is_a_rich_reply_notice() -> None:
    content = reply_content("Subscribed <b>acme</b>", "$cmd")
    assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": "$cmd"}}
    assert content["formatted_body"] == "Subscribed &lt;b&gt;acme&lt;/b&gt;"
    assert content["m.mentions"] == {}


@pytest.mark.parametrize(
    ("key", "index"),
    [("1️⃣", 0), ("1\u20e3", 0), ("🔟", 9), ("3️⃣ ", 2), ("👍", None), ("11", None), ("", None)],
)
def test_keycap_reactions_name_an_option_index(key: str, index: int | None) -> None:
    assert key_index(key) == index


def test_a_pending_prompt_shows_what_happens_next_and_who_is_on_it() -> None:
    from dataclasses import replace

    from bot.domain.deadlines import Claim, ScheduleStep
    from bot.domain.records import DeadlineKind

    steps = (
        ScheduleStep(DeadlineKind.REMIND, NOW + timedelta(hours=1)),
        ScheduleStep(DeadlineKind.EXPIRE, NOW + timedelta(hours=8), outcome="deny"),
    )
    pending = replace(
        view(fixture("options")),
        schedule=steps,
        claim=Claim(by="matrix:@bob:localhost", until=NOW + timedelta(minutes=30)),
    )
    rendered = render(pending)
    assert "reminder" in rendered.body
    assert "expires" in rendered.body
    assert "→ deny" in rendered.body
    assert "@bob:localhost is on it" in rendered.body
    assert "is on it" in rendered.html

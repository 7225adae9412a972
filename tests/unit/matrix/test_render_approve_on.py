"""A Matrix copy of a request whose route's ``approve_on`` leaves Matrix out: no keycap for an
approving option (listed or seeded), the inbox page as a link where ``web`` counts, the reason
said; without ``approve_on`` (or with Matrix named) exactly as before."""

from __future__ import annotations

from dataclasses import replace

from adapters.matrix.intake.reactions import KEYCAPS, reaction_keys
from adapters.matrix.render import message_content, render, shown
from tests.unit.matrix.test_render import LINK, assert_safe_html, fixture, view

ONE, TWO, THREE = KEYCAPS[:3]


def test_web_only_lists_no_approving_keycap_and_links_to_the_inbox() -> None:
    v = replace(view(fixture("approval-request")), approve_on=("web",))
    content = message_content(v)
    print("Matrix HTML:", content["formatted_body"])
    tags = assert_safe_html(content["formatted_body"])
    assert (LINK, LINK) in tags.links
    body = content["body"]
    assert f"🔗 Allow once — Approve in the web inbox: {LINK}" in body
    assert "🔗 Always allow (workspace admins only) (in the web inbox)" in body
    assert f"{THREE} Deny" in body
    assert f"{ONE} " not in body
    assert f"{TWO} " not in body
    assert (
        "⚠️ Approving this request counts only in the web inbox. The other options work here."
        in (body)
    )
    assert reaction_keys(v, shown=shown(v)) == (THREE,)


def test_chat_only_elsewhere_names_the_surface_without_a_link() -> None:
    v = replace(view(fixture("approval-request")), approve_on=("slack",))
    body = render(v).body
    assert "• Allow once (not offered here)" in body
    assert "Approve in the web inbox" not in body
    assert "Approving this request counts only in Slack. The other options work here." in body
    assert reaction_keys(v, shown=shown(v)) == (THREE,)


def test_without_approve_on_or_with_matrix_named_nothing_changes() -> None:
    before = view(fixture("approval-request"))
    for approve_on in (None, ("matrix", "web")):
        v = replace(before, approve_on=approve_on)
        assert message_content(v) == message_content(before)
        assert reaction_keys(v, shown=shown(v)) == (ONE, TWO, THREE)

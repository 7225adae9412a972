"""The intake bounds: one table, every source, refused by field name, never trimmed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.domain import bounds
from bot.domain.bounds import (
    BOUNDS,
    CE_SOURCE_MAX,
    FIELD_NAMES,
    ID_MAX,
    KEY_MAX,
    TEXT_MAX,
    Rule,
    check_cloudevent,
    check_elicitation,
    id_problem,
    lookup_problem,
    text_problem,
)
from bot.domain.errors import FieldProblem
from bot.domain.model import Context, Elicitation, Option, PreviewItem
from tests.unit.domain.builders import (
    elicitation,
    sp_approval,
    sp_bare,
    sp_free_text,
    sp_options,
    subject,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "superpipeline" / "valid.json"
FAST = settings(max_examples=150, deadline=None)

NASTY = ["\x00", "\n", "\r\n", "\t", " ", "\x7f", "\x85", "\xa0", "\u2028", "\ud800", "\x1f", "é"]
"""Characters the rules are about, mixed into arbitrary text (surrogates included)."""
nasty_text = st.lists(
    st.one_of(
        st.sampled_from(NASTY),
        st.characters(exclude_categories=()),
        st.text(max_size=5),
    ),
    max_size=12,
).map("".join)
long_text = st.builds(
    lambda n, c, edge: edge + c * n + edge,
    st.sampled_from([ID_MAX - 1, ID_MAX, ID_MAX + 1, 1_001, 65_537, TEXT_MAX, TEXT_MAX + 1]),
    st.sampled_from(["a", "é", "\x00", " "]),
    st.sampled_from(["", " ", "x"]),
)
values = st.one_of(nasty_text, long_text, st.sampled_from(["", "eli_1", "a b", "evt.x"]))

CONTROL = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} | {"\u2028", "\u2029"}


def is_surrogate(ch: str) -> bool:
    return 0xD800 <= ord(ch) <= 0xDFFF


def fine_id(value: str, max_length: int = ID_MAX) -> bool:
    return (
        len(value) <= max_length
        and not any(ch in CONTROL or is_surrogate(ch) for ch in value)
        and value == value.strip()
    )


def fine_text(value: str, max_length: int) -> bool:
    return len(value) <= max_length and "\x00" not in value and not any(map(is_surrogate, value))


# --- one value ---------------------------------------------------------------------------------


@FAST
@given(values)
def test_an_accepted_id_has_no_nul_control_or_edge_whitespace_and_fits(value: str) -> None:
    found = id_problem(value)
    assert (found is None) == fine_id(value), (value, found)


@FAST
@given(values)
def test_an_accepted_text_has_no_nul_and_fits(value: str) -> None:
    found = text_problem(value)
    assert (found is None) == fine_text(value, TEXT_MAX), (value, found)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("eli_nl\n", "control character (U+000A at position 6)"),
        ("\r\neli", "control character (U+000D at position 0)"),
        ("eli\x00", "NUL (U+0000 at position 3)"),
        (" eli", "must not begin or end with whitespace"),
        ("eli\xa0", "must not begin or end with whitespace"),
        ("eli\u2028x", "line separator"),
        ("eli\ud800", "lone surrogate"),
        ("b" * (ID_MAX + 1), f"at most {ID_MAX} characters (has {ID_MAX + 1})"),
    ],
)
def test_a_bad_id_is_refused_not_trimmed(value: str, message: str) -> None:
    found = id_problem(value)
    assert found is not None
    assert message in found


@pytest.mark.parametrize(
    "value", ["eli_1a2b3c4d5e6f7081", "a b", "x" * ID_MAX, "ünïcødé", "urn:uuid:1/2?x#y"]
)
def test_a_good_id_is_accepted(value: str) -> None:
    assert id_problem(value) is None


def test_empty_and_absent_values() -> None:
    assert id_problem("") is None
    assert id_problem("", required=True) == "must not be empty"
    assert text_problem("") is None


def test_text_takes_newlines_tabs_and_controls_but_not_nul() -> None:
    assert text_problem("line one\nline two\ttab \x1b[1m\u2028 ") is None
    assert (text_problem("a\x00b") or "").startswith("must not contain NUL")
    assert text_problem("a" * (TEXT_MAX + 1)) == (
        f"must be at most {TEXT_MAX} characters (has {TEXT_MAX + 1})"
    )


def test_lookup_ids_cover_every_acceptable_key() -> None:
    assert lookup_problem("superpipeline:" + "e" * ID_MAX) is None
    assert lookup_problem("e" * (KEY_MAX + 1)) is not None
    assert lookup_problem("eli\x00") is not None
    assert lookup_problem("eli\n") is not None
    assert lookup_problem("") is not None


# --- the CloudEvents envelope ------------------------------------------------------------------


def test_the_envelope_is_bounded_by_attribute() -> None:
    assert check_cloudevent("evt-1", "https://superpipeline.example/relay", "t.v1", None) == []
    problems = check_cloudevent(
        "i" * 301, "s" * (CE_SOURCE_MAX + 1), "t\x00", "evt.acme\n.superpipeline"
    )
    assert [p.loc for p in problems] == ["id", "source", "type", "subject"]
    assert check_cloudevent("", "s")[0] == FieldProblem("id", "must not be empty")


# --- whole elicitations ------------------------------------------------------------------------


@pytest.mark.parametrize("build", [sp_options, sp_free_text, sp_bare, sp_approval])
def test_the_valid_fixtures_pass(build: Any) -> None:
    assert check_elicitation(build()) == []


def _strings(value: Any, loc: str = "data") -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(loc, value)]
    if isinstance(value, dict):
        return [pair for k, v in value.items() for pair in _strings(v, f"{loc}.{k}")]
    if isinstance(value, list):
        return [pair for i, v in enumerate(value) for pair in _strings(v, f"{loc}[{i}]")]
    return []


def test_every_string_of_the_spec_fixtures_is_in_bounds() -> None:
    """Each string of valid.json, checked with the bound of the field it maps to."""
    by_name = {
        bounds._template(
            bounds._rename(t.replace("[]", "[0]"), "", FIELD_NAMES["superpipeline"]).loc
        ): b
        for t, b in BOUNDS.items()
    }
    checked = 0
    for body in json.loads(FIXTURES.read_text(encoding="utf-8")).values():
        for loc, value in _strings(body):
            bound = by_name.get(bounds._template(loc))
            if bound is not None:
                checked += 1
                assert bounds.problem(value, bound) is None, (loc, value)
    assert checked > 40


def _sp(**changes: Any) -> Elicitation:
    return elicitation(**changes)


@pytest.mark.parametrize(
    ("e", "loc"),
    [
        (_sp(source_id="eli\x00"), "data.elicitationId"),
        (_sp(source_id="e" * 361), "data.elicitationId"),
        (_sp(source_id="eli_nl\n"), "data.elicitationId"),
        (_sp(workspace="w" * 201), "subject"),
        (_sp(context=Context(board_id="b" * 201)), "data.boardId"),
        (_sp(context=Context(board_id="b\x00")), "data.boardId"),
        (_sp(context=Context(card_title="t\x00")), "data.cardTitle"),
        (_sp(asker=" agt"), "data.agentId"),
        (_sp(question="q\x00"), "data.question"),
        (
            _sp(options=(Option(id="ok", label="Ok"), Option(id="x\n", label="X"))),
            "data.options[1].id",
        ),
        (_sp(subject=subject(digest="sha256:\x00")), "data.approvalSubject.digest"),
        (
            _sp(subject=subject(preview=(PreviewItem(type="text", text="a\x00"),))),
            "data.approvalSubject.preview[0].text",
        ),
        (_sp(extra={"runId": "r\x00"}), "data.runId"),
        (_sp(source="engine", source_id="d\n"), "id"),
        (_sp(source="engine", title="t" * (TEXT_MAX + 1)), "ask.title"),
        (_sp(source="engine", options=(Option(id=" yes", label="yes"),)), "ask.choices[0]"),
        (_sp(source="engine", extra={"destinations": ["web", "x\x00"]}), "destinations[1]"),
        (_sp(source="engine", extra={"shared_key": "k\x00"}), "ask.shared_key"),
        (_sp(source="toolshed", source_id="\x00"), "executionId"),
        (_sp(source="toolshed", question="m\x00"), "message"),
        (_sp(source="pinework", workspace="w\x00"), "workspaceId"),
        (_sp(source="pinework", options=(Option(id="k\x00", label="K"),)), "options[0].key"),
        (_sp(source="handup", extra={"request": {"risk": {"why": "\x00"}}}), "risk.why"),
        (
            _sp(source="handup", extra={"form": [{}, {"header": "\x00"}]}),
            "input.questions[1].header",
        ),
        (_sp(source="elsewhere", context=Context(stage_key="s\x00")), "context.stage_key"),
    ],
)
def test_a_field_out_of_bounds_is_named_as_its_source_calls_it(e: Elicitation, loc: str) -> None:
    problems = check_elicitation(e)
    assert [p.loc for p in problems] == [loc], problems


def test_a_title_from_a_context_field_is_reported_once() -> None:
    e = _sp(title="t" * (TEXT_MAX + 1), context=Context(card_title="t" * (TEXT_MAX + 1)))
    assert [p.loc for p in check_elicitation(e)] == ["data.cardTitle"]


def test_a_made_value_says_so() -> None:
    (found,) = check_elicitation(_sp(workspace="w" * 201))
    assert found.message == "the workspace in it must be at most 200 characters (has 201)"


def test_a_caller_may_name_the_fields() -> None:
    e = _sp(source_id="eli\x00", options=(Option(id="o\n", label="O"),))
    names = {"source_id": "elicitationId", "options": "options"}
    assert [p.loc for p in check_elicitation(e, names=names)] == [
        "elicitationId",
        "options[0].id",
    ]


def test_every_field_problem_is_reported_at_once() -> None:
    e = _sp(source_id="e\x00", asker="a\n", question="q\x00", workspace=" w")
    assert sorted(p.loc for p in check_elicitation(e)) == [
        "data.agentId",
        "data.elicitationId",
        "data.question",
        "subject",
    ]


def test_preview_text_takes_a_whole_body() -> None:
    big = "x" * TEXT_MAX
    e = _sp(subject=subject(preview=(PreviewItem(type="json", text=big),)))
    assert check_elicitation(e) == []


@pytest.mark.parametrize("size", [100_000, 900_000])
def test_free_text_is_bounded_by_the_body_not_by_a_number_of_ours(size: int) -> None:
    """No source's spec sets a maximum on a question, a label, a description, a board name, a
    card title or a preview's parts: each takes what a 1 MiB body can carry."""
    text = "é" * size
    e = _sp(
        title=text,
        question=text,
        context=Context(board_name=text, card_title=text),
        options=(Option(id="yes", label=text, description=text),),
        subject=subject(
            preview=(
                PreviewItem(type="field", label=text, value=text),
                PreviewItem(type="link", label=text, url="https://example.com/?q=" + text),
                PreviewItem(type="text", label=text, text=text),
            )
        ),
    )
    assert check_elicitation(e) == []
    over = _sp(question="q" * (TEXT_MAX + 1))
    assert [(p.loc, p.message) for p in check_elicitation(over)] == [
        ("data.question", f"must be at most {TEXT_MAX} characters (has {TEXT_MAX + 1})")
    ]


def test_the_table_names_every_normalised_field() -> None:
    assert {b.rule for b in BOUNDS.values()} == {Rule.ID, Rule.TEXT}
    for source, names in FIELD_NAMES.items():
        for key in names:
            root = key.split("[", 1)[0].split(".", 1)[0]
            assert root in {"extra", "options", "subject"} or key in BOUNDS, (source, key)


# --- properties over whole elicitations ---------------------------------------------------------


def _build(data: st.DataObject) -> Elicitation:
    v = data.draw
    return elicitation(
        source=v(st.sampled_from([*FIELD_NAMES, "x"])),
        source_id=v(values),
        workspace=v(st.none() | values),
        context=Context(board_id=v(st.none() | values), card_title=v(st.none() | values)),
        asker=v(values),
        title=v(values),
        question=v(values),
        options=tuple(
            Option(id=f"{i}{oid}", label=label)
            for i, (oid, label) in enumerate(v(st.lists(st.tuples(values, values), max_size=3)))
        ),
        subject=v(
            st.none()
            | st.builds(
                lambda t, u: subject(preview=(PreviewItem(type="text", text=t, url=u),)),
                values,
                st.none() | values,
            )
        ),
        extra=v(st.dictionaries(st.sampled_from(["runId", "id", "request"]), values, max_size=2)),
    )


@FAST
@given(st.data())
def test_check_elicitation_never_raises_and_names_every_refusal(data: st.DataObject) -> None:
    e = _build(data)
    problems = check_elicitation(e)
    for p in problems:
        assert p.loc
        assert p.message
    if not problems:
        assert fine_id(e.source_id)
        assert e.source_id
        assert e.workspace is None or fine_id(e.workspace)
        assert fine_id(e.asker)
        assert fine_text(e.title, TEXT_MAX)
        assert fine_text(e.question, TEXT_MAX)
        for o in e.options:
            assert fine_id(o.id)
            assert fine_text(o.label, TEXT_MAX)
        for key, value in e.extra.items():
            assert "\x00" not in key + value

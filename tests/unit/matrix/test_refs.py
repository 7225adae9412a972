"""bot/domain/refs.py, MatrixRef: ``full_in_thread`` is stored only when true, so refs written
before it existed (and every ordinary copy) read and write exactly as before."""

from __future__ import annotations

from bot.domain.refs import MatrixRef, SlackRef, ref_from_json, ref_json


def test_an_ordinary_matrix_ref_is_stored_as_before() -> None:
    ref = MatrixRef("!r:l", "$e")
    assert ref.to_json() == {"room_id": "!r:l", "event_id": "$e", "key": "$e"}
    assert ref_from_json(ref.to_json()) == ref
    assert ref_from_json({"room_id": "!r:l", "event_id": "$e"}) == ref, "an old ref"
    assert ref.full_in_thread is False


def test_a_copy_whose_thread_holds_everything_says_so_and_reads_back() -> None:
    ref = MatrixRef("!r:l", "$e", full_in_thread=True)
    data = ref_json(ref)
    assert data == {"room_id": "!r:l", "event_id": "$e", "full_in_thread": True, "key": "$e"}
    assert ref_from_json(data) == ref
    assert ref.key == "$e", "the index key is unchanged"
    for odd in ("true", 1, None):
        assert ref_from_json({**data, "full_in_thread": odd}) == MatrixRef("!r:l", "$e")
    assert ref_from_json({"channel": "C1", "ts": "1.2"}) == SlackRef("C1", "1.2")

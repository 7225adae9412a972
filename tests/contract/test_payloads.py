"""Every outbox payload kind through the store and back, on SQLite and PostgreSQL: the row stores
the JSON rows have always held (no migration), a claim reads it back as its kind's type, and a
row written before the types (or with a field missing) reads the same."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert

from bot.domain.model import ElicitationKey
from bot.domain.payloads import (
    NotifyPayload,
    Payload,
    PostPayload,
    SeedPayload,
    UpdatePayload,
    WritebackPayload,
    payload_of,
    to_json,
)
from bot.domain.records import EffectKind, NoticeKind, Purpose
from bot.domain.refs import MatrixRef, SlackRef
from store.sql import SqlStore
from store.sql.base import OUTBOX, outbox_row
from tests.conftest import FakeClock

KEY = ElicitationKey("superpipeline:eli_payloads")

ROUND_TRIPS: list[tuple[EffectKind, Payload | None, dict[str, Any] | None, Payload]] = [
    (EffectKind.POST, None, None, PostPayload()),
    (EffectKind.POST, PostPayload(), None, PostPayload()),
    (
        EffectKind.POST,
        PostPayload(Purpose.ESCALATION),
        {"purpose": "escalation"},
        PostPayload(Purpose.ESCALATION),
    ),
    (EffectKind.UPDATE, None, None, UpdatePayload()),
    (EffectKind.SEED, None, None, SeedPayload()),
    (
        EffectKind.NOTIFY,
        NotifyPayload(NoticeKind.REMINDER, "", "hi", SlackRef("C0", "1.2"), ("slack:U1",)),
        {
            "kind": "reminder",
            "user": "",
            "thread": {"channel": "C0", "ts": "1.2", "key": "C0/1.2"},
            "text": "hi",
            "mentions": ["slack:U1"],
        },
        NotifyPayload(NoticeKind.REMINDER, "", "hi", SlackRef("C0", "1.2"), ("slack:U1",)),
    ),
    (
        EffectKind.NOTIFY,
        NotifyPayload(
            NoticeKind.NOTE,
            "matrix:@a:example.org",
            "noted",
            MatrixRef("!r:example.org", "$e"),
            mention=False,
            reply_to="$reaction",
        ),
        {
            "kind": "note",
            "user": "matrix:@a:example.org",
            "thread": MatrixRef("!r:example.org", "$e").to_json(),
            "text": "noted",
            "mentions": [],
            "mention": False,
            "reply_to": "$reaction",
        },
        NotifyPayload(
            NoticeKind.NOTE,
            "matrix:@a:example.org",
            "noted",
            MatrixRef("!r:example.org", "$e"),
            mention=False,
            reply_to="$reaction",
        ),
    ),
    (EffectKind.WRITEBACK, WritebackPayload(), {"round": 1}, WritebackPayload(1)),
    (EffectKind.WRITEBACK, WritebackPayload(3), {"round": 3}, WritebackPayload(3)),
]

OLD_ROWS: list[tuple[EffectKind, dict[str, Any] | None, Payload]] = [
    (EffectKind.WRITEBACK, None, WritebackPayload(1)),
    (EffectKind.WRITEBACK, {}, WritebackPayload(1)),
    (EffectKind.POST, {"purpose": "primary"}, PostPayload()),
    (EffectKind.UPDATE, {"anything": 1}, UpdatePayload()),
    (
        EffectKind.NOTIFY,
        {"user": "slack:U1", "text": "no", "thread": None},
        NotifyPayload(NoticeKind.NOTE, "slack:U1", "no"),
    ),
    (
        EffectKind.NOTIFY,
        {"kind": "refusal", "user": "slack:U1", "text": "refused", "mentions": None},
        NotifyPayload(NoticeKind.REFUSAL, "slack:U1", "refused"),
    ),
    (EffectKind.NOTIFY, {"kind": "shout", "text": 5}, NotifyPayload(NoticeKind.NOTE, "", "5")),
]


def _insert(store: SqlStore, rows: list[dict[str, Any]]) -> None:
    with store.engine.begin() as conn:
        conn.execute(insert(OUTBOX), rows)


async def test_each_kind_stores_its_old_json_and_claims_back_typed(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    rows = [
        outbox_row(KEY, kind, f"slack:C{i}", now, delivery_id=i, payload=payload)
        for i, (kind, payload, _, _) in enumerate(ROUND_TRIPS)
    ]
    _insert(store, rows)

    stored = sorted(await store.outbox(KEY), key=lambda o: o.id)
    print([(o.kind.value, o.payload) for o in stored])
    assert [o.payload for o in stored] == [json for _, _, json, _ in ROUND_TRIPS]
    claimed = sorted(await store.claim_outbox(now, "w1", limit=100), key=lambda o: o.id)
    assert [(c.kind, c.payload) for c in claimed] == [
        (kind, read) for kind, _, _, read in ROUND_TRIPS
    ]


async def test_rows_written_before_the_types_read_the_same(
    store: SqlStore, clock: FakeClock
) -> None:
    now = clock.now()
    rows = []
    for i, (kind, raw, _) in enumerate(OLD_ROWS):
        row = outbox_row(KEY, kind, f"slack:C{i}", now, delivery_id=i)
        rows.append({**row, "payload": raw})
    _insert(store, rows)

    claimed = sorted(await store.claim_outbox(now, "w1", limit=100), key=lambda o: o.id)
    assert [(c.kind, c.payload) for c in claimed] == [(kind, read) for kind, _, read in OLD_ROWS]


@pytest.mark.parametrize(("kind", "payload", "json", "read"), ROUND_TRIPS)
def test_the_codec_round_trips(
    kind: EffectKind, payload: Payload | None, json: dict[str, Any] | None, read: Payload
) -> None:
    assert to_json(kind, payload) == json
    assert payload_of(kind, json) == read
    assert to_json(kind, read) == json


def test_a_payload_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="writeback row carries a WritebackPayload"):
        to_json(EffectKind.WRITEBACK, PostPayload())

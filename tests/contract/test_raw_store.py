"""The raw-events contract (durable before ack), on SQLite and PostgreSQL.

An inbound chat event is recorded once per (channel, dedupe key) before its ack, and stays open
until it is marked handled; ``open_raw`` is what a restart handles again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.domain.store import Store
from tests.conftest import FakeClock

CLICK: dict[str, object] = {
    "type": "block_actions",
    "user": {"id": "U0ALICE", "team_id": "T0ACME"},
    "actions": [{"action_id": "elicitbot.option", "value": '{"e":"k","o":"yes"}'}],
    "note": 'Grüße, ✅ and a "quote"',
}


async def test_an_event_is_recorded_once_per_channel_and_key(
    store: Store, clock: FakeClock
) -> None:
    given = {**CLICK, "actions": [dict(CLICK["actions"][0])]}  # type: ignore[index]
    t0 = clock.now()
    first = await store.record_raw("slack", "action:tr-1", given, t0)
    again = await store.record_raw("slack", "action:tr-1", {"other": "body"}, clock.advance(1))
    elsewhere = await store.record_raw("matrix", "action:tr-1", {"n": 1}, clock.now())

    assert isinstance(first, int)
    assert again is None, "a second delivery is seen as recorded before"
    assert isinstance(elsewhere, int)
    assert elsewhere != first
    given["note"] = "changed after recording"  # the store keeps what it was given, not a view
    [opened] = await store.open_raw("slack")
    assert (opened.id, opened.channel, opened.dedupe_key) == (first, "slack", "action:tr-1")
    assert opened.body == CLICK
    assert opened.received_at == t0
    assert opened.received_at.utcoffset() is not None, "aware UTC, as every store time"
    opened.body["note"] = "changed by a reader"
    [reread] = await store.open_raw("slack")
    assert reread.body == CLICK


async def test_open_events_come_oldest_first_until_handled(store: Store, clock: FakeClock) -> None:
    ids = [
        await store.record_raw("slack", f"event:Ev{i}", {"i": i}, clock.advance(1))
        for i in range(5)
    ]
    await store.record_raw("matrix", "event:Ev9", {"i": 9}, clock.advance(1))

    assert [r.id for r in await store.open_raw("slack")] == ids
    assert [r.body["i"] for r in await store.open_raw("slack", limit=2)] == [0, 1]

    first, second = ids[0], ids[1]
    assert first is not None
    assert second is not None
    await store.handled_raw(second, clock.advance(1))
    await store.handled_raw(second, clock.advance(1))  # a second mark changes nothing
    await store.handled_raw(10_000, clock.now())  # unknown: nothing to do
    assert [r.id for r in await store.open_raw("slack")] == [first, *ids[2:]]
    assert [r.dedupe_key for r in await store.open_raw("matrix")] == ["event:Ev9"]

    await store.handled_raw(first, clock.now())
    assert [r.body["i"] for r in await store.open_raw("slack", limit=2)] == [2, 3]
    assert await store.record_raw("slack", "event:Ev0", {"i": 0}, clock.now()) is None, (
        "a handled event is still known: a late redelivery is not handled again"
    )


async def test_concurrent_deliveries_of_one_event_record_it_once(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    recorded = await asyncio.gather(
        *(store.record_raw("slack", "event:EvSAME", {"copy": n}, now) for n in range(8))
    )

    assert len([r for r in recorded if r is not None]) == 1
    [opened] = await store.open_raw("slack")
    assert opened.id in recorded


async def test_handled_events_are_purged_after_their_keep_and_open_ones_never(
    store: Store, clock: FakeClock
) -> None:
    t0 = clock.now()
    old = await store.record_raw("slack", "action:old", {"n": 1}, t0)
    still_open = await store.record_raw("slack", "action:open", {"n": 2}, t0)
    recent = await store.record_raw("slack", "action:recent", {"n": 3}, t0)
    assert old is not None
    assert still_open is not None
    assert recent is not None
    await store.handled_raw(old, t0)
    await store.handled_raw(recent, clock.advance(3600))

    assert await store.purge_raw(t0 + timedelta(minutes=30)) == 1
    assert [e.id for e in await store.open_raw("slack")] == [still_open]
    # The purged key is free again (a repeat that late is judged by the first-answer rule);
    # the recent one still dedupes.
    assert await store.record_raw("slack", "action:old", {"n": 1}, clock.now()) is not None
    assert await store.record_raw("slack", "action:recent", {"n": 3}, clock.now()) is None

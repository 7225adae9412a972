"""Group commit writes what one-by-one intake writes.

Concurrent intake calls share one transaction on SQL (``store.sql.intake``), and a group of
independent items is written a statement per table for all of them. The first test runs the same
intakes all at once, and on another SQLite database one call at a time with every item written
on its own (the path a group that repeats an inbound id or a key takes), and compares everything
each elicitation got: outcomes, copies, deadlines, outbox rows, audit and status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bot.domain.model import ElicitationKey, Route
from bot.domain.records import IntakeItem
from bot.domain.store import Store
from store.sql import SqlStore
from tests.conftest import FakeClock, fresh_sqlite_url
from tests.contract.test_store import SLACK, THREE_FOLLOWUP, THREE_NOW, TWO_NOW, item, make

WEB_THEN_SLACK = Route(destinations=("web", SLACK), followup_seconds=30)


def batches(prefix: str, now: datetime) -> list[list[IntakeItem]]:
    """One of each kind of intake: deadlines, follow-ups, waiting copies, the web inbox, expired
    on arrival, a revision and a duplicate of what :func:`before` stored, a two-item batch."""
    return [
        [item(make(now, f"{prefix}_a", remind=60, expires=600), f"{prefix}-a", THREE_FOLLOWUP)],
        [item(make(now, f"{prefix}_b", escalate=30), f"{prefix}-b", THREE_NOW)],
        [item(make(now, f"{prefix}_x", expires=-1), f"{prefix}-x")],
        [item(make(now, f"{prefix}_old", question="Changed?"), f"{prefix}-rev")],
        [item(make(now, f"{prefix}_dup"), f"{prefix}-old")],
        [
            item(make(now, f"{prefix}_c1"), f"{prefix}-c1", Route()),
            item(make(now, f"{prefix}_c2", subject_expires=300), f"{prefix}-c2", WEB_THEN_SLACK),
        ],
    ]


async def before(store: Store, prefix: str, now: datetime) -> None:
    """The elicitation that the group revises, under the inbound id it repeats."""
    await store.intake([item(make(now, f"{prefix}_old"), f"{prefix}-old", TWO_NOW)], now)


async def snapshot(store: Store, keys: Sequence[ElicitationKey], prefix: str, now: datetime) -> Any:
    """What each elicitation got, with ids and the run's prefix taken out."""
    seen = []
    for key in keys:
        stored = await store.get(key)
        copies = await store.deliveries(key)
        where = {d.id: (d.destination, d.purpose) for d in copies}
        deadlines = sorted(
            (
                d.kind,
                (d.due_at - now).total_seconds(),
                d.state,
                where.get((d.detail or {}).get("after", -1)),
            )
            for d in await store.deadlines(key)
        )
        outbox = sorted(
            (o.kind, o.target, o.state, where.get(o.delivery_id or -1), str(o.payload))
            for o in await store.outbox(key)
        )
        audit = sorted(
            (a.action, str(a.detail).replace(prefix, "P")) for a in await store.audit(key)
        )
        seen.append(
            (
                key.replace(prefix, "P"),
                None if stored is None else (stored.status, stored.version),
                sorted((d.destination, d.position, d.purpose, d.state) for d in copies),
                deadlines,
                outbox,
                audit,
            )
        )
    return seen


async def run(store: Store, clock: FakeClock, prefix: str, *, together: bool) -> Any:
    now = clock.now()
    await before(store, prefix, now)
    work = batches(prefix, now)
    if together:
        results = await asyncio.gather(*(store.intake(b, now) for b in work))
    else:
        results = [await store.intake(b, now) for b in work]
    outcomes = [[(o.key.replace(prefix, "P"), o.result) for o in r] for r in results]
    keys = sorted({o.key for r in results for o in r})
    return outcomes, await snapshot(store, keys, prefix, now)


async def test_a_group_writes_what_one_by_one_writes(
    db_url: str,
    store: Store,
    clock: FakeClock,
    sqlite_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = SqlStore.from_url(fresh_sqlite_url(sqlite_template, tmp_path / "one.db"))
    try:
        with monkeypatch.context() as one_at_a_time:
            one_at_a_time.setattr("store.sql.intake._independent", lambda _entries: False)
            one_by_one = await run(reference, clock, "one", together=False)
    finally:
        await reference.close()
    together = await run(store, clock, "all", together=True)

    assert together == one_by_one
    outcomes, _ = together
    assert [r for batch in outcomes for _, r in batch] == [
        "accepted",
        "accepted",
        "accepted",
        "updated",
        "duplicate",
        "accepted",
        "accepted",
    ]
    assert outcomes[4] == [("superpipeline:P_old", "duplicate")]  # named as first stored


async def test_a_repeat_within_a_group_is_a_duplicate_or_a_revision(
    store: Store, clock: FakeClock
) -> None:
    now = clock.now()
    first = item(make(now, "eli_r"), "ev-r")
    again = item(make(now, "eli_s"), "ev-r")  # the same inbound id, another elicitation
    revised = item(make(now, "eli_r", question="Changed?"), "ev-r2")  # the same key, changed

    results = await asyncio.gather(*(store.intake([i], now) for i in (first, again, revised)))

    assert [(o.key, o.result) for [o] in results] == [
        ("superpipeline:eli_r", "accepted"),
        ("superpipeline:eli_r", "duplicate"),
        ("superpipeline:eli_r", "updated"),
    ]
    assert await store.get(ElicitationKey("superpipeline:eli_s")) is None
    stored = await store.get(ElicitationKey("superpipeline:eli_r"))
    assert stored is not None
    assert (stored.version, stored.elicitation.question) == (2, "Changed?")


async def test_an_empty_batch_stores_nothing(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    results = await asyncio.gather(store.intake([], now), store.intake([item(make(now), "e")], now))

    assert [[o.result for o in r] for r in results] == [[], ["accepted"]]
    assert await store.intake([], now) == []

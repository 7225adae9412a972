"""Issue 26: recovery is noticed, not waited out. A webhook sink answers 503 for 60 s (the
injected clock; nothing sleeps) while forty answers come in, then recovers: the sink is probed one
write-back at a time, at most ``PROBE_CEILING_SECONDS`` apart, and every waiting write-back is
delivered within 5 s of its recovery, each once (one 200 per key)."""

from __future__ import annotations

from collections import Counter

import pytest

from bot.domain import lanes
from bot.domain.records import WritebackState
from tests.fakes import FakeWebhook
from tests.integration.test_outbox import (
    ALICE,
    Rig,
    attempt,
    posted,
    store,
    webhook,
    webhook_rig,
)

__all__ = ["store", "webhook", "webhook_rig"]  # the fixtures, shared with test_outbox
ANSWERS = 40
"""More than the sink is probed in the outage: some are never tried before it recovers."""
OUTAGE_S = 60.0
STEP_S = 0.25


def accepted(hook: FakeWebhook) -> Counter[str]:
    return Counter(r.headers["idempotency-key"] for r in hook.recorded() if r.status == 200)


@pytest.mark.slow
async def test_every_waiting_write_back_goes_within_5_s_of_the_sinks_recovery(
    webhook_rig: Rig, webhook: FakeWebhook
) -> None:
    rig = webhook_rig
    keys = [await posted(rig, "options", elicitationId=f"eli_out{n:04d}") for n in range(ANSWERS)]
    webhook.script([], default=503)
    start = rig.clock.now()
    elapsed = 0.0
    answering = iter(keys)
    while elapsed < OUTAGE_S:  # down for 60 s; an answer every 0.25 s in the first 10
        if (key := next(answering, None)) is not None:
            assert (await rig.service.answer(key, attempt(ALICE, "deny"))).won
        await rig.dispatcher.drain()
        rig.clock.advance(STEP_S)
        elapsed = (rig.clock.now() - start).total_seconds()
    tried = webhook.recorded()
    assert accepted(webhook) == Counter()
    # Every answer's copies say "Sending…" meanwhile, tried or waiting behind the probe.
    sending = {
        u.view.elicitation.key
        for u in rig.chat.updated
        if u.view.writeback is not None and u.view.writeback.state is WritebackState.SENDING
    }
    assert sending == set(keys)

    webhook.script([], default=200)  # the sink is back
    recovered = rig.clock.now()
    while len(accepted(webhook)) < ANSWERS:
        assert (rig.clock.now() - recovered).total_seconds() <= 5, (
            f"{len(accepted(webhook))} of {ANSWERS} write-backs within 5 s of recovery"
        )
        await rig.dispatcher.drain()
        rig.clock.advance(STEP_S)
    took = (rig.clock.now() - recovered).total_seconds()
    print(f"all {ANSWERS} write-backs {took:.2f} s after recovery; {len(tried)} tries in 60 s")

    # Probed, not flooded: about one try per lane every 1.5-3 s, never a burst per answer.
    assert OUTAGE_S / lanes.PROBE_CEILING_SECONDS - 2 <= len(tried) <= OUTAGE_S / 1.0 + 2
    assert set(accepted(webhook).values()) == {1}, "each answer accepted once"
    assert len(accepted(webhook)) == ANSWERS

"""`[nats]` in the config: Elicitbot consumes SuperPipeline events from JetStream, reports NATS in
/readyz, and publishes the answer on the answer subject (real nats-server on 127.0.0.1:4222)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import httpx
import nats
import pytest

from adapters.sources.superpipeline.parse import CE_TYPE
from bot.app.config import parse_config
from bot.app.wiring import Elicitbot
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Attempt, ElicitationKey, Identity
from tests.unit.sources.superpipeline_fixtures import VALID

NATS_URL = "nats://127.0.0.1:4222"


async def _until(predicate, limit_s: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_events_over_nats_are_stored_and_answers_published(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    subjects = [f"t{tag}.*.superpipeline.elicitation.pending"]
    answer_subject = f"t{tag}.{{workspace}}.elicitbot.elicitation.answered"
    config = parse_config(
        {
            "store": {"url": f"sqlite:///{tmp_path / 'e.db'}"},
            "nats": {"url": NATS_URL, "subjects": subjects, "durable": f"d{tag}"},
            "sources": {"superpipeline": {"answer_subject": answer_subject}},
        }
    )
    bot = Elicitbot(config, environ={})
    assert bot.nats_intake is not None
    bot.nats_intake.stream = f"S{tag}"
    nc = await nats.connect(NATS_URL)
    js = nc.jetstream()
    answers = await nc.subscribe(f"t{tag}.acme.elicitbot.elicitation.answered")
    await bot.start()
    try:
        event = {
            "specversion": "1.0",
            "id": f"ce-{tag}",
            "source": "/superpipeline",
            "type": CE_TYPE,
            "subject": "evt.acme.superpipeline.elicitation.pending",
            "data": VALID["options"],
        }
        await _until(lambda: _true(bot.nats_intake is not None and bot.nats_intake.connected))
        await js.publish(
            f"t{tag}.acme.superpipeline.elicitation.pending", json.dumps(event).encode()
        )
        key = ElicitationKey(f"superpipeline:{VALID['options']['elicitationId']}")
        await _until(lambda: _exists(bot, key))

        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=bot.asgi()), base_url="http://t"
        ) as client:
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text

        outcome = await bot.service.answer(
            key,
            Attempt(
                shown=SHOWN_WHOLE,
                respondent=Identity(platform="slack", user="U0ALICE"),
                option_ids=("deny",),
                via="web",
            ),
        )
        assert outcome.won
        bot.dispatcher.wake()
        message = await answers.next_msg(timeout=15)
        document = json.loads(message.data)
        assert document["elicitationId"] == VALID["options"]["elicitationId"]
        assert document["answer"]["optionIds"] == ["deny"]
        assert message.headers is not None
        assert message.headers["Nats-Msg-Id"] == document["idempotencyKey"]
    finally:
        await bot.stop()
        await js.delete_stream(f"S{tag}")
        await nc.close()


async def _true(value: bool) -> bool:
    return value


async def _exists(bot: Elicitbot, key: ElicitationKey) -> bool:
    return await bot.store.get(key) is not None

"""Lanes under load, in one process on a real clock: a channel with hundreds of posts waiting
holds nothing else back.

The fake Slack Web API allows one ``chat.postMessage`` per second per channel (a token bucket,
429 over it, as Slack). 500 elicitations wait for one busy channel; another workspace's questions
go to a calm channel, with a follow-up to a third channel after five seconds unanswered. An
answer to one of those is written back to SuperPipeline within a second, and the other's follow-up
is posted on time, while the busy channel is still working through its backlog at its rate.
"""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path

import pytest

from adapters.sources.superpipeline.parse import parse_body
from bot.app.config import parse_config
from bot.app.wiring import Elicitbot
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Attempt, Identity
from bot.service import Inbound
from tests.fakes import FakeWebhook
from tests.integration.test_crash import free_port, poll
from tests.slack_fake import FakeSlack, SlackCall
from tests.unit.sources.superpipeline_fixtures import VALID

pytestmark = [pytest.mark.slow, pytest.mark.faults]

TOKEN = "xoxb-lanes-test-token"
BUSY, CALM, THIRD = "C0BUSY", "C0CALM", "C0THIRD"
BACKLOG = 500
FOLLOWUP_S = 5


def elicitation(workspace: str, n: int) -> Inbound:
    data = copy.deepcopy(VALID["approval-request"])
    data["elicitationId"] = data["approvalRequestId"] = f"apr_{workspace}{n:06d}"
    e = parse_body(data, workspace=workspace)
    return Inbound("ce:/superpipeline/lanes", f"evt-{workspace}-{n}", e, {})


async def test_a_busy_channel_holds_back_no_write_back_and_no_follow_up(tmp_path: Path) -> None:
    with FakeWebhook() as webhook, FakeSlack(TOKEN) as slack:
        slack.limit("chat.postMessage", per_second=1.0, burst=1)
        config = parse_config(
            {
                "server": {"listen": f"127.0.0.1:{free_port()}"},
                "store": {"url": f"sqlite:///{tmp_path / 'lanes.db'}"},
                "slack": {
                    "bot_token_env": "SLACK_BOT_TOKEN",
                    "signing_secret_env": "SLACK_SIGNING_SECRET",
                    "api_url": slack.api_url,
                },
                "routes": [
                    {"match": {"workspace": "busy"}, "destinations": [f"slack:{BUSY}"]},
                    {
                        "match": {"workspace": "calm"},
                        "destinations": [f"slack:{CALM}", f"slack:{THIRD}"],
                        "followup_seconds": FOLLOWUP_S,
                    },
                ],
                "sources": {"superpipeline": {"answer_webhook": webhook.url}},
            }
        )
        bot = Elicitbot(
            config, environ={"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "lanes-secret"}
        )
        await bot.start()
        try:
            for start in range(0, BACKLOG, 100):
                await bot.service.intake(
                    [elicitation("busy", n) for n in range(start, start + 100)]
                )
            [answered, unanswered] = await bot.service.intake(
                [elicitation("calm", 0), elicitation("calm", 1)]
            )
            queued_at = time.monotonic()

            async def calm_posted() -> bool | None:
                states = [
                    d.state
                    for key in (answered.key, unanswered.key)
                    for d in await bot.store.deliveries(key)
                    if d.destination == f"slack:{CALM}"
                ]
                return True if states == ["posted", "posted"] else None

            await poll(calm_posted, within=5, what="the calm channel's posts")
            first_posted = time.monotonic()
            assert first_posted - queued_at < 4, "the calm channel waited behind the busy one"

            result = await bot.service.answer(
                answered.key,
                Attempt(
                    shown=SHOWN_WHOLE,
                    respondent=Identity(platform="slack", user="U0ALICE"),
                    option_ids=("deny",),
                    via=f"slack:{CALM}",
                ),
            )
            assert result.won
            answered_at = time.monotonic()
            await asyncio.to_thread(webhook.wait_for, lambda got: len(got) == 1, 5.0)
            write_back_s = time.monotonic() - answered_at

            def followed_up(calls: list[SlackCall]) -> bool:
                return any(
                    c.method == "chat.postMessage" and c.params.get("channel") == THIRD
                    for c in slack.calls()
                )

            await asyncio.to_thread(slack.wait_for, followed_up, FOLLOWUP_S + 5.0)
            follow_up_s = time.monotonic() - first_posted
            busy_posts = len(
                [
                    c
                    for c in slack.calls_to("chat.postMessage")
                    if c.params.get("channel") == BUSY and c.status == 200
                ]
            )
            lanes = {v.lane: v for v in await bot.store.lanes()}
        finally:
            await bot.stop()

    print(
        f"\nwrite-back {write_back_s:.3f} s after the answer; follow-up {follow_up_s:.2f} s after"
        f" the first copy (due {FOLLOWUP_S} s); busy channel {busy_posts} posts meanwhile,"
        f" {lanes[f'chat:slack:{BUSY}'].pending} still waiting"
    )
    assert write_back_s < 1.0
    assert FOLLOWUP_S - 0.5 < follow_up_s < FOLLOWUP_S + 2.0
    assert lanes[f"chat:slack:{BUSY}"].pending > BACKLOG - 30, "the backlog is still there"
    assert slack.calls_to("chat.postMessage"), "posts were made"
    limited = [c for c in slack.calls_to("chat.postMessage") if c.status == 429]
    assert not limited, f"{len(limited)} posts went over Slack's rate"
    [request] = webhook.recorded()
    assert request.body["elicitationId"] == "apr_calm000000"

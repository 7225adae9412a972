"""Fixtures of the Slack interactivity tests: the fake Web API and the rig around it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store.sql import SqlStore
from tests.conftest import FakeClock
from tests.integration.slack.rig import Rig
from tests.slack_fake import FakeSlack


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack() as slack:
        yield slack


@pytest.fixture
async def rig(
    tmp_path: Path, sqlite_url: str, clock: FakeClock, fake: FakeSlack
) -> AsyncIterator[Rig]:
    store = SqlStore.from_url(sqlite_url)
    rig = Rig(tmp_path / "elicitbot.db", store, clock, fake)
    await rig.start()
    try:
        yield rig
    finally:
        await rig.close()
        await store.close()

"""SlackNames: users.info display names, cached per person with a TTL and a size bound, one
lookup shared by callers asking at once, failures soft and remembered, 429s waited out."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from structlog.testing import capture_logs

from adapters.slack.api.people import FAILURE_TTL, TTL, SlackNames, name_of
from bot.domain.model import Identity
from tests.conftest import FakeClock


@dataclass
class Response:
    """What slack_sdk's api_error reads of a failed call's response."""

    data: dict[str, Any]
    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def slack_error(code: str, status: int = 200, **headers: str) -> SlackApiError:
    return SlackApiError(code, Response({"ok": False, "error": code}, status, headers))


def member(display_name: str = "", real_name: str = "", name: str = "alice") -> dict[str, Any]:
    return {
        "id": "U0ALICE",
        "name": name,
        "real_name": real_name,
        "profile": {"display_name": display_name, "real_name": real_name},
    }


class StubUsers:
    """users.info: a member per registered id, ``user_not_found`` otherwise; ``fail`` raises
    that error for every call; ``gate`` holds every call until set."""

    def __init__(self, **people: dict[str, Any]) -> None:
        self.people = people
        self.calls: list[str] = []
        self.fail: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def users_info(self, *, user: str) -> dict[str, Any]:
        self.calls.append(user)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        if user not in self.people:
            raise slack_error("user_not_found")
        return {"ok": True, "user": self.people[user]}


ALICE = member(display_name="Alice", real_name="Alice Smith")
BOB = member(display_name="", real_name="Bob Jones", name="bob")


def names(client: StubUsers, clock: FakeClock, **kwargs: Any) -> SlackNames:
    return SlackNames(client, clock=clock, **kwargs)


# --------------------------------------------------------------------------- which name


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        (member(display_name="Alice", real_name="Alice Smith"), "Alice"),
        (member(display_name="  ", real_name="Alice Smith"), "Alice Smith"),
        ({"real_name": "Alice Smith", "name": "alice", "profile": {}}, "Alice Smith"),
        ({"name": "alice"}, "alice"),
        ({"name": "", "profile": {"display_name": ""}}, None),
        (None, None),
        (member(display_name="A" * 200), "A" * 80),
    ],
)
def test_the_name_is_the_display_name_else_the_real_name_else_the_username(
    user: Any, expected: str | None
) -> None:
    assert name_of(user) == expected


# --------------------------------------------------------------------------- caching


async def test_a_name_is_looked_up_once_then_again_after_its_ttl(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE, U0BOB=BOB)
    cache = names(client, clock)

    assert await cache.name("U0ALICE") == "Alice"
    assert await cache.name("U0BOB") == "Bob Jones"
    assert await cache.name("U0ALICE") == "Alice"
    assert client.calls == ["U0ALICE", "U0BOB"]

    client.people["U0ALICE"] = member(display_name="Ali")
    clock.advance(TTL.total_seconds() - 1)
    assert await cache.name("U0ALICE") == "Alice"
    clock.advance(2)
    assert await cache.name("U0ALICE") == "Ali"
    assert client.calls == ["U0ALICE", "U0BOB", "U0ALICE"]


async def test_callers_asking_at_once_share_one_lookup(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE)
    client.gate = asyncio.Event()
    cache = names(client, clock)

    waiters = [asyncio.create_task(cache.name("U0ALICE")) for _ in range(5)]
    await asyncio.sleep(0)
    client.gate.set()

    assert await asyncio.gather(*waiters) == ["Alice"] * 5
    assert client.calls == ["U0ALICE"]


async def test_a_cancelled_caller_leaves_the_lookup_to_the_others(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE)
    client.gate = asyncio.Event()
    cache = names(client, clock)

    first = asyncio.create_task(cache.name("U0ALICE"))
    second = asyncio.create_task(cache.name("U0ALICE"))
    await asyncio.sleep(0)
    first.cancel()
    client.gate.set()

    assert await second == "Alice"
    assert first.cancelled()
    assert client.calls == ["U0ALICE"]


async def test_the_cache_holds_at_most_size_people_least_recently_used_out(
    clock: FakeClock,
) -> None:
    people = {f"U0P{i}": member(display_name=f"P{i}") for i in range(4)}
    client = StubUsers(**people)
    cache = names(client, clock, size=3)

    for user in ("U0P0", "U0P1", "U0P2"):
        await cache.name(user)
    await cache.name("U0P0")  # used again: P1 is now the least recently used
    await cache.name("U0P3")
    assert len(cache) == 3

    client.calls.clear()
    for user in ("U0P0", "U0P2", "U0P3", "U0P1"):
        await cache.name(user)
    assert client.calls == ["U0P1"]


# --------------------------------------------------------------------------- failures


async def test_a_missing_scope_is_logged_once_and_stops_lookups_for_a_while(
    clock: FakeClock,
) -> None:
    client = StubUsers(U0ALICE=ALICE, U0BOB=BOB)
    client.fail = slack_error("missing_scope")
    cache = names(client, clock)

    with capture_logs() as logs:
        assert await cache.name("U0ALICE") is None
        assert await cache.name("U0ALICE") is None
        assert await cache.name("U0BOB") is None  # every lookup would fail alike: not asked
        assert client.calls == ["U0ALICE"]

        clock.advance(FAILURE_TTL.total_seconds() + 1)
        assert await cache.name("U0BOB") is None
        assert client.calls == ["U0ALICE", "U0BOB"]

    missing = [e for e in logs if e["event"] == "slack.users_read_missing"]
    assert len(missing) == 1
    assert missing[0]["scope"] == "users:read"
    assert missing[0]["log_level"] == "warning"

    client.fail = None  # the scope was added and the app reinstalled
    clock.advance(FAILURE_TTL.total_seconds() + 1)
    assert await cache.name("U0ALICE") == "Alice"


async def test_a_rate_limit_is_waited_out_for_everyone(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE, U0BOB=BOB)
    client.fail = slack_error("ratelimited", 429, **{"Retry-After": "30"})
    cache = names(client, clock)

    assert await cache.name("U0ALICE") is None
    client.fail = None
    clock.advance(29)
    assert await cache.name("U0BOB") is None
    assert await cache.name("U0ALICE") is None
    assert client.calls == ["U0ALICE"]

    clock.advance(2)
    assert await cache.name("U0BOB") == "Bob Jones"
    assert await cache.name("U0ALICE") == "Alice"
    assert client.calls == ["U0ALICE", "U0BOB", "U0ALICE"]


@pytest.mark.parametrize(
    "failure",
    [
        slack_error("user_not_found"),
        slack_error("internal_error", 500),
        OSError("connection refused"),
    ],
    ids=["user_not_found", "http-500", "network"],
)
async def test_one_person_failing_is_remembered_briefly_for_that_person_only(
    clock: FakeClock, failure: BaseException
) -> None:
    client = StubUsers(U0ALICE=ALICE, U0BOB=BOB)
    client.fail = failure
    cache = names(client, clock)

    assert await cache.name("U0ALICE") is None
    assert await cache.name("U0ALICE") is None
    assert client.calls == ["U0ALICE"]

    client.fail = None
    assert await cache.name("U0BOB") == "Bob Jones"
    clock.advance(FAILURE_TTL.total_seconds() + 1)
    assert await cache.name("U0ALICE") == "Alice"


async def test_a_lookup_that_hangs_gives_up_after_the_timeout(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE)
    client.gate = asyncio.Event()  # never set
    cache = names(client, clock, timeout=0.05)

    assert await asyncio.wait_for(cache.name("U0ALICE"), 2) is None


async def test_a_known_name_stays_in_use_while_its_refresh_fails(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE)
    cache = names(client, clock)
    assert await cache.name("U0ALICE") == "Alice"

    clock.advance(TTL.total_seconds() + 1)
    client.fail = slack_error("internal_error", 500)
    assert await cache.name("U0ALICE") == "Alice"
    assert await cache.name("U0ALICE") == "Alice"
    assert client.calls == ["U0ALICE", "U0ALICE"]


async def test_no_failure_log_carries_the_token(clock: FakeClock) -> None:
    token = "xoxb-1234-secret-token"
    client = StubUsers()
    client.fail = SlackApiError(
        f"boom {token}", Response({"ok": False, "error": "missing_scope"}, 200)
    )
    with capture_logs() as logs:
        await names(client, clock).name("U0ALICE")
    assert logs
    assert token not in repr(logs)


# --------------------------------------------------------------------------- identities


async def test_identify_gives_a_slack_person_their_name(clock: FakeClock) -> None:
    client = StubUsers(U0ALICE=ALICE)
    cache = names(client, clock)
    who = Identity(platform="slack", user="U0ALICE", team="T0ACME", display_name="alice")

    named = await cache.identify(who)

    assert named == who.model_copy(update={"display_name": "Alice"})


async def test_identify_leaves_other_ids_alone_and_unknown_people_unnamed(
    clock: FakeClock,
) -> None:
    client = StubUsers()
    cache = names(client, clock)
    matrix = Identity(platform="matrix", user="@alice:example.org", display_name="Alice")
    bot = Identity(platform="slack", user="B0AGENTBOT", is_bot=True)
    unknown = Identity(platform="slack", user="U0NOBODY", display_name="nobody")

    assert await cache.identify(matrix) is matrix
    assert await cache.identify(bot) is bot
    assert client.calls == []  # not Slack user ids: never asked
    # No name from Slack: not the payload's legacy username either; the surface shows the id.
    assert await cache.identify(unknown) == unknown.model_copy(update={"display_name": None})
    assert client.calls == ["U0NOBODY"]

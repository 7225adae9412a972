"""Slack's rate limits kept on our side: ``chat.postMessage`` one per second per channel,
``chat.update`` a budget per workspace (Tier 3), and after a 429 nothing on that key (method +
channel or workspace) until its ``Retry-After``.

Calls on one key go out one at a time in arrival order (:class:`asyncio.Lock` is FIFO), no polling;
one that would wait past ``max_wait`` goes back to the outbox with ``retry_after``. A call that
gives way (a thread note) takes only a turn nobody else wants, and with shared slots only while no
replica has a question of the channel claimed, so questions never wait behind notes. Given
``slots`` (the store), N replicas keep one rate; a slot once taken is used, so a deferral never
leaves a hole.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import random
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.domain import lanes
from bot.domain.errors import TransientDeliveryError
from bot.domain.records import EffectKind
from bot.domain.store import Pacing

log = structlog.get_logger("elicitbot.slack.pacing")

T = TypeVar("T")
Key = tuple[str, str]
"""(Web API method, channel or workspace id)."""

HTTP_TOO_MANY_REQUESTS = 429
DEFAULT_RETRY_AFTER = 1.0
"""Seconds to wait after a 429 that names no ``Retry-After``."""
MAX_JITTER = 0.25


@dataclass(frozen=True)
class Rate:
    """``per_second`` sustained, ``burst`` at once after a quiet spell (a token bucket).

    ``margin`` (s) is added to each interval: posts sent one second apart can arrive 0.99 s
    apart and meet a 429; :meth:`_Gate.answered` covers a call that reached Slack late."""

    per_second: float
    burst: int = 1
    margin: float = 0.01

    def __post_init__(self) -> None:
        if self.per_second <= 0 or self.burst < 1:
            raise ValueError("a rate needs per_second > 0 and burst >= 1")

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second + self.margin


POST_METHOD = "chat.postMessage"
POST_RATE = Rate(per_second=1.0, burst=1)
UPDATE_RATE = Rate(per_second=50 / 60, burst=10)
DEFAULT_RATES: Mapping[str, Rate] = {"chat.postMessage": POST_RATE, "chat.update": UPDATE_RATE}
DEFAULT_MAX_WAIT = 15.0
"""Seconds a call may wait for its turn before it is handed back to the outbox."""

_CURRENT_KEY: contextvars.ContextVar[Key | None] = contextvars.ContextVar(
    "elicitbot_slack_key", default=None
)


def retry_after_seconds(headers: Mapping[str, Any] | None) -> float:
    """``Retry-After`` in seconds (values may be lists, as slack_sdk keeps them); 1 s if absent."""
    for name, value in (headers or {}).items():
        if str(name).lower() != "retry-after":
            continue
        first = value[0] if isinstance(value, list | tuple) and value else value
        try:
            seconds = float(first)
        except (TypeError, ValueError):
            return DEFAULT_RETRY_AFTER
        return max(seconds, 0.0) if math.isfinite(seconds) else DEFAULT_RETRY_AFTER
    return DEFAULT_RETRY_AFTER


@dataclass
class _Gate:
    """One key's GCRA state, 429 block and FIFO; ``first`` counts callers that do not give way
    (queued or sending), ``clear`` is set when there are none."""

    rate: Rate | None
    tat: float = 0.0
    blocked_until: float = 0.0
    waiting: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    first: int = 0
    clear: asyncio.Event = field(default_factory=asyncio.Event)
    handed_back: float = 0.0
    """The turn promised to the latest call handed back to the outbox (monotonic)."""

    def __post_init__(self) -> None:
        self.clear.set()

    def ready_at(self) -> float:
        at = self.blocked_until
        if self.rate is not None:
            at = max(at, self.tat - (self.rate.burst - 1) * self.rate.interval)
        return at

    def consume(self, now: float) -> None:
        if self.rate is not None:
            self.tat = max(self.tat, now) + self.rate.interval

    def answered(self, now: float) -> None:
        """The next call goes no sooner than the bare interval after this answer, however late
        the call reached the platform (a starved loop, a cold connection)."""
        if self.rate is not None:
            self.tat = max(self.tat, now + self.rate.interval - self.rate.margin)


@dataclass
class _Pending:
    """An update waiting for its turn; a newer one for the same message replaces ``call``."""

    call: Callable[[], Awaitable[Any]]
    done: asyncio.Future[Any]
    started: bool = False


@dataclass
class PacerStats:
    sent: int = 0
    rate_limited: int = 0
    coalesced: int = 0
    deferred: int = 0
    """Calls handed back to the outbox because their turn was more than ``max_wait`` away."""
    shared_wait: float = 0.0
    """Seconds spent waiting for shared slots (other replicas' calls on the same keys)."""


class Pacer:
    """Per-key pacing of Slack Web API calls. One per process (per SlackChat)."""

    def __init__(
        self,
        rates: Mapping[str, Rate] | None = None,
        *,
        max_wait: float = DEFAULT_MAX_WAIT,
        monotonic: Callable[[], float] = time.monotonic,
        jitter: Callable[[], float] | None = None,
        slots: Pacing | None = None,
        wall: Callable[[], datetime] | None = None,
    ) -> None:
        self.rates = dict(DEFAULT_RATES if rates is None else rates)
        self.max_wait = max_wait
        self.slots = slots
        """Shared reservations (every replica's), or None: this process paces alone."""
        self._now = monotonic
        self._wall = wall or (lambda: datetime.now(UTC))
        rng = random.Random()  # noqa: S311 - jitter, not security
        self._jitter = jitter or (lambda: rng.random() * MAX_JITTER)
        self._gates: dict[Key, _Gate] = {}
        self._pending: dict[tuple[Key, Hashable], _Pending] = {}
        self.stats = PacerStats()

    def _gate(self, key: Key) -> _Gate:
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates[key] = _Gate(self.rates.get(key[0]))
        return gate

    def block(self, key: Key, seconds: float) -> None:
        """Slack said 429: nothing on ``key`` for ``seconds`` plus jitter."""
        gate = self._gate(key)
        until = self._now() + seconds + self._jitter()
        gate.blocked_until = max(gate.blocked_until, until)
        self.stats.rate_limited += 1
        log.info("slack.rate_limited", method=key[0], scope=key[1], retry_after=seconds)

    def wait_time(self, key: Key) -> float:
        """Seconds until ``key`` may send again, not counting callers queued on it."""
        return max(0.0, self._gate(key).ready_at() - self._now())

    async def wait_turn(self, key: Key) -> None:
        wait = self.wait_time(key)
        if wait > 0:
            await asyncio.sleep(wait)

    def _expected_wait(self, gate: _Gate) -> float:
        ahead = gate.waiting + (1 if gate.lock.locked() else 0)
        ready = max(gate.ready_at(), self._now())
        return ready - self._now() + ahead * self._interval(gate)

    async def send(
        self, key: Key, call: Callable[[], Awaitable[T]], *, gives_way: bool = False
    ) -> T:
        """Run ``call`` in ``key``'s turn; TransientDeliveryError (not sent) past ``max_wait``.

        ``gives_way``: every other call on the key goes first, even one arriving while this one
        waits for the rate (a thread note never takes a question's turn)."""
        gate = self._gate(key)
        if gives_way:
            return await self._in_a_gap(key, gate, call)
        self._defer_if_far(key, self._expected_wait(gate))
        gate.waiting += 1
        gate.first += 1
        gate.clear.clear()
        queued = True
        try:
            async with gate.lock:
                gate.waiting -= 1
                queued = False
                wait = gate.ready_at() - self._now()
                self._defer_if_far(key, wait)
                await self._turn(key, gate, wait)
                return await self._call(key, call)
        finally:
            if queued:
                gate.waiting -= 1
            gate.first -= 1
            if gate.first == 0:
                gate.clear.set()

    async def _in_a_gap(self, key: Key, gate: _Gate, call: Callable[[], Awaitable[T]]) -> T:
        """Wait until nobody is queued, take the key and its rate, and give it back to a call
        that came meanwhile (the rate is not used up, so that one goes at once)."""
        deadline = self._now() + self.max_wait
        while True:
            left = deadline - self._now()
            if left <= 0:
                self._hand_back(key, max(self._expected_wait(gate), self.max_wait))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate.clear.wait(), timeout=left)
            if not gate.clear.is_set():
                continue
            async with gate.lock:
                wait = gate.ready_at() - self._now()
                if wait > deadline - self._now():
                    self._hand_back(key, wait)
                if wait > 0:
                    await asyncio.sleep(wait)
                if gate.first:
                    continue  # someone came while we waited for the rate: theirs is the turn
                elsewhere = await self._question_elsewhere(key)
                if not elsewhere:
                    # The shared slot is taken only now, in the gap: a slot once taken is used.
                    await self._turn(key, gate, 0.0)
                    return await self._call(key, call)
            # Another replica's question is on its way in this channel: its turn, not ours.
            await asyncio.sleep(min(self._interval(gate), max(0.0, deadline - self._now())))

    def _interval(self, gate: _Gate) -> float:
        return gate.rate.interval if gate.rate is not None else 0.0

    async def _question_elsewhere(self, key: Key) -> bool:
        """Whether any replica has a question of this (shared, paced) channel claimed."""
        if self.slots is None or key[0] != POST_METHOD or self._gate(key).rate is None:
            return False
        lane = lanes.lane_of("", EffectKind.POST, f"slack:{key[1]}")
        return await self.slots.question_claimed(lane, self._wall())

    async def _call(self, key: Key, call: Callable[[], Awaitable[T]]) -> T:
        self.admit(key)
        token = _CURRENT_KEY.set(key)
        try:
            return await call()
        except SlackApiError as exc:
            if getattr(exc.response, "status_code", None) == HTTP_TOO_MANY_REQUESTS:
                headers = getattr(exc.response, "headers", None)
                self.block(key, retry_after_seconds(headers))
            raise
        finally:
            _CURRENT_KEY.reset(token)
            self._gate(key).answered(self._now())

    async def _turn(self, key: Key, gate: _Gate, wait: float) -> None:
        """Wait for the local rate and, if shared, the next shared slot, reserved at once for
        when the local turn comes (the round trip overlaps the wait); then any 429 block."""
        wait = max(0.0, wait)
        if self.slots is not None and gate.rate is not None:
            wanted = self._wall() + timedelta(seconds=wait)
            at = await self.slots.reserve_slot(slot_name(key), gate.rate.interval, wanted)
            self.stats.shared_wait += max(0.0, (at - wanted).total_seconds())
            wait = (at - self._wall()).total_seconds()
        else:
            wait = gate.ready_at() - self._now()
        if wait > 0:
            await asyncio.sleep(wait)
        blocked = gate.blocked_until - self._now()
        if blocked > 0:
            await asyncio.sleep(blocked)

    def admit(self, key: Key) -> None:
        self._gate(key).consume(self._now())
        self.stats.sent += 1

    def _defer_if_far(self, key: Key, wait: float) -> None:
        if wait > self.max_wait:
            self._hand_back(key, wait)

    def _hand_back(self, key: Key, wait: float) -> NoReturn:
        """Not sent: retry in ``wait`` s, or one interval after the previous hand-back if later,
        so a backlog comes back one turn apart rather than all at once."""
        gate = self._gate(key)
        now = self._now()
        at = max(now + wait, gate.handed_back + self._interval(gate))
        gate.handed_back = at
        self.stats.deferred += 1
        raise TransientDeliveryError(
            f"slack {key[0]}: paced (rate limit), next turn in {at - now:.1f} s",
            retry_after=at - now,
        )

    async def send_latest(self, key: Key, item: Hashable, call: Callable[[], Awaitable[T]]) -> T:
        """:meth:`send`, but a newer call for the same ``item`` (a message) replaces a waiting one;
        every caller gets the newest's outcome."""
        slot = (key, item)
        pending = self._pending.get(slot)
        if pending is not None and not pending.started:
            pending.call = call
            self.stats.coalesced += 1
            result: T = await asyncio.shield(pending.done)
            return result
        pending = _Pending(call, asyncio.get_running_loop().create_future())
        self._pending[slot] = pending

        async def newest() -> T:
            pending.started = True
            if self._pending.get(slot) is pending:
                del self._pending[slot]
            outcome: T = await pending.call()
            return outcome

        try:
            result = await self.send(key, newest)
        except BaseException as exc:
            if self._pending.get(slot) is pending:
                del self._pending[slot]
            _settle(pending.done, exc)
            raise
        if not pending.done.done():
            pending.done.set_result(result)
        return result


def slot_name(key: Key) -> str:
    """``slack:<method>:<channel or team>``: the key's shared rate in the store."""
    return f"slack:{key[0]}:{key[1]}"


def _settle(done: asyncio.Future[Any], exc: BaseException) -> None:
    """Hand the first caller's failure to the callers whose update it carried."""
    if done.done():
        return
    if isinstance(exc, Exception):
        done.set_exception(exc)
        done.exception()  # retrieved: nobody else may be waiting
    else:
        done.cancel()


class PacedRetryHandler(AsyncRateLimitErrorRetryHandler):
    """slack_sdk's 429 retry, paced: the window blocks the whole key; one longer than
    ``max_in_call`` fails the call and the outbox retries it later."""

    def __init__(self, pacer: Pacer, *, max_retry_count: int = 2, max_in_call: float = 3.0):
        super().__init__(max_retry_count=max_retry_count)
        self.pacer = pacer
        self.max_in_call = max_in_call

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if response is None or response.status_code != HTTP_TOO_MANY_REQUESTS:
            return False
        return retry_after_seconds(response.headers) <= self.max_in_call

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        if response is None:  # pragma: no cover - _can_retry_async needs a response
            raise error or RuntimeError("no response to retry")
        key = _CURRENT_KEY.get() or (request.url.rsplit("/", 1)[-1], "*")
        self.pacer.block(key, retry_after_seconds(response.headers))
        state.next_attempt_requested = True
        await self.pacer.wait_turn(key)
        self.pacer.admit(key)
        state.increment_current_attempt()

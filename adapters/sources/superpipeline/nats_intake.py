"""SuperPipeline over NATS, in: one durable JetStream pull consumer of ``elicitation.pending``.
Commit first, ack after (a crash between means a redelivery, never a loss); a malformed message
is ``term()``-ed, never nak-looped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from adapters.shared import cloudevents
from adapters.sources.superpipeline.nats_client import connect, described, sleep_unless
from adapters.sources.superpipeline.parse import SUBJECT_RE, to_elicitation
from bot.domain.errors import IntakeError, PayloadRejected
from bot.domain.ports import Inbound, IntakeOutcome

DEFAULT_STREAM = "ELICITBOT_SUPERPIPELINE"
DUPLICATE_WINDOW_SECONDS = 600.0  # ``Nats-Msg-Id`` window; our database dedupes anyway
STREAM_MAX_AGE_SECONDS = 7 * 24 * 3600.0  # a week for replay, far beyond the last redelivery
MAX_BACKOFF_SECONDS = 600.0
ERR_STREAM_NAME_IN_USE = 10058  # "stream name already in use with a different configuration"
ERR_SUBJECTS_OVERLAP = 10065  # "subjects overlap with an existing stream"
MAX_DELIVERIES_ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"
_BACKOFF_STEPS = (1, 2, 4, 10, 20)
_RETRY_CAP_SECONDS = 30.0


Handler = Callable[[list[Inbound]], Awaitable[Sequence[IntakeOutcome]]]
"""``Service.intake``: stores the batch and commits before returning."""


def inbound_from_message(subject: str, headers: Mapping[str, str] | None, body: bytes) -> Inbound:
    """One NATS message (``IntakeError``); without a ``subject``, a NATS subject of its shape."""
    event = cloudevents.parse_nats(headers, body)
    if event.subject is None and SUBJECT_RE.fullmatch(subject):
        event = dataclasses.replace(event, subject=subject)
    elicitation = to_elicitation(event)
    audit = {
        "ce_source": event.source,
        "ce_id": event.id,
        "ce_type": event.type,
        "via": "nats",
        "nats_subject": subject,
    }
    return Inbound(f"ce:{event.source}", event.id, elicitation, audit)


def default_backoff(ack_wait: float, max_deliver: int) -> tuple[float, ...]:
    """Redelivery waits from ``ack_wait`` (30 gives 30, 60, 120, 300, 600 s); the server makes
    ``backoff[0]`` the ack wait and wants fewer steps than deliveries."""
    steps = len(_BACKOFF_STEPS) if max_deliver < 0 else min(len(_BACKOFF_STEPS), max_deliver - 1)
    cap = max(MAX_BACKOFF_SECONDS, ack_wait)
    return tuple(min(ack_wait * factor, cap) for factor in _BACKOFF_STEPS[:steps])


@dataclass(frozen=True)
class _Binding:
    stream: str
    durable: str
    filter_subject: str | None


class NatsIntake:
    def __init__(
        self,
        url: str,
        subjects: Sequence[str],
        durable: str,
        handle: Handler,
        *,
        stream: str = DEFAULT_STREAM,
        ack_wait: float = 30,
        max_deliver: int = 10,
        fetch_batch: int = 32,
        backoff: Sequence[float] | None = None,
        fetch_timeout: float = 2.0,
        connect_timeout: float = 10.0,
        max_ack_pending: int = 1000,
        duplicate_window: float = DUPLICATE_WINDOW_SECONDS,
    ) -> None:
        if not subjects:
            raise ValueError("NatsIntake needs at least one subject")
        if max_deliver == 0 or max_deliver < -1:
            raise ValueError("max_deliver must be -1 (unlimited) or at least 1")
        self.url = url
        self.subjects = tuple(subjects)
        self.durable = durable
        self.handle = handle
        self.stream = stream
        self.ack_wait = float(ack_wait)
        self.max_deliver = max_deliver
        self.fetch_batch = fetch_batch
        given = None if backoff is None else tuple(map(float, backoff))
        self.backoff = default_backoff(self.ack_wait, max_deliver) if given is None else given
        if self.backoff and 0 < max_deliver <= len(self.backoff):
            raise ValueError("backoff must have fewer steps than max_deliver")
        self.fetch_timeout = fetch_timeout
        self.connect_timeout = connect_timeout
        self.max_ack_pending = max_ack_pending
        self.duplicate_window = duplicate_window
        self.bindings: tuple[_Binding, ...] = ()  # after start(): ours, or streams covering ours
        self.max_deliveries_seen = 0  # messages JetStream gave up on (they stay stored)
        self._nc: Any = None
        self._subs: list[tuple[_Binding, Any]] = []
        self._log = structlog.get_logger("elicitbot.nats")

    @property
    def connected(self) -> bool:
        """For /readyz: connected to NATS and bound to the consumer."""
        return self._nc is not None and bool(self._nc.is_connected) and bool(self._subs)

    async def start(self) -> None:
        """Connect, provision, bind; raises if NATS is unreachable (``run`` retries it, so the
        process can start while NATS is down). Once connected, the client reconnects forever."""
        if self._subs:
            return
        try:
            self._nc = await connect(
                self.url,
                name="elicitbot-intake",
                give_up_after=self.connect_timeout,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
            )
            js = self._nc.jetstream()
            self.bindings = tuple(await self._provision(js))
            for binding in self.bindings:
                await self._ensure_consumer(js, binding)
                sub = await js.pull_subscribe_bind(durable=binding.durable, stream=binding.stream)
                self._subs.append((binding, sub))
                await self._nc.subscribe(
                    MAX_DELIVERIES_ADVISORY.format(stream=binding.stream, consumer=binding.durable),
                    cb=self._on_max_deliveries,
                )
        except BaseException:
            await self.close()
            raise
        self._log.info(
            "nats.intake.started",
            url=self.url,
            bindings=[dataclasses.asdict(b) for b in self.bindings],
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Fetch, parse, hand over, ack, until ``stop`` is set (within ``fetch_timeout``)."""
        attempt = 0
        while not self._subs:
            if stop.is_set():
                return
            try:
                await self.start()
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                attempt += 1
                await self._back_off(stop, attempt, "nats.intake.start_failed", exc, url=self.url)
        await asyncio.gather(*(self._consume(binding, sub, stop) for binding, sub in self._subs))

    async def close(self) -> None:
        """Drain (pending acks are flushed) and close. Stop ``run`` first."""
        nc, self._nc = self._nc, None
        subs, self._subs = self._subs, []
        if nc is None or nc.is_closed:
            return
        for _, sub in subs:
            # A pull subscription's inbox can hold a late status reply nobody reads: draining
            # it would wait for drain_timeout (30 s). Its messages are not acked: redelivered.
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await sub.unsubscribe()
        try:
            await nc.drain()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            self._log.warning("nats.intake.drain_failed", error=type(exc).__name__)
            with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                await nc.close()

    async def _provision(self, js: Any) -> list[_Binding]:
        """Our stream for subjects no other stream covers; bind where another stream does."""
        ours: list[str] = []
        foreign: dict[str, list[str]] = {}
        for subject in self.subjects:
            try:
                owner = await js.find_stream_name_by_subject(subject)
            except nats.js.errors.NotFoundError:
                owner = None
            if owner is None or owner == self.stream:
                ours.append(subject)
            else:
                foreign.setdefault(owner, []).append(subject)
        bindings: list[_Binding] = []
        if ours:
            await self._ensure_stream(js, ours)
            bindings.append(_Binding(self.stream, self.durable, None))
        for stream, subjects in foreign.items():
            self._log.info("nats.stream.reused", stream=stream, subjects=subjects)
            if len(subjects) == 1:
                bindings.append(_Binding(stream, self.durable, subjects[0]))
            else:  # nats-server 2.9 consumers filter on one subject: one consumer each
                bindings.extend(
                    _Binding(stream, f"{self.durable}_{i}", s) for i, s in enumerate(subjects)
                )
        return bindings

    async def _ensure_stream(self, js: Any, subjects: list[str]) -> None:
        config = StreamConfig(
            name=self.stream,
            subjects=subjects,
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_age=STREAM_MAX_AGE_SECONDS,
            duplicate_window=self.duplicate_window,
        )
        try:
            await js.add_stream(config)  # the same config again is a no-op: replicas may race
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code == ERR_SUBJECTS_OVERLAP:
                raise _overlap(self.stream, subjects) from exc
            if exc.err_code != ERR_STREAM_NAME_IN_USE:
                raise
        else:
            return
        # Ours already, configured differently (by an operator, or an older config): keep its
        # settings, and only add subjects it lacks.
        info = await js.stream_info(self.stream)
        existing = list(info.config.subjects or [])
        if not (missing := [s for s in subjects if s not in existing]):
            self._log.info("nats.stream.reused", stream=self.stream, subjects=existing)
            return
        try:
            await js.update_stream(info.config.evolve(subjects=existing + missing))
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code == ERR_SUBJECTS_OVERLAP:
                raise _overlap(self.stream, missing) from exc
            raise
        self._log.info("nats.stream.updated", stream=self.stream, added=missing)

    async def _ensure_consumer(self, js: Any, binding: _Binding) -> None:
        config = ConsumerConfig(
            durable_name=binding.durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            backoff=list(self.backoff) or None,
            max_ack_pending=self.max_ack_pending,
            filter_subject=binding.filter_subject,
        )
        try:
            await js.add_consumer(binding.stream, config)  # creates, or updates the durable
        except nats.js.errors.BadRequestError as exc:
            # e.g. a changed filter, which nats-server 2.9 cannot update: use the consumer as is.
            try:
                await js.consumer_info(binding.stream, binding.durable)
            except nats.js.errors.NotFoundError:
                raise exc from None
            self._log.warning(
                "nats.consumer.kept",
                stream=binding.stream,
                durable=binding.durable,
                error=exc.description,
            )

    async def _consume(self, binding: _Binding, sub: Any, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                msgs = await sub.fetch(batch=self.fetch_batch, timeout=self.fetch_timeout)
            except TimeoutError:  # nothing to do (nats.errors.TimeoutError is one too)
                failures = 0
                continue
            except nats.errors.ConnectionClosedError:
                self._log.warning("nats.intake.closed", stream=binding.stream)
                return
            except (nats.errors.Error, OSError) as exc:
                failures += 1
                await self._back_off(
                    stop, failures, "nats.fetch_failed", exc, stream=binding.stream
                )
                continue
            failures = 0
            try:
                await self._process(msgs)
            except Exception:  # a bug: what was not acked is redelivered after ack_wait
                self._log.exception("nats.process_crashed", stream=binding.stream)

    async def _back_off(
        self, stop: asyncio.Event, failures: int, event: str, exc: Exception, **where: Any
    ) -> None:
        """Log the failure, then wait 2, 4, 8, 16, 30, 30… seconds (unless ``stop`` is set)."""
        wait = min(2.0 ** min(failures, 5), _RETRY_CAP_SECONDS)
        self._log.warning(event, **where, error=described(exc), retry_in=wait)
        await sleep_unless(stop, wait)

    async def _process(self, msgs: list[Any]) -> None:
        valid = [(msg, d) for msg in msgs if (d := await self._parse(msg)) is not None]
        if valid:
            await self._hand_over(valid)

    async def _hand_over(self, valid: list[tuple[Any, Inbound]]) -> None:
        try:
            outcomes = await self.handle([d for _, d in valid])
        except Exception as exc:  # any failure: nothing acked; one alone is nak-ed with a delay
            if len(valid) == 1:
                await self._nak(valid[0][0], exc)
                return
            self._log.warning("nats.batch_failed", size=len(valid), error=described(exc))
            for item in valid:  # one at a time: a poison message must not sink its batch
                await self._hand_over([item])
            return
        await self._acked(valid, outcomes)

    async def _parse(self, msg: Any) -> Inbound | None:
        """The delivery, or None after terminating (malformed) or nak-ing (our bug) the message."""
        seq, delivered = _position(msg)
        try:
            delivery = inbound_from_message(msg.subject, msg.headers, msg.data)
        except IntakeError as exc:
            problems = exc.problems if isinstance(exc, PayloadRejected) else []
            self._log.warning(
                "nats.rejected",
                subject=msg.subject,
                stream_seq=seq,
                delivered=delivered,
                error=type(exc).__name__,
                fields=[p.loc for p in problems],
                problems=[str(p) for p in problems] or [str(exc)],
            )
            await self._settle(msg, "term")
            return None
        except Exception as exc:  # a parser bug: retry later, never term data
            self._log.exception("nats.parse_crashed", subject=msg.subject, stream_seq=seq)
            await self._nak(msg, exc)
            return None
        delivery.audit.update(nats_stream_seq=seq, nats_delivered=delivered)
        return delivery

    async def _acked(
        self, valid: list[tuple[Any, Inbound]], outcomes: Sequence[IntakeOutcome]
    ) -> None:
        """The handler committed: ack each message (a lost ack means a deduplicated redelivery)."""
        for (_, delivery), outcome in zip(valid, outcomes, strict=False):
            self._log.info(
                "nats.intake",
                key=outcome.key,
                result=outcome.result,
                ce_id=delivery.inbound_id,
                stream_seq=delivery.audit.get("nats_stream_seq"),
                delivered=delivery.audit.get("nats_delivered"),
            )
        await asyncio.gather(*(self._settle(msg, "ack") for msg, _ in valid))

    async def _nak(self, msg: Any, exc: BaseException) -> None:
        seq, delivered = _position(msg)
        steps = self.backoff or (self.ack_wait,)
        delay = steps[min(max(delivered, 1), len(steps)) - 1]
        self._log.warning(
            "nats.intake_failed",
            subject=msg.subject,
            stream_seq=seq,
            delivered=delivered,
            retry_in=delay,
            error=described(exc),
        )
        await self._settle(msg, "nak", delay)

    async def _settle(self, msg: Any, how: str, delay: float | None = None) -> None:
        try:
            if how == "ack":
                await msg.ack_sync(timeout=5.0)
            elif how == "term":
                await msg.term()
            else:
                await msg.nak(delay=delay)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            # Redelivered after ack_wait and settled then: the database dedupes, term repeats.
            self._log.warning(
                "nats.settle_failed",
                how=how,
                stream_seq=_position(msg)[0],
                error=described(exc),
            )

    async def _on_max_deliveries(self, msg: Any) -> None:
        self.max_deliveries_seen += 1
        try:
            advisory = json.loads(msg.data)
        except ValueError:
            advisory = {}
        self._log.error(
            "nats.max_deliveries",
            stream=advisory.get("stream"),
            consumer=advisory.get("consumer"),
            stream_seq=advisory.get("stream_seq"),
            deliveries=advisory.get("deliveries"),
            hint="JetStream stopped redelivering it; the message stays in the stream",
        )

    async def _on_disconnected(self) -> None:
        self._log.warning("nats.disconnected", url=self.url)

    async def _on_reconnected(self) -> None:
        self._log.info("nats.reconnected", url=self.url)


def _position(msg: Any) -> tuple[int | None, int]:
    try:
        meta = msg.metadata
    except (nats.errors.Error, ValueError, IndexError, AttributeError):
        return None, 1
    return int(meta.sequence.stream), int(meta.num_delivered)


def _overlap(stream: str, subjects: list[str]) -> RuntimeError:
    return RuntimeError(
        f"cannot provision JetStream stream {stream!r} for {subjects}: the subjects overlap "
        "with more than one existing stream; configure [nats] subjects that one stream covers"
    )

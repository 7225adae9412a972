"""SuperPipeline over NATS, out: the ``elicitation.answered`` document published on NATS."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import nats.errors
import nats.js.errors
import structlog

from adapters.sources.superpipeline.nats_client import connect, described, stream_of
from adapters.sources.superpipeline.sink import answered_document
from bot.domain.errors import PermanentDeliveryError, TransientDeliveryError
from bot.domain.ports import AnswerSink, PromptView

_NOT_A_TOKEN = frozenset(".*> \t\r\n")


class NatsAnswerPublisher:
    """Through JetStream when a stream covers the subject (``Nats-Msg-Id`` = idempotency key, so
    the stream dedupes a retry), else a flushed core publish. Connects on first use."""

    def __init__(self, url: str, answer_subject: str, *, timeout: float = 5.0) -> None:
        self.url = url
        self.answer_subject = answer_subject
        self.timeout = timeout
        self._nc: Any = None
        self._lock = asyncio.Lock()
        self._log = structlog.get_logger("elicitbot.nats")

    def subject_for(self, view: PromptView) -> str:
        """``answer_subject`` for the elicitation's workspace (``_`` when it has none)."""
        workspace = view.elicitation.workspace or "_"
        if any(c in _NOT_A_TOKEN for c in workspace):
            raise PermanentDeliveryError(f"workspace {workspace!r} is not one NATS subject token")
        return self.answer_subject.format(workspace=workspace)

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        subject = self.subject_for(view)
        body = json.dumps(
            answered_document(view, idempotency_key), ensure_ascii=False, separators=(",", ":")
        ).encode()
        headers = {"Nats-Msg-Id": idempotency_key, "Content-Type": "application/json"}
        nc = await self._connection()
        js = nc.jetstream(timeout=self.timeout)
        try:
            if (stream := await stream_of(js, subject)) is not None:
                ack = await js.publish(subject, body, headers=headers, stream=stream)
                mode, duplicate = "jetstream", bool(ack.duplicate)
            else:
                await nc.publish(subject, body, headers=headers)
                await nc.flush(timeout=self.timeout)
                mode, duplicate = "core", None
        except nats.js.errors.BadRequestError as exc:
            raise PermanentDeliveryError(
                f"JetStream refused the answer: {exc.description}"
            ) from exc
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            raise TransientDeliveryError(f"NATS publish failed: {described(exc)}") from exc
        self._log.info(
            "nats.answer.published",
            subject=subject,
            mode=mode,
            duplicate=duplicate,
            key=view.elicitation.key,
        )

    async def close(self) -> None:
        nc, self._nc = self._nc, None
        if nc is None or nc.is_closed:
            return
        with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
            await nc.drain()

    async def _connection(self) -> Any:
        async with self._lock:
            if self._nc is not None and not self._nc.is_closed:
                return self._nc
            try:
                self._nc = await connect(
                    self.url, name="elicitbot-answers", give_up_after=self.timeout
                )
            except (nats.errors.Error, OSError, TimeoutError) as exc:
                raise TransientDeliveryError(
                    f"NATS unreachable at {self.url}: {type(exc).__name__}"
                ) from exc
            return self._nc


class CompositeSink:
    """Sinks in order; the first to raise stops it, and the outbox retries all (each dedupes)."""

    def __init__(self, sinks: Sequence[AnswerSink]) -> None:
        self.sinks = tuple(sinks)

    async def deliver(self, view: PromptView, *, idempotency_key: str) -> None:
        for sink in self.sinks:
            await sink.deliver(view, idempotency_key=idempotency_key)

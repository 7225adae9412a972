"""``[sources.superpipeline]`` (where answers go back) and ``[nats]`` (the JetStream intake)."""

from __future__ import annotations

from pydantic import AnyHttpUrl

from adapters.shared.config import Section


class SuperPipelineConfig(Section):
    answer_webhook: AnyHttpUrl | None = None
    answer_subject: str = "evt.{workspace}.elicitbot.elicitation.answered"


class NatsConfig(Section):
    url: str = "nats://127.0.0.1:4222"
    subjects: tuple[str, ...] = ("evt.*.superpipeline.elicitation.pending",)
    durable: str = "elicitbot"

"""What a part of the running service is (chat adapter, sinks, routers, tasks, readiness), and
what every part's factory may use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import APIRouter, Request, Response
from prometheus_client.registry import CollectorRegistry

from adapters.matrix import MatrixChat, MatrixListener
from adapters.slack.chat import SlackChat
from adapters.slack.intake.socket import SlackSocket
from adapters.slack.listener import SlackInteractivity
from adapters.sources.superpipeline.nats import NatsAnswerPublisher, NatsIntake
from bot.app.config import AppConfig
from bot.domain.ports import AnswerSink, ChatAdapter, Clock, Elicitations
from bot.domain.store import Store
from bot.lease import LeaseKeeper

Task = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class Part:
    """What one optional part adds to the running service."""

    name: str
    chats: dict[str, ChatAdapter] = field(default_factory=dict)
    """Outbound chat by platform."""
    sinks: dict[str, AnswerSink] = field(default_factory=dict)
    """Write-backs by source."""
    routers: list[APIRouter] = field(default_factory=list)
    tasks: dict[str, Task] = field(default_factory=dict)
    """Background loops, run until the stop event is set."""
    ready: Callable[[], dict[str, bool]] = dict
    prepare: Callable[[], Awaitable[None]] | None = None
    """What must work before we listen (a token check); a ConfigError stops the start."""
    start: Callable[[], Awaitable[None]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None
    """Stops intake (before the outbox drains)."""
    close: Callable[[], Awaitable[None]] | None = None
    """Releases connections (after the outbox drained)."""


class Views:
    """What the parts built, kept for the operators' tools and the tests (None: not configured)."""

    slack: SlackChat | None = None
    slack_app: SlackInteractivity | None = None
    slack_socket: SlackSocket | None = None
    matrix: MatrixListener | None = None
    matrix_chat: MatrixChat | None = None
    nats_intake: NatsIntake | None = None
    nats_publisher: NatsAnswerPublisher | None = None


@dataclass
class Context:
    """What every factory may use."""

    config: AppConfig
    environ: Mapping[str, str]
    clock: Clock
    store: Store
    http_client: httpx.AsyncClient
    elicitations: Elicitations
    authorise: Callable[[Request], Response | None]
    learn_identities: Callable[[set[str]], None]
    """Add elicitbot's own identity keys on a platform (bots never answer)."""
    views: Views
    """Where a part leaves what it built for the operators' tools and the tests."""
    owner: str
    """This replica's identity: its outbox claims and its single-owner leases (bot.lease)."""
    registry: CollectorRegistry
    """What ``/metrics`` serves; routers register their metrics on it."""
    pinework_tokens: Mapping[str, str]
    """Each Pinework account's token, by :func:`account_key`."""


def lease_keeper(ctx: Context, name: str, work: Callable[[], Awaitable[None]]) -> LeaseKeeper:
    """Single-owner work: run only by the replica holding lease ``name`` (see bot.lease)."""
    return LeaseKeeper(ctx.store, name, work, clock=ctx.clock, holder=ctx.owner)

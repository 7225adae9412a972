"""What an accepted elicitation needs: which deliveries to make now, which wait, and its deadlines.

Pure: the store writes what this returns in the intake transaction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from bot.domain.model import Elicitation, Route


@dataclass(frozen=True)
class PlannedDelivery:
    destination: str
    position: int
    post_now: bool
    """False: it waits for the follow-up of the delivery before it."""


@dataclass(frozen=True)
class PlannedDeadline:
    kind: str
    """remind, escalate or expire (follow-ups are planned when a post is accepted)."""
    due_at: datetime


@dataclass(frozen=True)
class Plan:
    deliveries: tuple[PlannedDelivery, ...]
    deadlines: tuple[PlannedDeadline, ...]


def plan_deliveries(route: Route) -> tuple[PlannedDelivery, ...]:
    """With a follow-up only the first destination is posted now; without, every one is."""
    seen: set[str] = set()
    planned: list[PlannedDelivery] = []
    for destination in route.destinations:
        if destination in seen:
            continue
        seen.add(destination)
        first = not planned
        planned.append(
            PlannedDelivery(
                destination=destination,
                position=len(planned),
                post_now=first or route.followup_seconds == 0,
            )
        )
    return tuple(planned)


def plan_deadlines(e: Elicitation) -> tuple[PlannedDeadline, ...]:
    d = e.deadlines
    planned = [
        PlannedDeadline(kind, at)
        for kind, at in (
            ("remind", d.remind_at),
            ("escalate", d.escalate_at),
            ("expire", d.expires_at),
        )
        if at is not None
    ]
    return tuple(sorted(planned, key=lambda p: p.due_at))


def plan(e: Elicitation, route: Route) -> Plan:
    return Plan(deliveries=plan_deliveries(route), deadlines=plan_deadlines(e))


def display_hash(e: Elicitation) -> str:
    """A digest of what a person sees: when it changes, every delivered copy is updated."""
    canonical = json.dumps(e.display_fields(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()

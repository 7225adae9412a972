"""The Matrix people among a route's approvers by their display name in the room, for the refusal
that says who may decide (rule 9). An action waits for the names at most :data:`NAMES_WAIT`; a
name not read by then shows as the entry, and its read finishes in the background for the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from bot.domain.model import Elicitation
from bot.domain.ports import Elicitations
from bot.domain.routing import resolve_route

log = structlog.get_logger("elicitbot.matrix")

NAMES_WAIT = 1.0
"""Seconds an action waits for the approvers' names beside its power level."""

DisplayName = Callable[[str, str], Coroutine[Any, Any, str | None]]
"""A member's name in a room (room id, MXID): :meth:`RoomReads.display_name`."""


class ApproverNames:
    """The route's Matrix approvers by their name in a room (see the module)."""

    def __init__(
        self, display_name: DisplayName, elicitations: Elicitations, *, wait: float = NAMES_WAIT
    ) -> None:
        self.display_name = display_name
        self.elicitations = elicitations
        self.wait = wait
        self._reading: set[asyncio.Task[str | None]] = set()
        """Reads that outlived their action's wait, finishing for the next one."""

    async def names(self, room_id: str, e: Elicitation) -> dict[str, str]:
        """``matrix:@…`` approver entries of ``e``'s route -> their name in ``room_id``, as far
        as they are read within :attr:`wait`."""
        routes = await self.elicitations.routes()
        if not any(r.approvers for r in routes):
            return {}
        people = [a for a in resolve_route(routes, e).approvers or () if a.startswith("matrix:@")]
        if not people:
            return {}
        jobs: dict[str, asyncio.Task[str | None]] = {
            a: asyncio.create_task(self.display_name(room_id, a[len("matrix:") :])) for a in people
        }
        done, pending = await asyncio.wait(jobs.values(), timeout=self.wait)
        for job in pending:
            self._reading.add(job)
            job.add_done_callback(self._finished)
        return {
            entry: name
            for entry, job in jobs.items()
            if job in done and not job.cancelled() and job.exception() is None
            if (name := job.result())
        }

    def _finished(self, job: asyncio.Task[str | None]) -> None:
        self._reading.discard(job)
        if not job.cancelled() and (exc := job.exception()) is not None:
            log.info("matrix.name_unknown", error=type(exc).__name__)

"""Single-owner work under a lease (the Matrix sync, a Pinework poller, Slack Socket Mode): one
replica runs it, the others stand by and take over when its holder dies.

:class:`LeaseKeeper` takes or renews lease ``name`` every ``ttl / 3`` and runs the work only while
it holds it. The work is cancelled at once when another holder has it, and, when the store does
not answer, after two failed renewals: before our lease can run out, so no other replica takes
over while ours still runs (unless clocks differ by more than ``ttl / 3``). A standby retrying
every ``retry`` takes a dead holder's lease within ``ttl + retry`` (10 + 2 s by default, inside
the 15 s promised); an orderly stop releases it. Leases do not make work idempotent: it resumes
from durable state (sync token, cursor) and dedupes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

import structlog

from bot.domain.ports import Clock
from bot.domain.store import Leases

log = structlog.get_logger("elicitbot.lease")

DEFAULT_TTL = 10.0
"""Seconds a lease lasts unless renewed: how long a dead holder's work can stay unowned."""
RETRY_SECONDS = 2.0
"""How often a standby asks for a lease another replica holds."""


def owner_id() -> str:
    """A holder identity unique to one running process: host, pid and a random tail (a restarted
    process, or a reused pid, is a new holder and cannot renew its predecessor's lease)."""
    return f"{socket.gethostname()[:32]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


OWNER = owner_id()
"""This process's holder identity (the default of every LeaseKeeper)."""

Work = Callable[[], Awaitable[None]]
"""Makes the coroutine to run while the lease is ours (called again after each take-over)."""


class LeaseKeeper:
    """Holds lease ``name`` for ``holder`` and runs ``work`` only while it is held.

    ``await keeper.run(stop)`` (or ``async with keeper:``) loops until ``stop`` is set or
    :meth:`stop` is called; cancelling ``run`` is a crash: the work is cancelled and the lease is
    left to run out, as if the process had died.
    """

    def __init__(
        self,
        leases: Leases,
        name: str,
        work: Work,
        *,
        clock: Clock,
        holder: str = OWNER,
        ttl: float = DEFAULT_TTL,
        retry: float | None = None,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.leases = leases
        self.name = name
        self.holder = holder
        self.clock = clock
        self.ttl = timedelta(seconds=ttl)
        self.renew_every = ttl / 3
        self.retry = min(RETRY_SECONDS, self.renew_every) if retry is None else retry
        self.on_change = on_change
        self._work = work
        self.held = False
        """True while the lease is ours (and the work runs)."""
        self.standby = False
        """True while another replica holds the lease (for readiness: we wait, by design)."""
        self.takeovers = 0
        """How many times this keeper acquired the lease (for tests and logs)."""
        self._until: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._running = False
        self._ended = asyncio.Event()
        self._log = log.bind(lease=name, holder=holder)

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._runner = asyncio.create_task(self.run(), name=f"lease:{self.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
        if self._runner is not None:
            await self._runner

    async def stop(self) -> None:
        """Stop the work and release the lease (an orderly stop); waits for ``run`` to end."""
        self._stop.set()
        if self._running:
            await self._ended.wait()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Acquire, renew and run the work until ``stop`` is set or :meth:`stop` is called."""
        self._running = True
        self._ended.clear()
        stopping = asyncio.create_task(self._stopped(stop), name=f"lease-stop:{self.name}")
        orderly = False
        try:
            while not stopping.done():
                await self._step()
                await self._wait(stopping, self.renew_every if self.held else self.retry)
            orderly = True
        finally:
            stopping.cancel()
            try:
                await self._cancel_work()
                if orderly and self.held:
                    with contextlib.suppress(Exception):  # it runs out by itself if this fails
                        await self.leases.release_lease(self.name, self.holder)
                        self._log.info("lease.released")
            finally:
                self._set_held(held=False)
                self.standby = False
                self._running = False
                self._ended.set()

    async def _stopped(self, stop: asyncio.Event | None) -> None:
        if stop is None:
            await self._stop.wait()
            return
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _wait(self, stopping: asyncio.Task[None], seconds: float) -> None:
        """Sleep ``seconds``, waking early when asked to stop or when the work ends."""
        waits: set[asyncio.Future[None]] = {stopping}
        if self._task is not None:
            waits.add(self._task)
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)

    # -- one round ----------------------------------------------------------------------------

    async def _step(self) -> None:
        if await self._reap():
            return  # the next round (``retry`` seconds on) acquires and starts it again
        now = self.clock.now()
        try:
            # A store that hangs counts as down: waiting on it could outlast our lease.
            ours = await asyncio.wait_for(
                self.leases.acquire_lease(self.name, self.holder, now, self.ttl),
                timeout=self.renew_every,
            )
        except Exception as exc:  # the store is down: keep the work while the lease surely lasts
            self._log.warning("lease.renew_failed", error=str(exc) or type(exc).__name__)
            late = self.clock.now() + timedelta(seconds=self.renew_every)
            if self.held and self._until is not None and late >= self._until:
                await self._lose("the store did not renew it in time")
            return
        if not ours:
            self.standby = True
            if self.held:
                await self._lose("another replica holds it")
            return
        self.standby = False
        self._until = now + self.ttl
        if not self.held:
            self.takeovers += 1
            self._log.info("lease.acquired", ttl=self.ttl.total_seconds())
            self._set_held(held=True)
        if self._task is None:
            self._task = asyncio.create_task(self._run_work(), name=f"leased:{self.name}")

    async def _run_work(self) -> None:
        await self._work()

    async def _reap(self) -> bool:
        """The work ended by itself while we held the lease: log why, let the lease go (another
        replica may do better) and say so; the next round tries again."""
        task = self._task
        if task is None or not task.done():
            return False
        self._task = None
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._log.error("lease.work_failed", error=repr(error))
        else:
            self._log.warning("lease.work_ended")
        if self.held:
            with contextlib.suppress(Exception):
                await self.leases.release_lease(self.name, self.holder)
            self._set_held(held=False)
        return True

    async def _lose(self, why: str) -> None:
        self._log.warning("lease.lost", reason=why)
        await self._cancel_work()
        self._set_held(held=False)

    async def _cancel_work(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Ours ended as asked; re-raise only when ``run`` itself is being cancelled.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception as exc:  # the work failed while stopping: already on its way out
            self._log.error("lease.work_failed", error=repr(exc))

    def _set_held(self, *, held: bool) -> None:
        if held == self.held:
            return
        self.held = held
        if self.on_change is not None:
            self.on_change(held)

"""Slack user groups among a route's approvers (``slack:S…``, rule 9) read as the actor's
:class:`~bot.domain.policy.Standing`. The core judges; this reads only groups a route names.

Fail closed: a group not read counts as not a member and is named in ``Standing.unknown``. A 429
pauses until ``Retry-After``, ``missing_scope`` and token errors for :data:`PAUSE`. Logs name the
group and Slack's code, never the request (it carries the token).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog
from slack_sdk.errors import SlackApiError

from adapters.slack.api.cached import Entry, Failure, Lookups, Said
from adapters.slack.api.people import SlackNames
from adapters.slack.api.scopes import USERGROUPS_READ
from bot.domain.model import ElicitationKey, Identity
from bot.domain.policy import NO_STANDING, ApproverKind, Standing, parse_approver
from bot.domain.ports import Clock, Elicitations
from bot.domain.routing import resolve_route

log = structlog.get_logger("elicitbot.slack.groups")

_SLACK_USER = re.compile(r"^slack:[UW][A-Z0-9]+$")

SCOPE = USERGROUPS_READ
TTL = timedelta(seconds=60)
"""How long a group's member list is believed: short, since it decides who may approve."""
FAILURE_TTL = timedelta(seconds=10)
"""How long a failed lookup of one group is remembered."""
PAUSE = timedelta(minutes=5)
"""How long a missing scope or a refused token stops every lookup."""
LOOKUP_TIMEOUT = 2.0
"""Seconds a lookup may take: *Reply…* waits for it and must open its form within Slack's 3 s."""
NAMES_TTL = timedelta(hours=1)
"""How long the user groups' handles are used (words in a refusal, not who may decide)."""
NAMES_WAIT = 1.0
"""Seconds an action waits for the approvers' names; one not read by then is shown as its id,
and the lookup finishes for the next action."""


_SAID = Said(
    log,
    rate_limited="slack.usergroups_rate_limited",
    refused="slack.usergroups_refused",
    scope_missing="slack.usergroups_read_missing",
    scope=SCOPE,
    effect="nobody counts as a member of a Slack user group among the approvers",
)

_LIST_SAID = Said(
    log,
    rate_limited="slack.usergroup_names_rate_limited",
    refused="slack.usergroup_names_refused",
    scope_missing="slack.usergroup_names_scope_missing",
    scope=SCOPE,
    effect="a refusal names the Slack user groups among the approvers by id, not by handle",
)


class UsergroupsUsers(Protocol):
    """What :class:`SlackGroups` needs of ``slack_sdk``'s ``AsyncWebClient``."""

    async def usergroups_users_list(self, *, usergroup: str) -> Any: ...

    async def usergroups_list(self) -> Any: ...


def slack_groups(approvers: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(a for a in approvers or () if parse_approver(a).kind is ApproverKind.SLACK_GROUP)


class SlackGroups:
    """Members of Slack user groups by group id (``usergroups.users.list``), cached."""

    def __init__(
        self,
        client: UsergroupsUsers,
        *,
        clock: Clock | None = None,
        ttl: timedelta = TTL,
        failure_ttl: timedelta = FAILURE_TTL,
        timeout: float = LOOKUP_TIMEOUT,
    ) -> None:
        self.client = client
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self._cache: dict[str, Entry[frozenset[str] | None]] = {}  # None: nobody counts
        self._lookups: Lookups[frozenset[str] | None] = Lookups(
            _SAID, clock=clock, pause=PAUSE, timeout=timeout
        )
        self.clock = self._lookups.clock
        self._logged: set[str] = set()  # groups Slack does not know, logged once each
        self._handles: tuple[dict[str, str], datetime] | None = None  # by id, until when
        self._list: Lookups[dict[str, str]] = Lookups(
            _LIST_SAID, clock=self.clock, pause=PAUSE, timeout=timeout
        )

    async def standing(self, user: str, groups: Iterable[str]) -> Standing:
        """The ``slack:S…`` groups ``user`` is in, and those not read (``unknown``)."""
        keys = tuple(dict.fromkeys(groups))
        found = await asyncio.gather(*(self.members(k.removeprefix("slack:")) for k in keys))
        return Standing(
            groups=frozenset(k for k, m in zip(keys, found, strict=True) if m and user in m),
            unknown=frozenset(k for k, m in zip(keys, found, strict=True) if m is None),
        )

    async def handles(self) -> dict[str, str]:
        """``@handle`` (else name) by ``slack:S…`` key, cached for :data:`NAMES_TTL`; a failed read
        gives what was known before (the refusal then shows the id)."""
        now = self.clock.now()
        known = self._handles
        if known is not None and now < known[1]:
            return known[0]
        if self._list.paused(now):
            return known[0] if known is not None else {}
        return await self._list.shared("list", self._read_handles)

    async def _read_handles(self) -> dict[str, str]:
        before = self._handles[0] if self._handles is not None else {}
        try:
            async with asyncio.timeout(self._list.timeout):
                response = await self.client.usergroups_list()
        except SlackApiError as exc:
            failure, code, status = self._list.failed(exc)
            if failure is Failure.ONE:
                log.info("slack.usergroup_names_unknown", error=code, status=status)
            return self._keep_handles(before, self.failure_ttl)
        except Exception as exc:  # a timeout, the network, anything: the ids are shown
            log.info("slack.usergroup_names_unknown", error=type(exc).__name__)
            return self._keep_handles(before, self.failure_ttl)
        found = response.get("usergroups")
        named = {}
        for g in found if isinstance(found, list) else ():
            if not isinstance(g, dict) or not isinstance(g.get("id"), str):
                continue
            handle, name = g.get("handle"), g.get("name")
            if isinstance(handle, str) and handle.strip():
                named[f"slack:{g['id']}"] = f"@{handle.strip()}"
            elif isinstance(name, str) and name.strip():
                named[f"slack:{g['id']}"] = name.strip()
        return self._keep_handles(named, NAMES_TTL)

    def _keep_handles(self, named: dict[str, str], ttl: timedelta) -> dict[str, str]:
        self._handles = (named, self.clock.now() + ttl)
        return named

    async def members(self, group: str) -> frozenset[str] | None:
        """None: could not be read now."""
        now = self.clock.now()
        entry = self._cache.get(group)
        if entry is not None and now < entry.until:
            return entry.value
        if self._lookups.paused(now):
            return None
        return await self._lookups.shared(group, lambda: self._look_up(group))

    async def _look_up(self, group: str) -> frozenset[str] | None:
        try:
            async with asyncio.timeout(self._lookups.timeout):
                response = await self.client.usergroups_users_list(usergroup=group)
        except SlackApiError as exc:
            self._failed(group, exc)
            return None
        except Exception as exc:  # a timeout, the network, anything: fails closed, never raises
            log.info("slack.usergroup_unknown", usergroup=group, error=type(exc).__name__)
            return self._keep(group, None, self.failure_ttl)
        users = response.get("users")
        if not isinstance(users, list):
            log.info("slack.usergroup_unknown", usergroup=group, error="no_users")
            return self._keep(group, None, self.failure_ttl)
        return self._keep(group, frozenset(u for u in users if isinstance(u, str)), self.ttl)

    def _failed(self, group: str, exc: SlackApiError) -> None:
        failure, code, status = self._lookups.failed(exc)
        if failure is Failure.RATE_LIMITED:
            return
        if failure is Failure.APP:
            self._keep(group, None, PAUSE)
        elif code == "no_such_subteam":
            if group not in self._logged:
                self._logged.add(group)
                log.warning(
                    "slack.usergroup_not_found",
                    usergroup=group,
                    fix=f"a route's approvers name slack:{group}, which is no user group here",
                )
            self._keep(group, None, self.ttl)
        else:
            log.info("slack.usergroup_unknown", usergroup=group, error=code, status=status)
            self._keep(group, None, self.failure_ttl)

    def _keep(
        self, group: str, members: frozenset[str] | None, ttl: timedelta
    ) -> frozenset[str] | None:
        self._cache[group] = Entry(members, self.clock.now() + ttl)
        return members


class SlackStanding:
    """A Slack person's Standing on a question: the route's approver groups they are in, and
    the route's approvers by name for the refusal (:attr:`SlackHandling.standing`)."""

    def __init__(
        self,
        groups: SlackGroups,
        elicitations: Elicitations,
        names: SlackNames | None = None,
        *,
        names_wait: float = NAMES_WAIT,
    ) -> None:
        self.groups = groups
        self.elicitations = elicitations
        self.names = names
        self.names_wait = names_wait

    async def __call__(self, who: Identity, key: ElicitationKey) -> Standing:
        if who.platform != "slack" or who.is_bot:
            return NO_STANDING
        routes = await self.elicitations.routes()
        if not any(r.approvers for r in routes):
            return NO_STANDING  # nobody named anywhere: nothing to read
        view = await self.elicitations.view(key)
        if view is None:
            return NO_STANDING
        approvers = resolve_route(routes, view.elicitation).approvers
        if not approvers:
            return NO_STANDING
        named = slack_groups(approvers)
        standing, names = await asyncio.gather(
            self.groups.standing(who.user, named) if named else _no_standing(),
            self.named(approvers),
        )
        return replace(standing, names=names) if names else standing

    async def named(self, approvers: Sequence[str]) -> dict[str, str]:
        """The Slack entries among ``approvers`` by name, as far as read within ``names_wait``."""
        jobs: dict[str, asyncio.Task[Any]] = {}
        if self.names is not None:
            for entry in approvers:
                if _SLACK_USER.match(entry):
                    jobs[entry] = asyncio.create_task(self.names.name(entry[len("slack:") :]))
        if slack_groups(approvers):
            jobs[""] = asyncio.create_task(self.groups.handles())
        if not jobs:
            return {}
        await asyncio.wait(jobs.values(), timeout=self.names_wait)
        found: dict[str, str] = {}
        for entry, job in jobs.items():
            if not job.done():
                job.cancel()  # the shared lookup itself goes on and fills the cache
            elif not job.cancelled() and job.exception() is None and (result := job.result()):
                if entry:
                    found[entry] = result
                else:
                    found.update({g: h for g, h in result.items() if g in approvers})
        return found


async def _no_standing() -> Standing:
    return NO_STANDING


async def check_scope(scopes: frozenset[str] | None, elicitations: Elicitations) -> bool:
    """At start: log when a route names a ``slack:S…`` approver and the token's scopes (None:
    unknown) lack ``usergroups:read``. True: it is missing."""
    named = sorted({g for r in await elicitations.routes() for g in slack_groups(r.approvers)})
    if not named or scopes is None or SCOPE in scopes:
        return False
    log.warning(
        "slack.usergroups_read_missing",
        scope=SCOPE,
        usergroups=named,
        effect="nobody counts as a member of these approver groups: they are told it could not "
        "be checked",
        fix=f"add the bot scope {SCOPE} to the Slack app and reinstall it",
    )
    return True

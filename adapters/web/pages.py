"""The inbox's pages: their view models and the Jinja2 rendering. Autoescape is on for every
template and no value is marked safe here; no page has inline script or style, so the
Content-Security-Policy forbids both. A card (one elicitation) is built in :mod:`.cards`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2

from adapters.web.cards import CardView, Notice
from bot.domain.model import Elicitation, Identity
from bot.domain.policy import NO_STANDING, Standing
from bot.domain.records import AuditEntry, DeadlineView, DeliveryView, EffectView
from bot.domain.rules import format_time

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["utc"] = lambda when: "" if when is None else format_time(when)
_env.filters["iso"] = lambda when: "" if when is None else when.isoformat()
_env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Filters:
    workspace: str = ""
    board: str = ""
    source: str = ""
    status: str = ""
    """Empty: pending plus recent history."""

    def matches(self, e: Elicitation) -> bool:
        return (
            (not self.workspace or e.workspace == self.workspace)
            and (not self.board or self.board in (e.context.board_id, e.context.board_name))
            and (not self.source or e.source == self.source)
        )

    def query(self, **extra: str) -> str:
        """The filters (and ``extra``) as a query string, empty values left out."""
        pairs = {**asdict(self), **extra}
        return urlencode({k: v for k, v in pairs.items() if v})


@dataclass(frozen=True)
class FilterChoices:
    workspaces: tuple[str, ...] = ()
    boards: tuple[tuple[str, str], ...] = ()
    """(board id, shown name)."""
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class Viewer:
    identity: Identity
    admin: bool
    csrf: str
    standing: Standing = NO_STANDING
    """What the sign-in proxy says of them beyond their name: their groups."""

    @property
    def name(self) -> str:
        return self.identity.display_name or self.identity.user


@dataclass
class InboxPage:
    viewer: Viewer
    filters: Filters
    pending: list[CardView]
    history: list[CardView]
    version: str
    choices: FilterChoices = field(default_factory=FilterChoices)
    more: str | None = None
    """The query string of the next page, when there is one."""
    notice: Notice | None = None
    key: str = ""
    """One elicitation asked for by key (the full-text link); empty: the list."""

    @property
    def single(self) -> bool:
        return bool(self.key)

    @property
    def live_query(self) -> str:
        """What a live refresh asks for: the same filters (and key)."""
        return self.filters.query(key=self.key)


@dataclass(frozen=True)
class AdminRow:
    """One elicitation in the admin list."""

    key: str
    title: str
    status: str
    created_at: datetime
    deliveries: Sequence[DeliveryView]
    writeback: str = ""
    """Where the outcome stands upstream: ``sending``, ``accepted``, ``refused: <why>`` (empty
    while pending and never refused)."""


def filter_choices(items: Iterable[Elicitation]) -> FilterChoices:
    workspaces: set[str] = set()
    boards: dict[str, str] = {}
    sources: set[str] = set()
    for e in items:
        if e.workspace:
            workspaces.add(e.workspace)
        c = e.context
        board = c.board_id or c.board_name
        if board:
            name = c.board_name or board
            boards[board] = f"{name} ({c.board_id})" if c.board_id and c.board_name else name
        sources.add(e.source)
    return FilterChoices(
        tuple(sorted(workspaces)),
        tuple(sorted(boards.items(), key=lambda kv: kv[1].lower())),
        tuple(sorted(sources)),
    )


def _render(name: str, **values: Any) -> str:
    return _env.get_template(name).render(**values)


def render_inbox(page: InboxPage, assets: Mapping[str, str]) -> str:
    return _render("inbox.html", page=page, viewer=page.viewer, assets=assets)


def render_live(page: InboxPage) -> str:
    """The part of the inbox a live update replaces (cards keep their typed text client-side)."""
    return _render("live.html", page=page)


def render_admin(
    viewer: Viewer,
    assets: Mapping[str, str],
    *,
    routes: Sequence[str],
    filters: Filters,
    choices: FilterChoices,
    rows: Sequence[AdminRow],
) -> str:
    return _render(
        "admin.html",
        viewer=viewer,
        assets=assets,
        routes=routes,
        filters=filters,
        choices=choices,
        rows=rows,
    )


def render_admin_detail(
    viewer: Viewer,
    assets: Mapping[str, str],
    *,
    card: CardView,
    deliveries: Sequence[DeliveryView],
    deadlines: Sequence[DeadlineView],
    audit: Sequence[AuditEntry],
    outbox: Sequence[EffectView],
) -> str:
    return _render(
        "admin_detail.html",
        viewer=viewer,
        assets=assets,
        card=card,
        deliveries=deliveries,
        deadlines=deadlines,
        audit=audit,
        outbox=outbox,
    )


def render_problem(status: int, message: str, assets: Mapping[str, str]) -> str:
    return _render("problem.html", status=status, message=message, assets=assets)

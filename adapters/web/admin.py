"""The admin view (admins only): routes and elicitations, one elicitation's deliveries, deadlines,
outbox and audit log, and the audit log as JSON Lines."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.responses import StreamingResponse

from adapters.web import cards, pages
from adapters.web.pages import AdminRow
from adapters.web.reads import PAGE_LIMIT, RECENT_SCAN, Reads
from adapters.web.session import SECURITY_HEADERS, Session, filters_of
from bot.domain.ports import Elicitations
from bot.domain.records import AuditEntry, Writeback, WritebackState
from bot.domain.wording import title_of


class AdminRoutes:
    """``GET /admin``, ``/admin/elicitation?key=`` and ``/admin/audit.jsonl``."""

    def __init__(self, elicitations: Elicitations, reads: Reads, session: Session) -> None:
        self.elicitations = elicitations
        self.reads = reads
        self.session = session

    async def admin(self, request: Request) -> Response:
        found = self.session.viewer_of(request, admin_only=True)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        filters = filters_of(request)
        store = self.reads.store
        items, _ = await self.reads.scan(filters.status or None, filters, None, PAGE_LIMIT)
        recent = await store.list_elicitations(limit=RECENT_SCAN)
        rows = [
            AdminRow(
                key=s.elicitation.key,
                title=title_of(s.elicitation),
                status=s.status.value,
                created_at=s.created_at,
                deliveries=await store.deliveries(s.elicitation.key),
                writeback=writeback_text(s.writeback),
            )
            for s in items
        ]
        body = pages.render_admin(
            viewer,
            self.session.links,
            routes=await self.elicitations.routes_text(),
            filters=filters,
            choices=pages.filter_choices(s.elicitation for s in recent),
            rows=rows,
        )
        return self.session.html(body, cookie=viewer if fresh else None)

    async def detail(self, request: Request) -> Response:
        found = self.session.viewer_of(request, admin_only=True)
        if isinstance(found, Response):
            return found
        viewer, fresh = found
        stored = await self.reads.one(request.query_params.get("key", ""))
        if stored is None:
            return self.session.problem(404, "No such elicitation.")
        key = stored.elicitation.key
        store = self.reads.store
        body = pages.render_admin_detail(
            viewer,
            self.session.links,
            card=cards.card_view(await self.reads.view(stored)),
            deliveries=await store.deliveries(key),
            deadlines=await store.deadlines(key),
            audit=await store.audit(key),
            outbox=await store.outbox(key),
        )
        return self.session.html(body, cookie=viewer if fresh else None)

    async def audit_export(self, request: Request) -> Response:
        found = self.session.viewer_of(request, admin_only=True)
        if isinstance(found, Response):
            return found
        key = request.query_params.get("key", "")
        filters = filters_of(request)
        reads = self.reads

        async def lines() -> AsyncIterator[bytes]:
            if key:
                stored = await reads.one(key)
                keys = [stored.elicitation.key] if stored is not None else []
            else:
                everything = 10**9
                items, _ = await reads.scan(
                    filters.status or None, filters, None, everything, cap=everything
                )
                keys = [s.elicitation.key for s in items]
            for k in keys:
                for entry in await reads.store.audit(k):
                    yield (json.dumps(audit_json(k, entry), ensure_ascii=False) + "\n").encode()

        return StreamingResponse(
            lines(),
            media_type="application/jsonl; charset=utf-8",
            headers={
                **SECURITY_HEADERS,
                "Content-Disposition": 'attachment; filename="elicitbot-audit.jsonl"',
            },
        )


def audit_json(key: str, entry: AuditEntry) -> dict[str, Any]:
    """One line of the export (the same fields and order as ever)."""
    return {
        "id": entry.id,
        "elicitation": key,
        "at": entry.at.isoformat(),
        "action": entry.action,
        "actor": entry.actor,
        "code": entry.code,
        "detail": entry.detail,
    }


def writeback_text(wb: Writeback | None) -> str:
    """The admin list's word on the write-back: its state, and a refusal's reason."""
    if wb is None:
        return ""
    if wb.state is WritebackState.REFUSED:
        then = "reopened" if wb.reopened else "failed"
        return f"refused ({then}): {' '.join((wb.error or '').split())[:300]}"
    return wb.state.value

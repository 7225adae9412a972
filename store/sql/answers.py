"""Answers and other changes of one elicitation: the first answer wins once (fenced on the version
the judgement read), closes, refusals, claims, and the inbound ids of chat events.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, or_, select
from sqlalchemy.engine import Connection

from bot.domain import planning
from bot.domain.model import Answer, ElicitationKey, Status
from bot.domain.records import RecordResult
from store.sql.apply import Applier, Batch
from store.sql.base import ANSWER, NEW_AUDIT, E, audit_row, open_changed


class Answers(Applier):
    async def record_answer(
        self,
        key: ElicitationKey,
        answer: Answer,
        now: datetime,
        *,
        approving: bool,
        audit: dict[str, object],
        version: int | None = None,
    ) -> RecordResult:
        conditions = [or_(E.c.expires_at.is_(None), E.c.expires_at > now)]
        if version is not None:
            conditions.append(E.c.version == version)
        if approving:
            conditions.append(or_(E.c.subject_expires_at.is_(None), E.c.subject_expires_at > now))
        body = answer.model_dump(mode="json")

        def work(conn: Connection) -> RecordResult:
            answered = Status.ANSWERED.value
            if not open_changed(
                conn, key, now, *conditions, status=answered, answer=body, closed_at=now
            ):
                current = conn.execute(select(E.c.status, E.c.answer).where(E.c.key == key)).one()
                return RecordResult(
                    False,
                    Status(current.status),
                    Answer.model_validate(current.answer) if current.answer else None,
                )
            conn.execute(
                insert(ANSWER).values(
                    elicitation_key=key,
                    respondent=answer.respondent,
                    via=answer.via,
                    at=now,
                    body=body,
                )
            )
            batch = Batch()
            self._closed(conn, key, now, batch)
            batch.audit.append(audit_row(key, now, "answer", answer.respondent, None, audit))
            self._finish(conn, batch, now)
            return RecordResult(True, Status.ANSWERED, answer)

        return await self._run(work, write=True)

    async def close_elicitation(
        self,
        key: ElicitationKey,
        status: Status,
        now: datetime,
        *,
        answer: Answer | None,
        audit: dict[str, object],
    ) -> bool:
        """Expire or cancel a pending elicitation (a system decision may come with an answer)."""
        writes = planning.close_writes(status, answer, audit)

        def work(conn: Connection) -> bool:
            return self._write(conn, key, writes, now)

        return await self._run(work, write=True)

    async def record_refusal(
        self,
        key: ElicitationKey,
        actor: str,
        code: str,
        now: datetime,
        detail: dict[str, object],
        *,
        once: bool = False,
    ) -> bool:
        """An audit row for a refused attempt; ``once``: and the ``refusal_told`` row that makes
        it told once (``INSERT … ON CONFLICT DO NOTHING``: the first of two racing replicas
        inserts it, the other learns it was told). True: to be told."""

        def work(conn: Connection) -> bool:
            first = True
            if once:
                told = {"elicitation_key": key, "actor": actor, "code": code, "at": now}
                first = conn.execute(self._new_told, told).first() is not None
            said = detail if first else {**detail, "repeat": True}
            conn.execute(NEW_AUDIT, audit_row(key, now, "refusal", actor, code, said))
            return first

        return await self._run(work, write=True)

    async def claim(
        self, key: ElicitationKey, by: str, name: str | None, until: datetime, now: datetime
    ) -> bool:
        """Record "I'm on it" on a pending elicitation (renewing or taking over a claim): every
        copy is updated, and a ``claim_lapse`` deadline updates them again when it runs out.
        False when it is no longer pending."""
        writes = planning.claim_writes(by, until)

        def work(conn: Connection) -> bool:
            if not open_changed(conn, key, now, claim_by=by, claim_name=name, claim_until=until):
                return False
            self._write(conn, key, writes, now)
            return True

        return await self._run(work, write=True)

    async def first_time(self, channel: str, inbound_id: str, now: datetime) -> bool:

        def work(conn: Connection) -> bool:
            row = conn.execute(
                self._new_inbound,
                {
                    "channel": channel,
                    "inbound_id": inbound_id,
                    "elicitation_key": None,
                    "received_at": now,
                },
            ).first()
            return row is not None

        return await self._run(work, write=True)

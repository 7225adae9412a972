"""lanes and first attempts on the outbox; shared pacing, single-owner leases, raw chat events

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import store.tables

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = store.tables.UtcDateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lane", sa.String(length=320), nullable=False, server_default="")
        )
        batch_op.add_column(sa.Column("first_attempt_at", TS, nullable=True))
        batch_op.create_index("ix_outbox_lane", ["lane", "state"], unique=False)
    # Rows queued before lanes existed: the same rule as bot.domain.lanes.lane_of.
    op.execute(
        "UPDATE outbox SET lane = CASE WHEN kind = 'writeback' "
        "THEN 'sink:' || substr(elicitation_key, 1, instr(elicitation_key, ':') - 1) "
        "ELSE 'chat:' || target END"
        if op.get_bind().dialect.name == "sqlite"
        else "UPDATE outbox SET lane = CASE WHEN kind = 'writeback' "
        "THEN 'sink:' || split_part(elicitation_key, ':', 1) ELSE 'chat:' || target END"
    )
    op.create_table(
        "pace",
        sa.Column("key", sa.String(length=400), primary_key=True),
        sa.Column("not_before", TS, nullable=False),
    )
    op.create_table(
        "lease",
        sa.Column("name", sa.String(length=200), primary_key=True),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("until", TS, nullable=False),
        sa.Column("since", TS, nullable=False),
    )
    op.create_table(
        "raw_event",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("channel", sa.String(length=40), nullable=False),
        sa.Column("dedupe_key", sa.String(length=400), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("received_at", TS, nullable=False),
        sa.Column("handled_at", TS, nullable=True),
        sa.UniqueConstraint("channel", "dedupe_key", name="uq_raw_event"),
    )
    op.create_index("ix_raw_event_open", "raw_event", ["channel", "handled_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_raw_event_open", table_name="raw_event")
    op.drop_table("raw_event")
    op.drop_table("lease")
    op.drop_table("pace")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_lane")
        batch_op.drop_column("first_attempt_at")
        batch_op.drop_column("lane")

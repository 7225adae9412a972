"""deadlines: the "I'm on it" claim, an escalation copy's detail, outbox rows by delivery

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import store.tables

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("elicitation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claim_by", sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column("claim_name", sa.String(length=200), nullable=True))
        batch_op.add_column(
            sa.Column("claim_until", store.tables.UtcDateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("detail", sa.JSON(), nullable=True))
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_delivery", ["delivery_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_delivery")
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.drop_column("detail")
    with op.batch_alter_table("elicitation", schema=None) as batch_op:
        batch_op.drop_column("claim_until")
        batch_op.drop_column("claim_name")
        batch_op.drop_column("claim_by")

"""delivery.ref_key: find the elicitation of a message people react to or reply under

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ref_key", sa.String(length=300), nullable=True))
        batch_op.create_index(batch_op.f("ix_delivery_ref_key"), ["ref_key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("delivery", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_delivery_ref_key"))
        batch_op.drop_column("ref_key")

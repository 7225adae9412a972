"""where an elicitation's outcome stands upstream (sending, accepted, refused)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("elicitation", schema=None) as batch_op:
        batch_op.add_column(sa.Column("writeback", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("elicitation", schema=None) as batch_op:
        batch_op.drop_column("writeback")

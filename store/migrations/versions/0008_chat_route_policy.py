"""who may decide a chat-made route's questions (``subscribe … approvers … quorum …``)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: the defaults (anyone but the asker decides), what every route made before had.
    op.add_column("chat_route", sa.Column("policy", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chat_route") as batch:
        batch.drop_column("policy")

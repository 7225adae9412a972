"""the Matrix device's end-to-end crypto state (nio's store, pickled), one row per user+device

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import store.tables

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "matrix_crypto",
        sa.Column("owner", sa.String(length=400), primary_key=True),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column("updated_at", store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("matrix_crypto")

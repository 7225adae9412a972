"""refusals told once per question and person (answer rule 9's "only the approvers")

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import store.tables

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "refusal_told",
        sa.Column("elicitation_key", sa.String(length=400), primary_key=True),
        sa.Column("actor", sa.String(length=300), primary_key=True),
        sa.Column("code", sa.String(length=40), primary_key=True),
        sa.Column("at", store.tables.UtcDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("refusal_told")

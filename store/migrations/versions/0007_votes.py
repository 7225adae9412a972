"""votes toward a route's quorum (answer rule 9), one per person, revision and digest

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import store.tables

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "vote",
        sa.Column("elicitation_key", sa.String(length=400), primary_key=True),
        sa.Column("person", sa.String(length=300), primary_key=True),
        sa.Column("revision", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("digest", sa.String(length=200), primary_key=True),
        sa.Column("respondent", sa.String(length=300), nullable=False),
        sa.Column("display_name", sa.String(length=300), nullable=True),
        sa.Column("option_id", sa.String(length=300), nullable=False),
        sa.Column("via", sa.String(length=300), nullable=False),
        sa.Column("at", store.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("needed", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("vote")

"""A partial index on open interruption cases (the reconciler lists them every pass)

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_interruption_cases_open",
        "interruption_cases",
        ["interrupted_at"],
        sqlite_where=sa.text("state = 'open'"),
        postgresql_where=sa.text("state = 'open'"),
    )


def downgrade() -> None:
    op.drop_index("ix_interruption_cases_open", table_name="interruption_cases")

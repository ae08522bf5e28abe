"""An index on operations.attempt_id (admission reads one interrupted attempt's effect facts)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_operations_attempt", "operations", ["attempt_id"])


def downgrade() -> None:
    op.drop_index("ix_operations_attempt", table_name="operations")

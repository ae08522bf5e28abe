"""tasks.published_at: when a TASK's dispatch message was last published

The dispatcher sweep publishes a TASK again when it is still unclaimed in inbox long after its
last publish, so that a lost message (a broker that lost its data, a worker that died between
receiving and claiming) never strands it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "published_at",
                surehand.store.column_types.UTCDateTime(timezone=True),
                nullable=True,
            )
        )
        batch_op.create_index("ix_tasks_inbox_published_at", ["bucket", "published_at"])


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_inbox_published_at")
        batch_op.drop_column("published_at")

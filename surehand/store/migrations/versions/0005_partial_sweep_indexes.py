"""The dispatcher sweep's two indexes hold only the rows it looks for

``ix_tasks_unpublished`` keeps unpublished TASKs only, ``ix_tasks_inbox_published_at`` inbox
TASKs only. A claim (inbox -> active) and a settle (active -> review/done) move their TASK out
of both, so the session's two updates no longer write entries into them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_UNPUBLISHED = sa.column("published", sa.Boolean()).is_(False)
_IN_INBOX = sa.column("bucket", sa.String()) == sa.literal_column("'inbox'")


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_unpublished")
        batch_op.drop_index("ix_tasks_inbox_published_at")
        batch_op.create_index(
            "ix_tasks_unpublished",
            ["bucket"],
            sqlite_where=_UNPUBLISHED,
            postgresql_where=_UNPUBLISHED,
        )
        batch_op.create_index(
            "ix_tasks_inbox_published_at",
            ["published_at"],
            sqlite_where=_IN_INBOX,
            postgresql_where=_IN_INBOX,
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_unpublished")
        batch_op.drop_index("ix_tasks_inbox_published_at")
        batch_op.create_index("ix_tasks_unpublished", ["bucket", "published"])
        batch_op.create_index("ix_tasks_inbox_published_at", ["bucket", "published_at"])

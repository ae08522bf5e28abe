"""outbox: the TASKs whose session message is still to be published (transactional outbox)

write_task inserts a row in the transaction that creates the TASK; a publisher drains the
table in batches after the commit (``DELETE ... RETURNING``, each row claimed by one
publisher), so an HTTP create no longer publishes to the broker on the request path. A row
left behind by a crash between the commit and the publish is drained by the next publisher
to start; the dispatcher sweep still publishes any unpublished TASK in ``inbox``.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", surehand.store.column_types.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_outbox_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )


def downgrade() -> None:
    op.drop_table("outbox")

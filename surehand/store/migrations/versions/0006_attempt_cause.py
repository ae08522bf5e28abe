"""Attempts record why they ended; ``interrupted`` is an attempt state; the safety net's index

``attempts.cause`` says why an attempt ended (``returned``, ``agent_failed``, or an
interruption: ``store_unavailable``, ``lease_lost``, ...); NULL while running and on rows
written before this revision (read as the cause their state implies). ``interrupted`` is the
state of an attempt whose session could not record or renew and stopped without settling.
``ix_tasks_active_unheld`` holds only active TASKs without a hold: the reconciler's safety net
reads it on every pass.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_OLD_STATES = "'running', 'succeeded', 'failed', 'lease_lost', 'SESSION_LOST'"
_STATES = f"{_OLD_STATES}, 'interrupted'"
_CAUSES = (
    "'returned', 'agent_failed', 'not_started', 'store_unavailable', 'redis_unavailable', "
    "'lease_lost', 'session_lost'"
)
_ACTIVE_UNHELD = sa.and_(
    sa.column("bucket", sa.String()) == sa.literal_column("'active'"),
    sa.column("hold_case_id", sa.String()).is_(None),
)


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cause", sa.String(length=32), nullable=True))
        batch_op.drop_constraint(op.f("ck_attempts_state"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_state"), f"state IN ({_STATES})")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_CAUSES})")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index(
            "ix_tasks_active_unheld",
            ["epoch"],
            sqlite_where=_ACTIVE_UNHELD,
            postgresql_where=_ACTIVE_UNHELD,
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_active_unheld")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.drop_constraint(op.f("ck_attempts_state"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_state"), f"state IN ({_OLD_STATES})")
        batch_op.drop_column("cause")

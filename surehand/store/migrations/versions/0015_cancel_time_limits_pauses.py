"""Cancel requests, time limits per TASK, and paused roles

Running unattended (issue 32): ``tasks.cancel_requested_at/_by`` and ``cancel_reason`` hold a
cancel request durably (set once, compare-and-set; workers read it at each renewal of the stop
watch, the store stays the truth); ``tasks.time_limit_seconds`` is a TASK's own time limit
(NULL: the role's default, if any). ``role_pauses`` holds one row per paused (tenant, role):
no session of that role starts while it exists. ``cancel_requested`` is a new kind of history
event (the check constraint on ``task_events.kind`` lists it).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_OLD_KINDS = (
    "'transition', 'published', 'claim_refused', 'attempt_started', 'attempt_finished', "
    "'stale_owner_fenced', 'session_lost', 'admission', 'hold', 'hold_released', 'review', "
    "'report', 'dispatch_failed'"
)
_KINDS = f"{_OLD_KINDS}, 'cancel_requested'"


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("time_limit_seconds", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "cancel_requested_at",
                surehand.store.column_types.UTCDateTime(timezone=True),
                nullable=True,
            )
        )
        batch_op.add_column(sa.Column("cancel_requested_by", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("cancel_reason", sa.Text(), nullable=True))
    op.create_table(
        "role_pauses",
        sa.Column("tenant", sa.String(255), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("paused_by", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "paused_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.PrimaryKeyConstraint("tenant", "role", name=op.f("pk_role_pauses")),
    )
    _kinds(_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM task_events WHERE kind = 'cancel_requested'")
    _kinds(_OLD_KINDS)
    op.drop_table("role_pauses")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("cancel_reason")
        batch_op.drop_column("cancel_requested_by")
        batch_op.drop_column("cancel_requested_at")
        batch_op.drop_column("time_limit_seconds")


def _kinds(allowed: str) -> None:
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_task_events_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_task_events_kind"), f"kind IN ({allowed})")

"""tasks.dispatch_error and dispatch_error_at: a TASK that cannot be dispatched is marked

A TASK whose publish fails in a way a retry would repeat (a role code the queue refuses, a
publisher error other than the retryable PublishFailed) is marked instead of failing the
dispatcher sweep: the sweep skips it until a back-off passes, `surehand up` retries it on
start, a successful publish clears it, and `surehand tasks`/`show`/`check` report it.
``ix_tasks_undispatchable`` holds only the marked rows. ``dispatch_failed`` is a new kind of
history event (the check constraint on ``task_events.kind`` lists it).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_UNDISPATCHABLE = sa.column("dispatch_error", sa.Text()).isnot(None)
_OLD_KINDS = (
    "'transition', 'published', 'claim_refused', 'attempt_started', 'attempt_finished', "
    "'stale_owner_fenced', 'session_lost', 'admission', 'hold', 'hold_released', 'review', "
    "'report'"
)
_KINDS = f"{_OLD_KINDS}, 'dispatch_failed'"


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("dispatch_error", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column(
                "dispatch_error_at",
                surehand.store.column_types.UTCDateTime(timezone=True),
                nullable=True,
            )
        )
        batch_op.create_index(
            "ix_tasks_undispatchable",
            ["dispatch_error_at"],
            sqlite_where=_UNDISPATCHABLE,
            postgresql_where=_UNDISPATCHABLE,
        )
    _kinds(_KINDS)


def downgrade() -> None:
    _kinds(_OLD_KINDS)
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_undispatchable")
        batch_op.drop_column("dispatch_error_at")
        batch_op.drop_column("dispatch_error")


def _kinds(allowed: str) -> None:
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_task_events_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_task_events_kind"), f"kind IN ({allowed})")

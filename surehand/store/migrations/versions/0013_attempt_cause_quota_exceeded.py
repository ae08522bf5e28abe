"""Attempts may end with cause ``quota_exceeded``: the program went over its disk quota

A command agent's session may add at most ``SUREHAND_AGENT_DISK_MIB`` and
``SUREHAND_AGENT_DISK_FILES`` to its directory, outputs and worktree. One found over is
stopped and its attempt ends ``interrupted`` with this cause, through admission like any
interruption.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_OLD_CAUSES = (
    "'returned', 'agent_failed', 'not_started', 'store_unavailable', 'redis_unavailable', "
    "'lease_lost', 'session_lost', 'session_error'"
)
_CAUSES = f"{_OLD_CAUSES}, 'quota_exceeded'"


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_CAUSES})")


def downgrade() -> None:
    op.execute("UPDATE attempts SET cause = 'session_error' WHERE cause = 'quota_exceeded'")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_OLD_CAUSES})")

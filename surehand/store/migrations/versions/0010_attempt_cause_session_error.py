"""Attempts may end with cause ``session_error``: surehand's own session code failed

An error in the session's own code (not the agent's, not the store's or Redis's) used to leave
its attempt ``running`` without a lease, for the reconciler to re-run again and again. It now
ends the attempt ``interrupted`` with this cause, through admission like any interruption.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_OLD_CAUSES = (
    "'returned', 'agent_failed', 'not_started', 'store_unavailable', 'redis_unavailable', "
    "'lease_lost', 'session_lost'"
)
_CAUSES = f"{_OLD_CAUSES}, 'session_error'"


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_CAUSES})")


def downgrade() -> None:
    op.execute("UPDATE attempts SET cause = 'agent_failed' WHERE cause = 'session_error'")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_OLD_CAUSES})")

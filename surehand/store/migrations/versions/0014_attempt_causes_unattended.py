"""Attempts may end with cause ``cancelled``, ``timed_out`` or ``budget_spent``

Running unattended: a person (or a cascade) cancels a TASK and its running session is
stopped; a TASK's time limit runs out; an LLM agent spends its TASK's budget. Each stops the
session, and its attempt ends *interrupted* with this cause, through admission like any
interruption.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_OLD_CAUSES = (
    "'returned', 'agent_failed', 'not_started', 'store_unavailable', 'redis_unavailable', "
    "'lease_lost', 'session_lost', 'session_error', 'quota_exceeded'"
)
_CAUSES = f"{_OLD_CAUSES}, 'cancelled', 'timed_out', 'budget_spent'"


def upgrade() -> None:
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_CAUSES})")


def downgrade() -> None:
    op.execute(
        "UPDATE attempts SET cause = 'session_error' "
        "WHERE cause IN ('cancelled', 'timed_out', 'budget_spent')"
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_attempts_cause"), type_="check")
        batch_op.create_check_constraint(op.f("ck_attempts_cause"), f"cause IN ({_OLD_CAUSES})")

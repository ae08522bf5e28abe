"""Running unattended: retry schedules, output tails, costs and budgets

- ``interruption_cases.retry_at``: when a ``reexecute`` decided by a role's retry policy may
  start (its backoff). Stored, not slept: the reconciler publishes the successor once it is due
  and a claim before it is refused.
- ``attempts.details``: what the worker saw of an attempt besides its error, JSON: the tails of
  the agent's output (stdout, stderr, a CLI's final result message), the CLI's own accounting
  (tokens by kind, model, cost) and how its effects were observed (``python``, ``journaled``,
  ``declared``; none: not observed). NULL for rows written before.
- ``tasks.budget_microusd``: what a TASK may spend (millionths of a USD, exact) on an LLM agent across its attempts (NULL: the
  role's default, or no budget); an approver may raise it: ``budget_raised``, a new kind of
  history event (the check constraint on ``task_events.kind`` lists it).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_OLD_KINDS = (
    "'transition', 'published', 'claim_refused', 'attempt_started', 'attempt_finished', "
    "'stale_owner_fenced', 'session_lost', 'admission', 'hold', 'hold_released', 'review', "
    "'report', 'dispatch_failed', 'cancel_requested'"
)
_KINDS = f"{_OLD_KINDS}, 'budget_raised'"


def _kinds(allowed: str) -> None:
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_task_events_kind"), type_="check")
        batch_op.create_check_constraint(op.f("ck_task_events_kind"), f"kind IN ({allowed})")


def upgrade() -> None:
    with op.batch_alter_table("interruption_cases", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column(
                "retry_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
            )
        )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("details", sa.JSON(), nullable=True))
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("budget_microusd", sa.BigInteger(), nullable=True))
    _kinds(_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM task_events WHERE kind = 'budget_raised'")
    _kinds(_OLD_KINDS)
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("budget_microusd")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("details")
    with op.batch_alter_table("interruption_cases", schema=None) as batch_op:
        batch_op.drop_column("retry_at")

"""task_dependencies: a TASK's depends_on as rows, so that a claim can refuse a TASK whose
dependencies are not all done and a move to done can find the dependants it releases; and
ix_tasks_parent, the children a parent delegated

Existing TASKs' ``depends_on`` are copied in (the ids that name a TASK; unknown ids were never
checked before this revision and are left out).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_dependencies",
        sa.Column("dependency_id", sa.String(length=32), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(
            ["dependency_id"],
            ["tasks.task_id"],
            name=op.f("fk_task_dependencies_dependency_id_tasks"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_task_dependencies_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("dependency_id", "task_id", name=op.f("pk_task_dependencies")),
    )
    op.create_index(
        op.f("ix_task_dependencies_task"), "task_dependencies", ["task_id"], unique=False
    )
    op.create_index(op.f("ix_tasks_parent"), "tasks", ["tenant", "parent"], unique=False)
    _copy_existing()


def _copy_existing() -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT task_id, depends_on FROM tasks")).all()
    known = {row.task_id for row in rows}
    pairs: set[tuple[str, str]] = set()
    for row in rows:
        value = row.depends_on
        names = json.loads(value) if isinstance(value, str) else (value or [])
        pairs.update((d, row.task_id) for d in names if d in known and d != row.task_id)
    if pairs:
        connection.execute(
            sa.text("INSERT INTO task_dependencies (dependency_id, task_id) VALUES (:d, :t)"),
            [{"d": d, "t": t} for d, t in sorted(pairs)],
        )


def downgrade() -> None:
    op.drop_index(op.f("ix_tasks_parent"), table_name="tasks")
    op.drop_index(op.f("ix_task_dependencies_task"), table_name="task_dependencies")
    op.drop_table("task_dependencies")

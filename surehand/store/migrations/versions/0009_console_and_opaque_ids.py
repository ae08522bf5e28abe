"""The operators' console and ids that reveal no volume

* ``task_events.principal``: the name of the principal (API token) whose call wrote the event,
  beside its role in ``by`` -- with two PM tokens, the audit tells who decided.
* ``reports.seq``: REPORT numbers are now shown permuted like TASK numbers (one counter for all
  tenants showed every tenant the deployment's REPORT volume); the day's counter value they
  come from orders REPORTs written at one instant and is never shown.
* ``counters`` row ``(ROWIDS, -)``: the key that permutes operation and event ids as shown
  (``surehand/store/opaque.py``); the database's own autoincrement stays internal.
  Operation ids held by attempts and cases (``bound_operation_id``) are stored as shown
  (BIGINT now); the ones recorded before are rewritten so. Ids inside history events' data
  stay as they were shown when written.
* ``ix_tasks_board`` and ``ix_tasks_recipient_board`` replace ``ix_tasks_tenant_bucket``: the
  board counts and pages every bucket from an index, with or without a recipient.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

from surehand.store import numbering

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

ROWIDS = {"kind": "ROWIDS", "day": "-"}
SPAN = 10**15 - 1  # surehand/store/opaque.py
BOUND = ("attempts", "interruption_cases")


def _counters() -> sa.TableClause:
    return sa.table(
        "counters", sa.column("kind"), sa.column("day"), sa.column("last"), sa.column("secret")
    )


def upgrade() -> None:
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("principal", sa.String(length=64), nullable=True))
    with op.batch_alter_table("reports", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_tenant_bucket")
        batch_op.create_index(
            "ix_tasks_board", ["tenant", "bucket", "created_at", "task_id"], unique=False
        )
        batch_op.create_index(
            "ix_tasks_recipient_board",
            ["tenant", "recipient", "bucket", "created_at", "task_id"],
            unique=False,
        )
    secret = secrets.token_hex(16)
    op.get_bind().execute(sa.insert(_counters()).values(**ROWIDS, last=0, secret=secret))
    for name in BOUND:
        with op.batch_alter_table(name, schema=None) as batch_op:
            batch_op.alter_column(
                "bound_operation_id", existing_type=sa.Integer(), type_=sa.BigInteger()
            )
        _rewrite(name, lambda value: 1 + numbering.permute(value - 1, SPAN, secret))


def _rewrite(name: str, change: Callable[[int], int]) -> None:
    """Rewrite every ``bound_operation_id`` of table ``name`` (few rows: admitted repeats)."""
    table = sa.table(name, sa.column("bound_operation_id"))
    connection = op.get_bind()
    found = connection.execute(
        sa.select(table.c.bound_operation_id)
        .where(table.c.bound_operation_id.isnot(None))
        .distinct()
    ).scalars()
    moves = {int(value): change(int(value)) for value in found}
    # Through a temporary negative value: a new value may equal an old one not yet rewritten.
    for old in moves:
        connection.execute(
            sa.update(table)
            .where(table.c.bound_operation_id == old)
            .values(bound_operation_id=-old)
        )
    for old, new in moves.items():
        connection.execute(
            sa.update(table)
            .where(table.c.bound_operation_id == -old)
            .values(bound_operation_id=new)
        )


def downgrade() -> None:
    counters = _counters()
    secret = (
        op.get_bind()
        .execute(
            sa.select(counters.c.secret).where(
                counters.c.kind == ROWIDS["kind"], counters.c.day == ROWIDS["day"]
            )
        )
        .scalar_one()
    )
    for name in BOUND:
        _rewrite(name, lambda value: 1 + numbering.unpermute(value - 1, SPAN, secret))
        with op.batch_alter_table(name, schema=None) as batch_op:
            batch_op.alter_column(
                "bound_operation_id", existing_type=sa.BigInteger(), type_=sa.Integer()
            )
    op.get_bind().execute(
        sa.delete(counters).where(
            counters.c.kind == ROWIDS["kind"], counters.c.day == ROWIDS["day"]
        )
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_recipient_board")
        batch_op.drop_index("ix_tasks_board")
        batch_op.create_index("ix_tasks_tenant_bucket", ["tenant", "bucket"], unique=False)
    with op.batch_alter_table("reports", schema=None) as batch_op:
        batch_op.drop_column("seq")
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_column("principal")

"""counters.secret: TASK numbers are shown permuted under a per-day key

One counter for all tenants numbered TASKs 001, 002, ...: every tenant could read the whole
deployment's daily volume off its own ids. The counter stays (one global key, never reused);
the id now shows a keyed permutation of the counter value (surehand/store/numbering.py), and
the key lives in the day's counter row: set by the allocation that creates the row.

Existing data: issued ids are never renamed -- they are in receipts' stored results, FCoP
documents, Celery messages, lease keys, case ids and the callers' own records, and their
volume is already known to whoever saw them. Rows counted before this migration keep a NULL
key, which continues their day sequentially, so no id of that day can be handed out twice;
every later day is permuted.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("counters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("secret", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # A keyed day's ids are spread over every number with as many digits as its counter: the
    # sequential counter of the old code continues past the largest of them, never into them.
    counters = sa.table(
        "counters", sa.column("kind"), sa.column("day"), sa.column("last"), sa.column("secret")
    )
    connection = op.get_bind()
    keyed = connection.execute(
        sa.select(counters.c.kind, counters.c.day, counters.c.last).where(
            counters.c.secret.isnot(None)
        )
    ).all()
    for kind, day, last in keyed:
        past = 10 ** max(3, len(str(last))) - 1
        connection.execute(
            sa.update(counters)
            .where(counters.c.kind == kind, counters.c.day == day)
            .values(last=past)
        )
    with op.batch_alter_table("counters", schema=None) as batch_op:
        batch_op.drop_column("secret")

"""receipts: only ``committed`` remains; the stages ``reserved`` and ``task_created`` retire

Every writer commits the receipt with its TASK in one transaction (one statement on Postgres),
so no version of surehand left a receipt short of ``committed`` durably; only tests, or a
database restored from elsewhere, could hold one. Such rows are converted so that they stay
readable by code that knows only ``committed``:

* a ``reserved`` or ``task_created`` receipt whose TASK exists (the TASK row at its task_id in
  its tenant, created for its client_submission_id) becomes ``committed``: its result is the
  one ``write_task`` stores for a create (disposition ``created``, receipt_state
  ``committed``, the inbox task_path the receipt holds, its digests), and its document digest
  is that of the TASK's stored document;
* one whose TASK does not exist -- or whose task_id holds another submission's TASK -- is
  deleted: nothing was created for it and no caller was ever answered with it (every answer
  other than a conflict was given from a committed receipt), so a retry creates the TASK anew,
  under a new number.

Then the table keeps only what a committed receipt needs: ``holder``, ``held_until`` and the
(state, updated_at) index of the stalled-receipt scans are dropped, ``document_digest`` and
``result`` become NOT NULL (every committed receipt was written with both), and the state's
CHECK allows only ``committed``. A downgrade restores the columns (NULL), the index and the
three-state CHECK; the rows, all committed, stay as they are.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import hashlib
from typing import Any

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_RECEIPTS = sa.table(
    "receipts",
    sa.column("id", sa.BigInteger()),
    sa.column("tenant", sa.String()),
    sa.column("client_submission_id", sa.String()),
    sa.column("digest_schema_version", sa.String()),
    sa.column("request_digest", sa.String()),
    sa.column("task_id", sa.String()),
    sa.column("task_path", sa.String()),
    sa.column("state", sa.String()),
    sa.column("holder", sa.String()),
    sa.column("held_until", sa.DateTime()),
    sa.column("document_digest", sa.String()),
    sa.column("result", sa.JSON()),
)
_TASKS = sa.table(
    "tasks",
    sa.column("task_id", sa.String()),
    sa.column("tenant", sa.String()),
    sa.column("client_submission_id", sa.String()),
    sa.column("document", sa.Text()),
)
_OLD_STATES = "'reserved', 'task_created', 'committed'"


def upgrade() -> None:
    _convert_stages()
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.drop_index("ix_receipts_state_updated")
        batch_op.drop_column("holder")
        batch_op.drop_column("held_until")
        batch_op.alter_column("document_digest", existing_type=sa.String(64), nullable=False)
        batch_op.alter_column("result", existing_type=sa.JSON(), nullable=False)
        batch_op.drop_constraint(op.f("ck_receipts_state"), type_="check")
        batch_op.create_check_constraint(op.f("ck_receipts_state"), "state IN ('committed')")


def _convert_stages() -> None:
    r, t = _RECEIPTS.c, _TASKS.c
    connection = op.get_bind()
    found = connection.execute(
        sa.select(_RECEIPTS, t.document)
        .select_from(
            _RECEIPTS.outerjoin(
                _TASKS,
                sa.and_(
                    t.task_id == r.task_id,
                    t.tenant == r.tenant,
                    t.client_submission_id == r.client_submission_id,
                ),
            )
        )
        .where(r.state != "committed")
    ).all()
    for row in found:
        if row.document is None:
            connection.execute(sa.delete(_RECEIPTS).where(r.id == row.id))
            continue
        connection.execute(
            sa.update(_RECEIPTS)
            .where(r.id == row.id)
            .values(
                state="committed",
                holder=None,
                held_until=None,
                document_digest=hashlib.sha256(row.document.encode("utf-8")).hexdigest(),
                result=_result(row),
            )
        )


def _result(row: Any) -> dict[str, Any]:
    """The result ``task_creation.write_result`` builds for a create, as ``to_dict`` stores it."""
    return {
        "disposition": "created",
        "action_taken": True,
        "task_id": row.task_id,
        "task_path": row.task_path,
        "client_submission_id": row.client_submission_id,
        "request_digest": row.request_digest,
        "digest_schema_version": row.digest_schema_version,
        "receipt_state": "committed",
        "idempotent": True,
        "conflict": None,
    }


def downgrade() -> None:
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_receipts_state"), type_="check")
        batch_op.create_check_constraint(op.f("ck_receipts_state"), f"state IN ({_OLD_STATES})")
        batch_op.alter_column("result", existing_type=sa.JSON(), nullable=True)
        batch_op.alter_column("document_digest", existing_type=sa.String(64), nullable=True)
        batch_op.add_column(
            sa.Column(
                "held_until", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
            )
        )
        batch_op.add_column(sa.Column("holder", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_receipts_state_updated", ["state", "updated_at"], unique=False)

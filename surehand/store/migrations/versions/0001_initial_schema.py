"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30 03:28:26.168135
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import surehand.store.column_types

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "counters",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("day", sa.String(length=8), nullable=False),
        sa.Column("last", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "day", name=op.f("pk_counters")),
    )
    op.create_table(
        "receipts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("client_submission_id", sa.String(length=255), nullable=False),
        sa.Column("digest_schema_version", sa.String(length=32), nullable=False),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("task_path", sa.String(length=512), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=True),
        sa.Column(
            "held_until", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("document_digest", sa.String(length=64), nullable=True),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column(
            "created_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "updated_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.CheckConstraint(
            "state IN ('reserved', 'task_created', 'committed')", name=op.f("ck_receipts_state")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_receipts")),
        sa.UniqueConstraint("task_id", name="uq_receipts_task_id"),
        sa.UniqueConstraint("tenant", "client_submission_id", name="uq_receipts_submission"),
    )
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.create_index("ix_receipts_state_updated", ["state", "updated_at"], unique=False)

    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("sender", sa.String(length=32), nullable=False),
        sa.Column("recipient", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=512), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("priority", sa.String(length=2), nullable=False),
        sa.Column("thread_key", sa.String(length=255), nullable=False),
        sa.Column("parent", sa.String(length=32), nullable=False),
        sa.Column("references", sa.JSON(), nullable=False),
        sa.Column("depends_on", sa.JSON(), nullable=False),
        sa.Column("risk_level", sa.String(length=16), nullable=False),
        sa.Column("bucket", sa.String(length=16), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rework_round", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("hold_case_id", sa.String(length=64), nullable=True),
        sa.Column("hold_reason", sa.Text(), nullable=True),
        sa.Column("client_submission_id", sa.String(length=255), nullable=True),
        sa.Column("request_digest", sa.String(length=64), nullable=False),
        sa.Column("digest_schema_version", sa.String(length=32), nullable=False),
        sa.Column("idempotent", sa.Boolean(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("document_digest", sa.String(length=64), nullable=False),
        sa.Column("published", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column(
            "created_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "updated_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.CheckConstraint(
            "bucket IN ('inbox', 'active', 'review', 'done', 'archive')",
            name=op.f("ck_tasks_bucket"),
        ),
        sa.CheckConstraint("priority IN ('P0', 'P1', 'P2', 'P3')", name=op.f("ck_tasks_priority")),
        sa.CheckConstraint(
            "risk_level IN ('low', 'medium', 'high', 'irreversible')",
            name=op.f("ck_tasks_risk_level"),
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_tasks")),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_tenant_bucket", ["tenant", "bucket"], unique=False)
        batch_op.create_index("ix_tasks_unpublished", ["bucket", "published"], unique=False)

    op.create_table(
        "attempts",
        sa.Column("attempt_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("worker", sa.String(length=255), nullable=False),
        sa.Column("lease_id", sa.String(length=64), nullable=False),
        sa.Column("agent_returned", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("bound_operation_id", sa.Integer(), nullable=True),
        sa.Column("case_id", sa.String(length=64), nullable=True),
        sa.Column(
            "lease_missing_since",
            surehand.store.column_types.UTCDateTime(timezone=True),
            nullable=True,
        ),
        sa.Column(
            "started_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "ended_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.CheckConstraint(
            "state IN ('running', 'succeeded', 'failed', 'lease_lost', 'SESSION_LOST')",
            name=op.f("ck_attempts_state"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_attempts_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("attempt_id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("task_id", "number", name="uq_attempts_task_number"),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_attempts_running",
            ["state"],
            unique=False,
            sqlite_where=sa.text("state = 'running'"),
            postgresql_where=sa.text("state = 'running'"),
        )

    op.create_table(
        "interruption_cases",
        sa.Column("case_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("interrupted_attempt_id", sa.String(length=64), nullable=False),
        sa.Column("interrupted_epoch", sa.Integer(), nullable=False),
        sa.Column("prior_lease_id", sa.String(length=64), nullable=False),
        sa.Column(
            "interrupted_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column("revision_at_interruption", sa.Integer(), nullable=False),
        sa.Column("revision_at_evaluation", sa.Integer(), nullable=True),
        sa.Column("effect_fact", sa.String(length=16), nullable=True),
        sa.Column("effect_refs", sa.JSON(), nullable=False),
        sa.Column("admission", sa.String(length=16), nullable=True),
        sa.Column(
            "decided_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.Column("decided_by", sa.String(length=64), nullable=True),
        sa.Column("successor_attempt_id", sa.String(length=64), nullable=True),
        sa.Column("bound_operation_id", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("review", sa.JSON(), nullable=True),
        sa.CheckConstraint(
            "state IN ('open', 'resolved')", name=op.f("ck_interruption_cases_state")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_interruption_cases_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("case_id", name=op.f("pk_interruption_cases")),
        sa.UniqueConstraint("interrupted_attempt_id", name="uq_interruption_cases_attempt"),
    )
    with op.batch_alter_table("interruption_cases", schema=None) as batch_op:
        batch_op.create_index("ix_interruption_cases_task", ["task_id"], unique=False)

    op.create_table(
        "reports",
        sa.Column("report_id", sa.String(length=32), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("reporter", sa.String(length=32), nullable=False),
        sa.Column("recipient", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("client_submission_id", sa.String(length=255), nullable=True),
        sa.Column("rework_round", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("supersedes", sa.String(length=32), nullable=True),
        sa.Column("attempt_id", sa.String(length=64), nullable=True),
        sa.Column(
            "created_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.CheckConstraint(
            "status IN ('done', 'in_progress', 'blocked', 'aborted')",
            name=op.f("ck_reports_status"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_reports_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("report_id", name=op.f("pk_reports")),
        sa.UniqueConstraint(
            "task_id", "reporter", "recipient", "status", "revision", name="uq_reports_revision"
        ),
        sa.UniqueConstraint(
            "task_id",
            "reporter",
            "recipient",
            "status",
            "rework_round",
            "body_hash",
            name="uq_reports_content",
        ),
    )
    with op.batch_alter_table("reports", schema=None) as batch_op:
        batch_op.create_index(
            "uq_reports_submission",
            ["task_id", "reporter", "recipient", "status", "client_submission_id"],
            unique=True,
            sqlite_where=sa.text("client_submission_id IS NOT NULL"),
            postgresql_where=sa.text("client_submission_id IS NOT NULL"),
        )

    op.create_table(
        "task_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("by", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=True),
        sa.Column("from_bucket", sa.String(length=16), nullable=True),
        sa.Column("to_bucket", sa.String(length=16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("attempt_id", sa.String(length=64), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.CheckConstraint(
            "kind IN ('transition', 'published', 'claim_refused', 'attempt_started', 'attempt_finished', 'stale_owner_fenced', 'session_lost', 'admission', 'hold', 'hold_released', 'review', 'report')",
            name=op.f("ck_task_events_kind"),
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_task_events_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_events")),
    )
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.create_index("ix_task_events_task", ["task_id", "id"], unique=False)

    op.create_table(
        "operations",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("attempt_id", sa.String(length=64), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=24), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("retry_policy", sa.String(length=16), nullable=False),
        sa.Column("probe", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("outcome", sa.JSON(), nullable=True),
        sa.Column("external_receipt", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "started_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "settled_at", surehand.store.column_types.UTCDateTime(timezone=True), nullable=True
        ),
        sa.CheckConstraint(
            "retry_policy IN ('none', 'keyed')", name=op.f("ck_operations_retry_policy")
        ),
        sa.CheckConstraint(
            "state IN ('intent', 'succeeded', 'failed')", name=op.f("ck_operations_state")
        ),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.attempt_id"], name=op.f("fk_operations_attempt_id_attempts")
        ),
        sa.ForeignKeyConstraint(
            ["task_id"], ["tasks.task_id"], name=op.f("fk_operations_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
    )
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.create_index(
            "ix_operations_task_fingerprint", ["task_id", "fingerprint"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("operations", schema=None) as batch_op:
        batch_op.drop_index("ix_operations_task_fingerprint")

    op.drop_table("operations")
    with op.batch_alter_table("task_events", schema=None) as batch_op:
        batch_op.drop_index("ix_task_events_task")

    op.drop_table("task_events")
    with op.batch_alter_table("reports", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_reports_submission",
            sqlite_where=sa.text("client_submission_id IS NOT NULL"),
            postgresql_where=sa.text("client_submission_id IS NOT NULL"),
        )

    op.drop_table("reports")
    with op.batch_alter_table("interruption_cases", schema=None) as batch_op:
        batch_op.drop_index("ix_interruption_cases_task")

    op.drop_table("interruption_cases")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_attempts_running",
            sqlite_where=sa.text("state = 'running'"),
            postgresql_where=sa.text("state = 'running'"),
        )

    op.drop_table("attempts")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_unpublished")
        batch_op.drop_index("ix_tasks_tenant_bucket")

    op.drop_table("tasks")
    with op.batch_alter_table("receipts", schema=None) as batch_op:
        batch_op.drop_index("ix_receipts_state_updated")

    op.drop_table("receipts")
    op.drop_table("counters")

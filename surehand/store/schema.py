"""SQLAlchemy Core schema: the tables and their indexes. Enum columns carry CHECK constraints
mirroring ``surehand.model`` (how columns hold values: :mod:`.column_types`).

Invariants live here, not in Python: one receipt per (tenant, client_submission_id), one attempt
number per task, one interruption case per lost attempt, one REPORT per dedupe key.

The fencing *epoch* (:mod:`surehand.store.fence`) is one number kept under three column names,
which predate the word and are not renamed (renaming a column needs a migration, and
``number`` and ``interrupted_epoch`` are also fields every door returns): ``tasks.epoch`` (the
TASK's current epoch), ``attempts.number`` (an attempt's number *is* its epoch),
``interruption_cases.interrupted_epoch`` (the epoch of the attempt the case is about), and
``epoch`` on ``operations`` and ``task_events`` (the epoch a row was written under).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from surehand import model
from surehand.store.column_types import NAMING, enum_check, timestamp

metadata = MetaData(naming_convention=NAMING)


counters = Table(
    "counters",
    metadata,
    Column("kind", String(16), primary_key=True),
    Column("day", String(8), primary_key=True),
    Column("last", Integer, nullable=False),
    # The key that permutes the day's numbers (store/numbering.py); NULL: shown as counted.
    Column("secret", String(64)),
)

receipts = Table(
    "receipts",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("tenant", String(255), nullable=False),
    Column("client_submission_id", String(255), nullable=False),
    Column("digest_schema_version", String(32), nullable=False),
    Column("request_digest", String(64), nullable=False),
    Column("task_id", String(32), nullable=False),
    Column("task_path", String(512), nullable=False),
    # Always 'committed' (migration 0019 retired the stages before it).
    Column("state", String(16), nullable=False),
    Column("document_digest", String(64), nullable=False),
    Column("result", JSON, nullable=False),
    timestamp("created_at"),
    timestamp("updated_at"),
    UniqueConstraint("tenant", "client_submission_id", name="uq_receipts_submission"),
    UniqueConstraint("task_id", name="uq_receipts_task_id"),
    enum_check("state", model.ReceiptState, "state"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("task_id", String(32), primary_key=True),
    Column("tenant", String(255), nullable=False),
    Column("sender", String(32), nullable=False),
    Column("recipient", String(32), nullable=False),
    Column("subject", String(512), nullable=False),
    Column("body", Text, nullable=False),
    Column("priority", String(2), nullable=False),
    Column("thread_key", String(255), nullable=False),
    Column("parent", String(32), nullable=False),
    Column("references", JSON, nullable=False),
    Column("depends_on", JSON, nullable=False),
    Column("risk_level", String(16), nullable=False),
    Column("bucket", String(16), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("epoch", Integer, nullable=False, server_default=text("0")),
    Column("rework_round", Integer, nullable=False, server_default=text("0")),
    Column("hold_case_id", String(64)),
    Column("hold_reason", Text),
    Column("client_submission_id", String(255)),
    Column("request_digest", String(64), nullable=False),
    Column("digest_schema_version", String(32), nullable=False),
    Column("idempotent", Boolean, nullable=False),
    Column("document", Text, nullable=False),
    Column("document_digest", String(64), nullable=False),
    Column("published", Boolean, nullable=False, server_default=text("false")),
    timestamp("published_at", nullable=True),  # last publish; a TASK still in inbox long after it
    # is published again (a lost message must not strand it; duplicates are harmless)
    timestamp("created_at"),
    timestamp("updated_at"),
    # Set when publishing this TASK failed in a way a retry would repeat (a role code the queue
    # refuses, a publisher error other than PublishFailed); the sweep skips it until the
    # back-off passes or a restart retries it, and a successful publish clears it.
    Column("dispatch_error", Text),
    timestamp("dispatch_error_at", nullable=True),
    # The TASK's own time limit per attempt (NULL: its role's default, if any; migration 0015).
    Column("time_limit_seconds", Integer),
    # A cancel request, set once (compare-and-set): when, by which role, why. The store is the
    # truth a worker's stop watch reads; the principal is in the cancel_requested event.
    timestamp("cancel_requested_at", nullable=True),
    Column("cancel_requested_by", String(64)),
    Column("cancel_reason", Text),
    # What its LLM agents may spend across attempts, in millionths of a USD (exact; NULL: the
    # role's default).
    Column("budget_microusd", BigInteger),
    enum_check("bucket", model.Bucket, "bucket"),
    enum_check("priority", model.Priority, "priority"),
    enum_check("risk_level", model.RiskLevel, "risk_level"),
)
# The console's board and lists (store/listing.py): newest first per bucket, paged by keyset on
# (created_at, task_id), counted by bucket -- with or without a recipient -- from the index alone.
Index("ix_tasks_board", tasks.c.tenant, tasks.c.bucket, tasks.c.created_at, tasks.c.task_id)
Index(
    "ix_tasks_recipient_board",
    tasks.c.tenant,
    tasks.c.recipient,
    tasks.c.bucket,
    tasks.c.created_at,
    tasks.c.task_id,
)
# The dispatcher sweep's indexes hold only the rows it looks for (unpublished TASKs; inbox TASKs
# by publish time). A claim or a settle moves its TASK out of both, so it updates neither.
_UNPUBLISHED = tasks.c.published.is_(False)
_IN_INBOX = tasks.c.bucket == model.Bucket.INBOX.value
Index(
    "ix_tasks_unpublished",
    tasks.c.bucket,
    sqlite_where=_UNPUBLISHED,
    postgresql_where=_UNPUBLISHED,
)
Index(
    "ix_tasks_inbox_published_at",
    tasks.c.published_at,
    sqlite_where=_IN_INBOX,
    postgresql_where=_IN_INBOX,
)
# The reconciler's safety net looks for TASKs in active without a hold whose last attempt
# ended without a case: this index holds only active, unheld TASKs (work in flight), so a pass
# costs O(TASKs in flight), not O(all TASKs).
_ACTIVE_UNHELD = (tasks.c.bucket == model.Bucket.ACTIVE.value) & tasks.c.hold_case_id.is_(None)
Index(
    "ix_tasks_active_unheld",
    tasks.c.epoch,
    sqlite_where=_ACTIVE_UNHELD,
    postgresql_where=_ACTIVE_UNHELD,
)
# Undispatchable TASKs only (normally none): `surehand check`, the sweep's retry and the
# metric read them without touching the other rows.
_UNDISPATCHABLE = tasks.c.dispatch_error.isnot(None)
Index(
    "ix_tasks_undispatchable",
    tasks.c.dispatch_error_at,
    sqlite_where=_UNDISPATCHABLE,
    postgresql_where=_UNDISPATCHABLE,
)

# Paused roles, per tenant: no session of a paused role starts (the claim refuses it and the
# TASK waits in inbox, published again on resume); running sessions continue.
role_pauses = Table(
    "role_pauses",
    metadata,
    Column("tenant", String(255), primary_key=True),
    Column("role", String(32), primary_key=True),
    Column("paused_by", String(64), nullable=False),
    Column("principal", String(64)),
    Column("reason", Text, nullable=False),
    timestamp("paused_at"),
)
# A TASK's ``depends_on``, one row per dependency, written with the TASK (the JSON column
# stays the FCoP field). The claim looks up a TASK's own rows (``ix_task_dependencies_task``);
# a move to done looks up the dependants it may release (the primary key leads with
# ``dependency_id``).
task_dependencies = Table(
    "task_dependencies",
    metadata,
    Column("dependency_id", String(32), ForeignKey("tasks.task_id"), primary_key=True),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), primary_key=True),
)
Index("ix_task_dependencies_task", task_dependencies.c.task_id)
# A parent's children (delegation): the successor's brief lists them.
Index("ix_tasks_parent", tasks.c.tenant, tasks.c.parent)

task_events = Table(
    "task_events",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    timestamp("at"),
    Column("kind", String(32), nullable=False),
    Column("by", String(64), nullable=False),
    # The name of the principal (API token) whose call wrote the event; NULL for the runtime's
    # own events and for events written before migration 0009.
    Column("principal", String(64)),
    Column("action", String(32)),
    Column("from_bucket", String(16)),
    Column("to_bucket", String(16)),
    Column("reason", Text),
    Column("attempt_id", String(64)),
    Column("epoch", Integer),
    Column("data", JSON, nullable=False),
    enum_check("kind", model.EventKind, "kind"),
)
Index("ix_task_events_task", task_events.c.task_id, task_events.c.id)

# The transactional outbox: one row per TASK whose run_session message is still to be
# published, written in the creating transaction. A publisher deletes rows as it claims them
# (each row by one publisher); the dispatcher sweep covers a publisher that died after its claim.
outbox = Table(
    "outbox",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    timestamp("created_at"),
)

reports = Table(
    "reports",
    metadata,
    Column("report_id", String(32), primary_key=True),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    Column("tenant", String(255), nullable=False),
    Column("reporter", String(32), nullable=False),
    Column("recipient", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("body", Text, nullable=False),
    Column("body_hash", String(64), nullable=False),
    Column("client_submission_id", String(255)),
    Column("rework_round", Integer, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("supersedes", String(32)),
    Column("attempt_id", String(64)),
    timestamp("created_at"),
    # The day's counter value behind the (permuted) REPORT number: orders REPORTs written at
    # one instant; never shown. NULL before migration 0009, whose numbers were sequential.
    Column("seq", BigInteger),
    enum_check("status", model.ReportStatus, "status"),
    UniqueConstraint(
        "task_id",
        "reporter",
        "recipient",
        "status",
        "rework_round",
        "body_hash",
        name="uq_reports_content",
    ),
    UniqueConstraint(
        "task_id", "reporter", "recipient", "status", "revision", name="uq_reports_revision"
    ),
)
Index(
    "uq_reports_submission",
    reports.c.task_id,
    reports.c.reporter,
    reports.c.recipient,
    reports.c.status,
    reports.c.client_submission_id,
    unique=True,
    sqlite_where=reports.c.client_submission_id.isnot(None),
    postgresql_where=reports.c.client_submission_id.isnot(None),
)

attempts = Table(
    "attempts",
    metadata,
    Column("attempt_id", String(64), primary_key=True),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("worker", String(255), nullable=False),
    Column("lease_id", String(64), nullable=False),
    Column("agent_returned", Boolean, nullable=False, server_default=text("false")),
    Column("result", JSON),
    Column("error", Text),
    Column("bound_operation_id", BigInteger),  # as shown (store/opaque.py)
    Column("case_id", String(64)),  # the interruption case that admitted this successor
    timestamp("lease_missing_since", nullable=True),  # reconciler: first pass that found no lease
    timestamp("started_at"),
    timestamp("ended_at", nullable=True),
    Column("cause", String(32)),  # why it ended (model.AttemptCause); NULL while running
    Column("details", JSON),  # output tails, the CLI's accounting, how effects were observed
    UniqueConstraint("task_id", "number", name="uq_attempts_task_number"),
    enum_check("state", model.AttemptState, "state"),
    enum_check("cause", model.AttemptCause, "cause"),
)
# The reconciler's scan: cost proportional to running attempts, not to all tasks.
Index(
    "ix_attempts_running",
    attempts.c.state,
    sqlite_where=attempts.c.state == "running",
    postgresql_where=attempts.c.state == "running",
)

operations = Table(
    "operations",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    Column("attempt_id", String(64), ForeignKey("attempts.attempt_id"), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("name", String(255), nullable=False),
    Column("fingerprint", String(24), nullable=False),
    Column("args", JSON, nullable=False),
    Column("idempotency_key", String(255)),
    Column("retry_policy", String(16), nullable=False),
    Column("probe", String(255)),
    Column("state", String(16), nullable=False),
    Column("outcome", JSON),
    Column("external_receipt", Text),
    Column("error", Text),
    timestamp("started_at"),
    timestamp("settled_at", nullable=True),
    # The open declared effects a journaled call ran within (operation ids), not fingerprinted.
    Column("declared_within", JSON),
    # The arguments of the probe the effect names (the remote and ref of a git.push).
    Column("probe_args", JSON),
    enum_check("state", model.OperationState, "state"),
    enum_check("retry_policy", model.RetryPolicy, "retry_policy"),
)
Index("ix_operations_task_fingerprint", operations.c.task_id, operations.c.fingerprint)
Index("ix_operations_attempt", operations.c.attempt_id)  # admission reads one attempt's facts

interruption_cases = Table(
    "interruption_cases",
    metadata,
    Column("case_id", String(64), primary_key=True),
    Column("task_id", String(32), ForeignKey("tasks.task_id"), nullable=False),
    Column("interrupted_attempt_id", String(64), nullable=False),
    Column("interrupted_epoch", Integer, nullable=False),
    Column("prior_lease_id", String(64), nullable=False),
    timestamp("interrupted_at"),
    Column("revision_at_interruption", Integer, nullable=False),
    Column("revision_at_evaluation", Integer),
    Column("effect_fact", String(16)),
    Column("effect_refs", JSON, nullable=False),
    Column("admission", String(16)),
    timestamp("decided_at", nullable=True),
    Column("decided_by", String(64)),
    Column("successor_attempt_id", String(64)),
    Column("bound_operation_id", BigInteger),  # as shown (store/opaque.py)
    Column("state", String(16), nullable=False),
    Column("review", JSON),
    timestamp("retry_at", nullable=True),  # a retry policy's reexecute starts no sooner than this
    UniqueConstraint("interrupted_attempt_id", name="uq_interruption_cases_attempt"),
    enum_check("state", model.CaseState, "state"),
)
Index("ix_interruption_cases_task", interruption_cases.c.task_id)
# The reconciler lists open cases every pass: a partial index keeps that O(open cases).
Index(
    "ix_interruption_cases_open",
    interruption_cases.c.interrupted_at,
    sqlite_where=interruption_cases.c.state == "open",
    postgresql_where=interruption_cases.c.state == "open",
)

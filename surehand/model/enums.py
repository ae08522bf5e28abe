"""Enums shared by every layer. Values are the strings stored in the database (mirrored
there by CHECK constraints) and returned in JSON; never rename or delete a value, mark it
legacy instead."""

from __future__ import annotations

import enum

DIGEST_SCHEMA_VERSION = "write-task-v1"
SYSTEM = "SYSTEM"  # the runtime's own actor; reserved, never a caller's role
ADMIN = "ADMIN"
PM = "PM"


class Bucket(enum.StrEnum):
    """The lifecycle position of a TASK: exactly five."""

    INBOX = "inbox"
    ACTIVE = "active"
    REVIEW = "review"
    DONE = "done"
    ARCHIVE = "archive"


class Priority(enum.StrEnum):
    P0 = "P0"
    P1 = "P1"
    P2 = "P2"
    P3 = "P3"


class RiskLevel(enum.StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    IRREVERSIBLE = "irreversible"


class ReceiptState(enum.StrEnum):
    """A receipt is written ``committed``, with the TASK, in one transaction: the stages
    ``reserved`` and ``task_created`` of earlier versions never existed durably and migration
    0019 retired the rows a test or a restore may have left in them."""

    COMMITTED = "committed"


class Disposition(enum.StrEnum):
    CREATED = "created"
    REUSED = "reused"
    CONFLICT = "conflict"


class ConflictCode(enum.StrEnum):
    """Why write_task refused. This version answers only the two mismatches (a receipt is
    always committed); the others stay so that clients written against them keep working."""

    DIGEST_MISMATCH = "digest_mismatch"
    SCHEMA_MISMATCH = "schema_mismatch"
    TASK_MISSING = "task_missing"
    TARGET_MISMATCH = "target_mismatch"
    IN_PROGRESS = "in_progress"


class Action(enum.StrEnum):
    """A lifecycle move's name; each maps to exactly one (from, to) edge."""

    CREATE = "create"
    CLAIM = "claim"
    SUBMIT = "submit"
    FINISH = "finish"
    APPROVE = "approve"
    REJECT = "reject"
    ARCHIVE = "archive"
    ROLLBACK = "rollback"
    REOPEN = "reopen"
    CANCEL = "cancel"
    WAIT = "wait"  # a session waits for its children: back to inbox, until they are done


class ReportStatus(enum.StrEnum):
    DONE = "done"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    ABORTED = "aborted"


class AttemptState(enum.StrEnum):
    """Where an attempt is: ``running``, or how it ended.

    ``SESSION_LOST`` is the one upper-case value on purpose: it is the name the design and the
    FCoP recovery seed give the event the reconciler records when it finds a session gone
    (DESIGN.md: "a reconciler marks it ``SESSION_LOST``"), and it is stored, returned by every
    door and written in the promise as that word. Its cause is the lower-case
    :attr:`AttemptCause.SESSION_LOST`, like every cause.
    """

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # Legacy, never written: a session whose lease renewal fails ends its attempt
    # ``interrupted`` with the cause ``lease_lost`` (AttemptCause.LEASE_LOST, a different and
    # written thing). The value stays because every database's CHECK constraint on
    # ``attempts.state`` admits it (since the first schema, not changed without a migration),
    # so a row holding it must still read; it is in none of the state sets.
    LEASE_LOST = "lease_lost"
    SESSION_LOST = "SESSION_LOST"  # the reconciler found the session gone
    # The session could not record or renew (its cause says why) and stopped without settling:
    # one interruption case, decided by admission like a lost session.
    INTERRUPTED = "interrupted"


# The attempt ended without settling (failed, lost, stopped): its TASK is recovered through an
# interruption case and admission, and the retry policy looks at it.
INTERRUPTED_ENDS = frozenset(
    {AttemptState.FAILED, AttemptState.SESSION_LOST, AttemptState.INTERRUPTED}
)


class AttemptCause(enum.StrEnum):
    """Why an attempt ended (DESIGN.md section 5). Only ``returned`` and ``agent_failed`` are
    ends the session may settle by itself; every other cause is an interruption, which goes
    through one interruption case and admission."""

    RETURNED = "returned"  # the agent returned; the attempt settled
    AGENT_FAILED = "agent_failed"  # the agent raised; held for its approver, never retried blindly
    NOT_STARTED = "not_started"  # the claim was rolled back before any work (lease held)
    STORE_UNAVAILABLE = "store_unavailable"  # a session write failed past its bounded retries
    REDIS_UNAVAILABLE = "redis_unavailable"  # Redis failed the session past its bounded retries
    LEASE_LOST = "lease_lost"  # the session's lease could not be renewed
    SESSION_LOST = "session_lost"  # the reconciler found the session gone (killed, unreachable)
    SESSION_ERROR = "session_error"  # surehand's own session code failed (a bug, a bad output)
    QUOTA_EXCEEDED = "quota_exceeded"  # the session's program went over its disk quota: stopped
    CANCELLED = "cancelled"  # a person (or a parent's cancel) cancelled the TASK: stopped
    TIMED_OUT = "timed_out"  # the TASK's time limit ran out: stopped
    BUDGET_SPENT = "budget_spent"  # the TASK's cost budget was spent: stopped


class OperationState(enum.StrEnum):
    INTENT = "intent"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RetryPolicy(enum.StrEnum):
    """Whether an interrupted operation may be repeated by a successor."""

    NONE = "none"  # never repeat automatically
    KEYED = "keyed"  # repeat only with the same idempotency key


class EffectFact(enum.StrEnum):
    NONE_VERIFIED = "none_verified"
    SINGLE_VERIFIED = "single_verified"
    CONFIRMED = "confirmed"
    UNKNOWN = "unknown"


class Admission(enum.StrEnum):
    NOT_ADMITTED = "not_admitted"
    REEXECUTE = "reexecute"
    RECONCILE_ONLY = "reconcile_only"
    HOLD_FOR_REVIEW = "hold_for_review"


class CaseState(enum.StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class EventKind(enum.StrEnum):
    """Kinds of entries in a TASK's append-only history."""

    TRANSITION = "transition"
    PUBLISHED = "published"
    CLAIM_REFUSED = "claim_refused"
    ATTEMPT_STARTED = "attempt_started"
    ATTEMPT_FINISHED = "attempt_finished"
    STALE_OWNER_FENCED = "stale_owner_fenced"
    SESSION_LOST = "session_lost"
    ADMISSION = "admission"
    HOLD = "hold"
    HOLD_RELEASED = "hold_released"
    REVIEW = "review"
    REPORT = "report"
    # Publishing failed in a way a retry would repeat (bad role code, publisher error): the
    # TASK is marked undispatchable (tasks.dispatch_error), never a stop of the sweep.
    DISPATCH_FAILED = "dispatch_failed"
    # A sender, approver or ADMIN asked to cancel the TASK (tasks.cancel_requested_at).
    CANCEL_REQUESTED = "cancel_requested"
    # An approver raised what the TASK's LLM agent may spend (tasks.budget_microusd).
    BUDGET_RAISED = "budget_raised"

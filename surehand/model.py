"""Frozen records and enums shared by every layer.

Enum values are the strings stored in the database (mirrored there by CHECK constraints) and
returned in JSON; never rename or delete a value, mark it legacy instead.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
    RESERVED = "reserved"
    TASK_CREATED = "task_created"
    COMMITTED = "committed"


class Disposition(enum.StrEnum):
    CREATED = "created"
    REUSED = "reused"
    CONFLICT = "conflict"


class ConflictCode(enum.StrEnum):
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


class ReportStatus(enum.StrEnum):
    DONE = "done"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    ABORTED = "aborted"


class AttemptState(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"  # the session saw its own lease renewal fail and stopped
    SESSION_LOST = "SESSION_LOST"  # the reconciler found the session gone


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


@dataclass(frozen=True, slots=True)
class TaskFields:
    """The semantic (digested) fields of a TASK, normalised."""

    sender: str
    recipient: str
    subject: str
    body: str
    priority: Priority = Priority.P2
    thread_key: str = ""
    parent: str = ""
    references: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    risk_level: RiskLevel = RiskLevel.MEDIUM

    def semantic_dict(self) -> dict[str, Any]:
        """The JSON object that the write-task-v1 digest is computed over."""
        return {
            "sender": self.sender,
            "recipient": self.recipient,
            "subject": self.subject,
            "body": self.body,
            "priority": self.priority.value,
            "thread_key": self.thread_key,
            "parent": self.parent,
            "references": list(self.references),
            "depends_on": list(self.depends_on),
            "risk_level": self.risk_level.value,
        }


def task_filename(task_id: str, sender: str, recipient: str) -> str:
    return f"{task_id}-{sender}-to-{recipient}.md"


def task_path(bucket: Bucket, task_id: str, sender: str, recipient: str) -> str:
    """The FCoP workspace path of a TASK in a bucket (the mirror's layout)."""
    return f"fcop/_lifecycle/{bucket.value}/{task_filename(task_id, sender, recipient)}"


@dataclass(frozen=True, slots=True)
class ConflictInfo:
    code: ConflictCode
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code.value, "message": self.message}


@dataclass(frozen=True, slots=True)
class WriteTaskResult:
    """The result of write_task; the same shape in Python, HTTP, MCP and CLI JSON.

    ``created``/``reused`` mean the creation result was recovered, not that the TASK ran.
    """

    disposition: Disposition
    action_taken: bool
    task_id: str | None
    task_path: str | None
    client_submission_id: str | None
    request_digest: str
    digest_schema_version: str
    receipt_state: ReceiptState | None
    idempotent: bool
    conflict: ConflictInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "disposition": self.disposition.value,
            "action_taken": self.action_taken,
            "task_id": self.task_id,
            "task_path": self.task_path,
            "client_submission_id": self.client_submission_id,
            "request_digest": self.request_digest,
            "digest_schema_version": self.digest_schema_version,
            "receipt_state": self.receipt_state.value if self.receipt_state else None,
            "idempotent": self.idempotent,
            "conflict": self.conflict.to_dict() if self.conflict else None,
        }


@dataclass(frozen=True, slots=True)
class Receipt:
    """The durable record of one submission."""

    tenant: str
    client_submission_id: str
    digest_schema_version: str
    request_digest: str
    task_id: str
    task_path: str
    state: ReceiptState
    holder: str | None
    held_until: datetime | None
    document_digest: str | None
    result: Mapping[str, Any] | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SubmissionDiagnosis:
    """Read-only facts about a submission's receipt. Diagnostics never repair anything."""

    tenant: str
    client_submission_id: str
    state: ReceiptState
    task_id: str
    task_path: str
    target_exists: bool
    digests_match: bool | None
    age_seconds: float
    stalled: bool
    held_by_live_caller: bool

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        return data


@dataclass(frozen=True, slots=True)
class Hold:
    case_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Task:
    """A TASK as stored: its fields, lifecycle position and fencing epoch."""

    task_id: str
    tenant: str
    fields: TaskFields
    bucket: Bucket
    revision: int
    epoch: int
    rework_round: int
    hold: Hold | None
    client_submission_id: str | None
    request_digest: str
    idempotent: bool
    document_digest: str
    published: bool
    created_at: datetime
    updated_at: datetime

    @property
    def task_path(self) -> str:
        return task_path(self.bucket, self.task_id, self.fields.sender, self.fields.recipient)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tenant": self.tenant,
            **self.fields.semantic_dict(),
            "bucket": self.bucket.value,
            "task_path": self.task_path,
            "revision": self.revision,
            "epoch": self.epoch,
            "rework_round": self.rework_round,
            "hold": dataclasses.asdict(self.hold) if self.hold else None,
            "client_submission_id": self.client_submission_id,
            "request_digest": self.request_digest,
            "idempotent": self.idempotent,
            "published": self.published,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One entry of a TASK's append-only history."""

    event_id: int
    task_id: str
    at: datetime
    kind: EventKind
    by: str
    action: str | None = None
    from_bucket: Bucket | None = None
    to_bucket: Bucket | None = None
    reason: str | None = None
    attempt_id: str | None = None
    epoch: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "task_id": self.task_id,
            "at": self.at.isoformat(),
            "kind": self.kind.value,
            "by": self.by,
            "action": self.action,
            "from": self.from_bucket.value if self.from_bucket else None,
            "to": self.to_bucket.value if self.to_bucket else None,
            "reason": self.reason,
            "attempt_id": self.attempt_id,
            "epoch": self.epoch,
            "data": dict(self.data),
        }


@dataclass(frozen=True, slots=True)
class Report:
    """A REPORT on a TASK; revisions supersede earlier ones, never overwrite them."""

    report_id: str
    task_id: str
    reporter: str
    recipient: str
    status: ReportStatus
    body: str
    body_hash: str
    client_submission_id: str | None
    rework_round: int
    revision: int
    supersedes: str | None
    attempt_id: str | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["created_at"] = self.created_at.isoformat()
        return data


@dataclass(frozen=True, slots=True)
class WriteReportResult:
    report: Report
    deduplicated: bool

    def to_dict(self) -> dict[str, Any]:
        return {"deduplicated": self.deduplicated, **self.report.to_dict()}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at running a TASK; ``number`` is the task's fencing epoch while it runs."""

    attempt_id: str
    task_id: str
    number: int
    state: AttemptState
    worker: str
    lease_id: str
    agent_returned: bool
    result: Any
    error: str | None
    bound_operation_id: int | None  # set for a successor admitted as single_verified
    case_id: str | None  # the interruption case that admitted this attempt as a successor
    lease_missing_since: datetime | None
    started_at: datetime
    ended_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        data["started_at"] = self.started_at.isoformat()
        data["ended_at"] = self.ended_at.isoformat() if self.ended_at else None
        data["lease_missing_since"] = (
            self.lease_missing_since.isoformat() if self.lease_missing_since else None
        )
        return data


@dataclass(frozen=True, slots=True)
class Operation:
    """A side effect a session declared (intent) and, once done, settled (outcome)."""

    operation_id: int
    task_id: str
    attempt_id: str
    epoch: int
    name: str
    fingerprint: str
    args: Mapping[str, Any]
    idempotency_key: str | None
    retry_policy: RetryPolicy
    probe: str | None  # name of a registered probe that can tell whether the effect happened
    state: OperationState
    outcome: Mapping[str, Any] | None
    external_receipt: str | None
    error: str | None
    started_at: datetime
    settled_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["args"] = dict(self.args)
        data["outcome"] = dict(self.outcome) if self.outcome is not None else None
        data["retry_policy"] = self.retry_policy.value
        data["state"] = self.state.value
        data["started_at"] = self.started_at.isoformat()
        data["settled_at"] = self.settled_at.isoformat() if self.settled_at else None
        return data


@dataclass(frozen=True, slots=True)
class InterruptionCase:
    """The durable record of one lost session and the admission decision about its successor."""

    case_id: str
    task_id: str
    interrupted_attempt_id: str
    interrupted_epoch: int
    prior_lease_id: str
    interrupted_at: datetime
    revision_at_interruption: int
    revision_at_evaluation: int | None
    effect_fact: EffectFact | None
    effect_refs: Mapping[str, Any]
    admission: Admission | None
    decided_at: datetime | None
    decided_by: str | None
    successor_attempt_id: str | None
    bound_operation_id: int | None
    state: CaseState
    review: Mapping[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("effect_fact", "admission", "state"):
            value = getattr(self, key)
            data[key] = value.value if value is not None else None
        for key in ("interrupted_at", "decided_at"):
            value = getattr(self, key)
            data[key] = value.isoformat() if value is not None else None
        data["effect_refs"] = dict(self.effect_refs)
        data["review"] = dict(self.review) if self.review is not None else None
        return data

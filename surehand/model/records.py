"""Frozen records of TASKs, submissions and REPORTs, as every door returns them.

A *TASK* is an FCoP task (``TASK-YYYYMMDD-NNN``, UTC day, never reused) with its sender,
recipient, subject, body, priority, risk level and links; its *bucket* is where it is in its
lifecycle (:mod:`surehand.dispatcher.lifecycle`). A *submission* is one business intent to
create a TASK, named by its ``client_submission_id`` within a tenant; its *receipt* is the
durable record of it (``reserved`` -> ``task_created`` -> ``committed``) that lets a retry
return the first result. A *hold* stops a TASK in ``active`` until its approver releases it:
an interruption case waiting for review, or a dependency that will never be done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from surehand.model.enums import (
    Bucket,
    ConflictCode,
    Disposition,
    EventKind,
    Priority,
    ReceiptState,
    ReportStatus,
    RiskLevel,
)


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
    # The TASK's own time limit per attempt, in seconds (None: its role's default, if any).
    time_limit_seconds: int | None = None
    # What its LLM agents may spend across attempts (USD); digested only when given, so the
    # digests of requests without it stay what they were.
    budget_usd: float | None = None

    def digest_dict(self) -> dict[str, Any]:
        """The JSON object that the write-task-v1 digest is computed over: the semantic
        fields (``time_limit_seconds`` when given), and ``budget_usd`` (as a decimal string)
        when one is given."""
        if self.budget_usd is None:
            return self.semantic_dict()
        return {**self.semantic_dict(), "budget_usd": usd_text(self.budget_usd)}

    def semantic_dict(self) -> dict[str, Any]:
        """The semantic fields as the store keeps them (:meth:`digest_dict` adds the budget). A
        field added after write-task-v1 (``time_limit_seconds``) is in it only when given, so
        the digest of every request that does not give it stays byte-for-byte what it was."""
        return {
            **self._base_dict(),
            **self._optional_dict(),
        }

    def _optional_dict(self) -> dict[str, Any]:
        if self.time_limit_seconds is None:
            return {}
        return {"time_limit_seconds": self.time_limit_seconds}

    def _base_dict(self) -> dict[str, Any]:
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


def usd_text(amount: float) -> str:
    """An amount of USD as the digest writes it: at most six decimals, no trailing zeros."""
    return f"{amount:.6f}".rstrip("0").rstrip(".")


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
    """The durable record of one submission, written ``committed`` with the TASK."""

    tenant: str
    client_submission_id: str
    digest_schema_version: str
    request_digest: str
    task_id: str
    task_path: str
    state: ReceiptState
    document_digest: str
    result: Mapping[str, Any]
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

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["state"] = self.state.value
        return data


DEPENDENCY_HOLD = "dependency:"  # a hold's case_id prefix: held by a dead dependency, no case


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a TASK is held for its approver: an interruption case (``case_id``), or a
    dependency that will never be done (``dependency:<TASK id>``: nothing ran, no case)."""

    case_id: str
    reason: str

    @property
    def dependency(self) -> str | None:
        """The archived or cancelled dependency holding the TASK, if that is the hold."""
        if self.case_id.startswith(DEPENDENCY_HOLD):
            return self.case_id.removeprefix(DEPENDENCY_HOLD)
        return None


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """A durable request to cancel a TASK: when, by which role, and why."""

    at: datetime
    by: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"at": self.at.isoformat(), "by": self.by, "reason": self.reason}


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
    # Why this TASK could not be dispatched (a role code the queue refuses, a publisher error),
    # and when that was last seen; None when it was dispatched or never tried. See dispatch.py.
    dispatch_error: str | None = None
    dispatch_error_at: datetime | None = None
    cancel: CancelRequest | None = None

    @property
    def budget_usd(self) -> float | None:
        """What its LLM agents may spend across attempts (None: the role's default)."""
        return self.fields.budget_usd

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
            "dispatch_error": self.dispatch_error,
            "dispatch_error_at": (
                self.dispatch_error_at.isoformat() if self.dispatch_error_at else None
            ),
            "time_limit_seconds": self.fields.time_limit_seconds,
            "cancel": self.cancel.to_dict() if self.cancel else None,
            **({"budget_usd": self.budget_usd} if self.budget_usd is not None else {}),
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
    principal: str | None = None  # who (the token's name) made the call; None: the runtime

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "task_id": self.task_id,
            "at": self.at.isoformat(),
            "kind": self.kind.value,
            "by": self.by,
            "principal": self.principal,
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

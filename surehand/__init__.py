"""surehand: a distributed task queue for AI-agent work.

A TASK is created once per ``client_submission_id`` and taken over only on evidence.
"""

from __future__ import annotations

from surehand.config import Settings
from surehand.errors import (
    Conflict,
    IllegalTransition,
    NotAuthorized,
    NotFound,
    ReportRejected,
    StaleOwner,
    SurehandError,
    TaskHeld,
    TaskNotFound,
    ValidationFailed,
)
from surehand.facade import Surehand
from surehand.model import (
    Action,
    Bucket,
    ConflictCode,
    Disposition,
    Priority,
    ReceiptState,
    Report,
    RiskLevel,
    SubmissionDiagnosis,
    Task,
    TaskEvent,
    WriteReportResult,
    WriteTaskResult,
)

__version__ = "0.1.0"

__all__ = [
    "Action",
    "Bucket",
    "Conflict",
    "ConflictCode",
    "Disposition",
    "IllegalTransition",
    "NotAuthorized",
    "NotFound",
    "Priority",
    "ReceiptState",
    "Report",
    "ReportRejected",
    "RiskLevel",
    "Settings",
    "StaleOwner",
    "SubmissionDiagnosis",
    "Surehand",
    "SurehandError",
    "Task",
    "TaskEvent",
    "TaskHeld",
    "TaskNotFound",
    "ValidationFailed",
    "WriteReportResult",
    "WriteTaskResult",
    "__version__",
]

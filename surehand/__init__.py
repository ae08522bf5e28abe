"""surehand: a distributed task queue for AI-agent work.

A TASK is created once per ``client_submission_id`` and taken over only on evidence.

The public names below are imported on first use (PEP 562), so that ``import surehand`` --
and every ``surehand.*`` submodule, the CLI's included -- does not pay for Celery, Redis,
alembic and Prometheus until something needs them. ``from surehand import Surehand`` works
as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from surehand.lazy import exports

if TYPE_CHECKING:
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

_ERRORS = (
    "Conflict IllegalTransition NotAuthorized NotFound ReportRejected StaleOwner SurehandError "
    "TaskHeld TaskNotFound ValidationFailed"
)
_MODEL = (
    "Action Bucket ConflictCode Disposition Priority ReceiptState Report RiskLevel "
    "SubmissionDiagnosis Task TaskEvent WriteReportResult WriteTaskResult"
)
# Public name -> the module that defines it.
_HOMES: dict[str, str] = {
    "Settings": "surehand.config",
    "Surehand": "surehand.facade",
    **dict.fromkeys(_ERRORS.split(), "surehand.errors"),
    **dict.fromkeys(_MODEL.split(), "surehand.model"),
}


__getattr__, __dir__ = exports(__name__, _HOMES)

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

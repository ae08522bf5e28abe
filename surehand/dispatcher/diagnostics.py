"""Read-only diagnostics of submissions. They report facts; they never delete, repair or
recreate a receipt or a TASK, whatever its age."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection

from surehand.dispatcher.context import Services
from surehand.errors import ReceiptNotFound
from surehand.model import Receipt, ReceiptState, SubmissionDiagnosis
from surehand.requests import check_submission_id, validate_tenant
from surehand.store import receipts, tasks


def diagnose_submission(services: Services, tenant: str, submission_id: str) -> SubmissionDiagnosis:
    """State, target existence, digest agreement, age and stall of one submission."""
    tenant = validate_tenant(tenant)
    try:
        check_submission_id(submission_id)
    except ValueError:
        raise ReceiptNotFound(f"no submission {submission_id!r} in tenant {tenant!r}") from None
    with services.store.snapshot() as connection:
        receipt = receipts.get(connection, tenant, submission_id)
        if receipt is None:
            raise ReceiptNotFound(f"no submission {submission_id!r} in tenant {tenant!r}")
        return _diagnose(services, connection, receipt)


def stalled_submissions(services: Services, limit: int = 100) -> list[SubmissionDiagnosis]:
    """Every receipt short of ``committed`` and untouched for ``stalled_after_seconds``."""
    cutoff = services.clock.now() - timedelta(seconds=services.settings.stalled_after_seconds)
    with services.store.snapshot() as connection:
        stale = receipts.uncommitted_older_than(connection, cutoff, limit=limit)
        return [_diagnose(services, connection, receipt) for receipt in stale]


def count_stalled(services: Services) -> int:
    cutoff = services.clock.now() - timedelta(seconds=services.settings.stalled_after_seconds)
    with services.store.snapshot() as connection:
        return receipts.count_uncommitted_older_than(connection, cutoff)


def _diagnose(services: Services, connection: Connection, receipt: Receipt) -> SubmissionDiagnosis:
    task = tasks.get(connection, receipt.task_id)
    now = services.clock.now()
    age = (now - receipt.updated_at).total_seconds()
    committed = receipt.state is ReceiptState.COMMITTED
    digests_match = None if task is None else task.request_digest == receipt.request_digest
    return SubmissionDiagnosis(
        tenant=receipt.tenant,
        client_submission_id=receipt.client_submission_id,
        state=receipt.state,
        task_id=receipt.task_id,
        task_path=receipt.task_path,
        target_exists=task is not None,
        digests_match=digests_match,
        age_seconds=round(age, 3),
        stalled=not committed and age >= services.settings.stalled_after_seconds,
        held_by_live_caller=receipt.held_until is not None and receipt.held_until > now,
    )

"""Read-only diagnostics of submissions. They report facts; they never delete, repair or
recreate a receipt or a TASK, whatever its age.

Every receipt is committed with its TASK (:mod:`surehand.dispatcher.submissions`), so no
receipt can stall; a diagnosis shows whether the TASK a receipt names is still there and
still carries the receipt's request digest.
"""

from __future__ import annotations

from sqlalchemy import Connection

from surehand.dispatcher.context import Services
from surehand.errors import ReceiptNotFound
from surehand.model import Receipt, SubmissionDiagnosis
from surehand.requests import check_submission_id, validate_tenant
from surehand.store import receipts, tasks


def diagnose_submission(services: Services, tenant: str, submission_id: str) -> SubmissionDiagnosis:
    """State, target existence, digest agreement and age of one submission."""
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


def _diagnose(services: Services, connection: Connection, receipt: Receipt) -> SubmissionDiagnosis:
    task = tasks.get(connection, receipt.task_id)
    age = (services.clock.now() - receipt.updated_at).total_seconds()
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
    )

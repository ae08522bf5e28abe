"""Submission receipts: written ``committed``, with the full creation result, in the statement
(Postgres) or transaction (SQLite) that creates the TASK (:mod:`surehand.store.creation`), and
never changed afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, select

from surehand.model import Receipt, ReceiptState
from surehand.store.driver import DriverStatement
from surehand.store.schema import receipts


def from_row(row: Any) -> Receipt:
    """The receipt of a row with the columns of ``receipts``."""
    return Receipt(
        tenant=row.tenant,
        client_submission_id=row.client_submission_id,
        digest_schema_version=row.digest_schema_version,
        request_digest=row.request_digest,
        task_id=row.task_id,
        task_path=row.task_path,
        state=ReceiptState(row.state),
        document_digest=row.document_digest,
        result=row.result,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


# The read every write_task begins with: on the driver's cursor (see store/driver.py).
_GET = DriverStatement(
    select(receipts).where(
        receipts.c.tenant == bindparam("tenant"),
        receipts.c.client_submission_id == bindparam("sid"),
    ),
    receipts.c,
)


def committed_row(
    *,
    tenant: str,
    submission_id: str,
    schema_version: str,
    digest: str,
    task_id: str,
    task_path: str,
    document_digest: str,
    result: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The row of a receipt written ``committed`` with its full result."""
    return {
        "tenant": tenant,
        "client_submission_id": submission_id,
        "digest_schema_version": schema_version,
        "request_digest": digest,
        "task_id": task_id,
        "task_path": task_path,
        "state": ReceiptState.COMMITTED.value,
        "document_digest": document_digest,
        "result": dict(result),
        "created_at": now,
        "updated_at": now,
    }


def get(connection: Connection, tenant: str, submission_id: str) -> Receipt | None:
    row = _GET.one_or_none(connection, {"tenant": tenant, "sid": submission_id})
    return from_row(row) if row is not None else None


def count(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(receipts)).scalar_one())

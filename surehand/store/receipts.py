"""Submission receipts: ``reserved`` -> ``task_created`` -> ``committed``.

Every stage change is a compare-and-set on (tenant, client_submission_id, state[, holder]); a
function returns False when it matched nothing, and the caller re-reads to learn why.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, or_, select, update

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
        holder=row.holder,
        held_until=row.held_until,
        document_digest=row.document_digest,
        result=row.result,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


# Hot-path statements are built once and executed with parameters (cached compilation).
_INSERT = insert(receipts)
# The read every write_task begins with: on the driver's cursor (see store/driver.py).
_GET = DriverStatement(
    select(receipts).where(
        receipts.c.tenant == bindparam("tenant"),
        receipts.c.client_submission_id == bindparam("sid"),
    ),
    receipts.c,
)


# IN, not !=, so that the (state, updated_at) index serves the stalled-receipt scans.
_UNCOMMITTED = receipts.c.state.in_([ReceiptState.RESERVED.value, ReceiptState.TASK_CREATED.value])


def _key(tenant: str, submission_id: str) -> tuple[Any, ...]:
    return (receipts.c.tenant == tenant, receipts.c.client_submission_id == submission_id)


def _row(*, state: ReceiptState, **values: Any) -> dict[str, Any]:
    row = {"holder": None, "held_until": None, "document_digest": None, "result": None}
    return {**row, **values, "state": state.value}


def _insert(connection: Connection, *, state: ReceiptState, **values: Any) -> None:
    connection.execute(_INSERT, _row(state=state, **values))


def insert_reserved(
    connection: Connection,
    *,
    tenant: str,
    submission_id: str,
    schema_version: str,
    digest: str,
    task_id: str,
    task_path: str,
    holder: str,
    held_until: datetime,
    now: datetime,
) -> None:
    """Insert a ``reserved`` receipt held by ``holder`` (for a writer whose TASK store does not
    share the receipt's transaction); raises DuplicateKey if the submission already exists."""
    _insert(
        connection,
        state=ReceiptState.RESERVED,
        tenant=tenant,
        client_submission_id=submission_id,
        digest_schema_version=schema_version,
        request_digest=digest,
        task_id=task_id,
        task_path=task_path,
        holder=holder,
        held_until=held_until,
        created_at=now,
        updated_at=now,
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
    return _row(
        state=ReceiptState.COMMITTED,
        tenant=tenant,
        client_submission_id=submission_id,
        digest_schema_version=schema_version,
        request_digest=digest,
        task_id=task_id,
        task_path=task_path,
        document_digest=document_digest,
        result=dict(result),
        created_at=now,
        updated_at=now,
    )


def get(connection: Connection, tenant: str, submission_id: str) -> Receipt | None:
    row = _GET.one_or_none(connection, {"tenant": tenant, "sid": submission_id})
    return from_row(row) if row is not None else None


def take_over(
    connection: Connection,
    receipt: Receipt,
    *,
    holder: str,
    held_until: datetime,
    now: datetime,
) -> bool:
    """Become the holder of a non-committed receipt whose previous hold has expired.

    A hold ends at ``held_until``: from that instant on it is over, as the reader
    (``ReceiptRecovery.converge``) and the diagnostics count it. (A strict ``<`` here once
    left a caller re-reading a receipt whose hold ended exactly now, forever, while the clock
    stood still.)"""
    result = connection.execute(
        update(receipts)
        .where(
            *_key(receipt.tenant, receipt.client_submission_id),
            receipts.c.state == receipt.state.value,
            or_(receipts.c.holder.is_(None), receipts.c.held_until <= now),
        )
        .values(holder=holder, held_until=held_until, updated_at=now)
    )
    return result.rowcount == 1


def mark_task_created(
    connection: Connection,
    receipt: Receipt,
    *,
    holder: str,
    document_digest: str,
    now: datetime,
) -> bool:
    """``reserved`` -> ``task_created``, only by the current holder."""
    return _advance(
        connection,
        receipt,
        holder=holder,
        expect=ReceiptState.RESERVED,
        state=ReceiptState.TASK_CREATED,
        document_digest=document_digest,
        updated_at=now,
    )


def mark_committed(
    connection: Connection,
    receipt: Receipt,
    *,
    holder: str,
    result: Mapping[str, Any],
    now: datetime,
) -> bool:
    """``task_created`` -> ``committed`` with the full creation result; releases the hold."""
    return _advance(
        connection,
        receipt,
        holder=holder,
        expect=ReceiptState.TASK_CREATED,
        state=ReceiptState.COMMITTED,
        result=dict(result),
        holder_cleared=True,
        updated_at=now,
    )


def _advance(
    connection: Connection,
    receipt: Receipt,
    *,
    holder: str,
    expect: ReceiptState,
    state: ReceiptState,
    holder_cleared: bool = False,
    **values: Any,
) -> bool:
    """Compare-and-set a receipt one stage forward, only by its current holder."""
    if holder_cleared:
        values.update(holder=None, held_until=None)
    result = connection.execute(
        update(receipts)
        .where(
            *_key(receipt.tenant, receipt.client_submission_id),
            receipts.c.state == expect.value,
            receipts.c.holder == holder,
        )
        .values(state=state.value, **values)
    )
    return result.rowcount == 1


def release_hold(connection: Connection, receipt: Receipt, *, holder: str, now: datetime) -> None:
    """Give up a hold early (after a conflict) so that a retry need not wait for it to expire."""
    connection.execute(
        update(receipts)
        .where(
            *_key(receipt.tenant, receipt.client_submission_id),
            receipts.c.holder == holder,
        )
        .values(holder=None, held_until=None, updated_at=now)
    )


def uncommitted_older_than(
    connection: Connection, cutoff: datetime, limit: int = 1000
) -> list[Receipt]:
    """Receipts still short of ``committed`` and untouched since ``cutoff`` (for diagnostics)."""
    rows = connection.execute(
        select(receipts)
        .where(_UNCOMMITTED, receipts.c.updated_at < cutoff)
        .order_by(receipts.c.updated_at)
        .limit(limit)
    ).all()
    return [from_row(row) for row in rows]


def count_uncommitted_older_than(connection: Connection, cutoff: datetime) -> int:
    return int(
        connection.execute(
            select(func.count())
            .select_from(receipts)
            .where(_UNCOMMITTED, receipts.c.updated_at < cutoff)
        ).scalar_one()
    )


def count(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(receipts)).scalar_one())

"""The tasks table's rows and TASKs: a row read back as a :class:`~surehand.model.Task`, the
row of a new TASK, its insert, and the columns the hot paths read."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert

from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Bucket,
    CancelRequest,
    Hold,
    Priority,
    RiskLevel,
    Task,
    TaskFields,
)
from surehand.store.schema import tasks


def _fields(row: Any) -> TaskFields:
    return TaskFields(
        sender=row.sender,
        recipient=row.recipient,
        subject=row.subject,
        body=row.body,
        priority=Priority(row.priority),
        thread_key=row.thread_key,
        parent=row.parent,
        references=tuple(row.references),
        depends_on=tuple(row.depends_on),
        risk_level=RiskLevel(row.risk_level),
        time_limit_seconds=row.time_limit_seconds,
        budget_usd=usd(row.budget_microusd),
    )


def _cancel(row: Any) -> CancelRequest | None:
    if row.cancel_requested_at is None:
        return None
    return CancelRequest(row.cancel_requested_at, row.cancel_requested_by, row.cancel_reason or "")


def microusd(amount: float | None) -> int | None:
    """A USD amount as stored: whole millionths."""
    return None if amount is None else round(amount * 1_000_000)


def usd(stored: int | None) -> float | None:
    return None if stored is None else stored / 1_000_000


def from_row(row: Any) -> Task:
    """A TASK from a row of the tasks table (any object with its columns as attributes)."""
    hold = Hold(row.hold_case_id, row.hold_reason or "") if row.hold_case_id else None
    return Task(
        task_id=row.task_id,
        tenant=row.tenant,
        fields=_fields(row),
        bucket=Bucket(row.bucket),
        revision=row.revision,
        epoch=row.epoch,
        rework_round=row.rework_round,
        hold=hold,
        client_submission_id=row.client_submission_id,
        request_digest=row.request_digest,
        idempotent=bool(row.idempotent),
        document_digest=row.document_digest,
        published=bool(row.published),
        created_at=row.created_at,
        updated_at=row.updated_at,
        dispatch_error=row.dispatch_error,
        dispatch_error_at=row.dispatch_error_at,
        cancel=_cancel(row),
    )


_INSERT = insert(tasks)  # executed with parameters: compiled once, reused from the cache


def insert_row(connection: Connection, row: Mapping[str, Any]) -> None:
    """Insert a TASK row (``new_row``); raises DuplicateKey if the id exists."""
    connection.execute(_INSERT, dict(row))


def new_row(
    *,
    task_id: str,
    tenant: str,
    fields: TaskFields,
    submission_id: str | None,
    request_digest: str,
    document: str,
    document_digest: str,
    now: datetime,
) -> dict[str, Any]:
    """The row of a new TASK in ``inbox`` at revision 1."""
    return {
        "task_id": task_id,
        "tenant": tenant,
        **fields.semantic_dict(),
        "bucket": Bucket.INBOX.value,
        "revision": 1,
        "epoch": 0,
        "rework_round": 0,
        "hold_case_id": None,
        "hold_reason": None,
        "client_submission_id": submission_id,
        "request_digest": request_digest,
        "digest_schema_version": DIGEST_SCHEMA_VERSION,
        "idempotent": submission_id is not None,
        "document": document,
        "document_digest": document_digest,
        "published": False,
        "published_at": None,
        "created_at": now,
        "updated_at": now,
        "dispatch_error": None,
        "dispatch_error_at": None,
        "time_limit_seconds": fields.time_limit_seconds,
        "cancel_requested_at": None,
        "cancel_requested_by": None,
        "cancel_reason": None,
        "budget_microusd": microusd(fields.budget_usd),
    }


# What ``from_row`` reads: the hot path returns these, not the stored FCoP document.
TASK_COLUMNS = tuple(
    tasks.c[name]
    for name in (
        *("task_id", "tenant", "sender", "recipient", "subject", "body", "priority"),
        *("thread_key", "parent", "references", "depends_on", "risk_level", "bucket"),
        *("revision", "epoch", "rework_round", "hold_case_id", "hold_reason"),
        *("client_submission_id", "request_digest", "idempotent", "document_digest"),
        *("published", "created_at", "updated_at", "dispatch_error", "dispatch_error_at"),
        *("time_limit_seconds", "cancel_requested_at", "cancel_requested_by", "cancel_reason"),
        "budget_microusd",
    )
)

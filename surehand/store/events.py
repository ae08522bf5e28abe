"""A TASK's append-only history: events are inserted, never updated or deleted."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, exists, func, select
from sqlalchemy import insert as sql_insert

from surehand.model import Bucket, EventKind, TaskEvent
from surehand.store import opaque
from surehand.store.schema import attempts, task_events

_INSERT = sql_insert(task_events)  # executed with parameters: compiled once, reused from the cache


def insert(connection: Connection, *rows: Mapping[str, Any]) -> None:
    """Insert event rows (from :func:`row`) in order, inside the caller's transaction."""
    connection.execute(_INSERT, [dict(r) for r in rows] if len(rows) > 1 else dict(rows[0]))


def insert_once_per_attempt(connection: Connection, event: Mapping[str, Any]) -> bool:
    """Insert ``event`` unless its attempt already has an event of its kind and ``reason``;
    True if inserted.

    For evidence that repeats without adding anything (a stale attempt refused again and
    again): the first one is kept, the repeats are not. The attempt's row is locked first (FOR
    UPDATE on Postgres; a SQLite write transaction is exclusive already), so of N concurrent
    callers exactly one inserts.
    """
    attempt_id, kind = event["attempt_id"], event["kind"]
    connection.execute(
        select(attempts.c.attempt_id).where(attempts.c.attempt_id == attempt_id).with_for_update()
    )
    seen = exists().where(
        task_events.c.task_id == event["task_id"],
        task_events.c.attempt_id == attempt_id,
        task_events.c.kind == kind,
        task_events.c.reason == event["reason"],
    )
    if connection.execute(select(seen)).scalar():
        return False
    insert(connection, event)
    return True


def row(
    *,
    task_id: str,
    kind: EventKind,
    by: str,
    at: datetime,
    action: str | None = None,
    from_bucket: Bucket | None = None,
    to_bucket: Bucket | None = None,
    reason: str | None = None,
    attempt_id: str | None = None,
    epoch: int | None = None,
    data: Mapping[str, Any] | None = None,
    principal: str | None = None,
) -> dict[str, Any]:
    """The row of one history event. ``principal``: the name of the caller whose call wrote it
    (None for the runtime's own events); by default the ``principal`` that ``data`` records
    (``Principal.acting_for``), so every act of a principal names it in its own column."""
    if principal is None and data is not None:
        principal = data.get("principal")
    return {
        "task_id": task_id,
        "at": at,
        "kind": kind.value,
        "by": by,
        "principal": principal,
        "action": action,
        "from_bucket": from_bucket.value if from_bucket else None,
        "to_bucket": to_bucket.value if to_bucket else None,
        "reason": reason,
        "attempt_id": attempt_id,
        "epoch": epoch,
        "data": dict(data or {}),
    }


def _event(connection: Connection, row: Row[Any]) -> TaskEvent:
    return TaskEvent(
        event_id=opaque.shown(connection, row.id),  # shown, never the global sequence
        task_id=row.task_id,
        at=row.at,
        kind=EventKind(row.kind),
        by=row.by,
        principal=row.principal,
        action=row.action,
        from_bucket=Bucket(row.from_bucket) if row.from_bucket else None,
        to_bucket=Bucket(row.to_bucket) if row.to_bucket else None,
        reason=row.reason,
        attempt_id=row.attempt_id,
        epoch=row.epoch,
        data=row.data or {},
    )


def history(connection: Connection, task_id: str, kind: EventKind | None = None) -> list[TaskEvent]:
    """A TASK's events, oldest first, optionally of one kind."""
    query = select(task_events).where(task_events.c.task_id == task_id)
    if kind is not None:
        query = query.where(task_events.c.kind == kind.value)
    rows = connection.execute(query.order_by(task_events.c.id)).all()
    return [_event(connection, row) for row in rows]


def count(connection: Connection, task_id: str | None = None, kind: EventKind | None = None) -> int:
    query = select(func.count()).select_from(task_events)
    if task_id is not None:
        query = query.where(task_events.c.task_id == task_id)
    if kind is not None:
        query = query.where(task_events.c.kind == kind.value)
    return int(connection.execute(query).scalar_one())

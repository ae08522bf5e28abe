"""The dispatcher's bookkeeping on TASK rows, none of it a lifecycle change (no revision
bump): published marks, dispatch errors, and the TASKs the sweep still has to publish."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, func, or_, select, update

from surehand.model import Bucket, Task
from surehand.store.schema import tasks
from surehand.store.task_columns import TASK_COLUMNS, from_row
from surehand.store.tasks import READY, ROLE_NOT_PAUSED


def set_published(connection: Connection, task_id: str, now: datetime) -> None:
    """Record that a dispatch message was published (not a lifecycle change: no revision bump);
    clears a dispatch error recorded before."""
    set_published_many(connection, [task_id], now)


def set_unpublished(connection: Connection, task_id: str) -> None:
    """Mark a TASK as waiting to be published (no lifecycle change: no revision bump)."""
    connection.execute(update(tasks).where(tasks.c.task_id == task_id).values(published=False))


def unpublish_role(connection: Connection, tenant: str, role: str) -> int:
    """Mark every ``inbox`` TASK of ``role`` in ``tenant`` as waiting to be published (what
    ``resume`` does before the sweep publishes them); returns how many."""
    result = connection.execute(
        update(tasks)
        .where(
            tasks.c.tenant == tenant,
            tasks.c.recipient == role,
            tasks.c.bucket == Bucket.INBOX.value,
        )
        .values(published=False)
    )
    return result.rowcount


def waiting_to_publish(connection: Connection, task_ids: Sequence[str]) -> list[Task]:
    """Of ``task_ids``, the TASKs still unpublished in ``inbox`` and not held, in that order."""
    if not task_ids:
        return []
    rows = connection.execute(
        select(*TASK_COLUMNS).where(
            tasks.c.task_id.in_(list(task_ids)),
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.published.is_(False),
            tasks.c.hold_case_id.is_(None),
            READY,
        )
    ).all()
    found = {row.task_id: from_row(row) for row in rows}
    return [found[task_id] for task_id in task_ids if task_id in found]


def set_published_many(connection: Connection, task_ids: Sequence[str], now: datetime) -> None:
    """:func:`set_published` for several TASKs in one statement."""
    if not task_ids:
        return
    connection.execute(
        update(tasks)
        .where(tasks.c.task_id.in_(list(task_ids)))
        .values(
            published=True,
            published_at=now,
            updated_at=now,
            dispatch_error=None,
            dispatch_error_at=None,
        )
    )


def set_dispatch_error(
    connection: Connection, task: Task, error: str | None, now: datetime
) -> bool:
    """Mark a TASK undispatchable (``error`` says why, ``now`` when it was last seen: the
    sweep's back-off counts from it), or clear the mark (``error=None``). Only while the TASK
    is still at the revision read (a claim since then makes the mark moot). Not a lifecycle
    change: no revision bump. Returns whether it was written."""
    result = connection.execute(
        update(tasks)
        .where(tasks.c.task_id == task.task_id, tasks.c.revision == task.revision)
        .values(dispatch_error=error, dispatch_error_at=now if error else None, updated_at=now)
    )
    return result.rowcount == 1


def undispatchable(
    connection: Connection, *, tenant: str | None = None, limit: int = 100
) -> list[Task]:
    """TASKs marked undispatchable, oldest mark first (``ix_tasks_undispatchable``)."""
    query = select(tasks).where(tasks.c.dispatch_error.isnot(None))
    if tenant is not None:
        query = query.where(tasks.c.tenant == tenant)
    rows = connection.execute(query.order_by(tasks.c.dispatch_error_at).limit(limit)).all()
    return [from_row(row) for row in rows]


def count_undispatchable(connection: Connection) -> int:
    query = select(func.count()).select_from(tasks).where(tasks.c.dispatch_error.isnot(None))
    return int(connection.execute(query).scalar_one())


def unclaimed_by_role(
    connection: Connection, *, created_before: datetime, tenant: str | None = None
) -> list[tuple[str, int, datetime]]:
    """(recipient, count, oldest created_at) of unheld, dispatchable TASKs still in ``inbox``
    that were created before ``created_before``: work no worker has claimed for that long."""
    query = (
        select(tasks.c.recipient, func.count(), func.min(tasks.c.created_at))
        .where(
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.hold_case_id.is_(None),
            tasks.c.dispatch_error.is_(None),
            tasks.c.created_at < created_before,
            READY,
        )
        .group_by(tasks.c.recipient)
        .order_by(tasks.c.recipient)
    )
    if tenant is not None:
        query = query.where(tasks.c.tenant == tenant)
    return [(str(role), int(n), oldest) for role, n, oldest in connection.execute(query).all()]


def unpublished_inbox(
    connection: Connection,
    limit: int = 500,
    *,
    published_before: datetime | None = None,
    failed_before: datetime | None = None,
) -> list[Task]:
    """TASKs to publish, oldest first: in ``inbox`` never published, or (with
    ``published_before``) published before then and still not claimed; and ``active`` TASKs
    sent back for rework (reject or reopen unpublish them) that no message was sent for.
    TASKs marked undispatchable are left out unless (with ``failed_before``) the mark is older
    than that: the sweep must not repeat a failure that will recur every second."""
    waiting: ColumnElement[bool] = tasks.c.published.is_(False)
    if published_before is not None:
        waiting = or_(waiting, tasks.c.published_at < published_before)
    inbox = and_(tasks.c.bucket == Bucket.INBOX.value, waiting, READY)
    rework = and_(
        tasks.c.bucket == Bucket.ACTIVE.value, tasks.c.published.is_(False), tasks.c.epoch > 0
    )
    retry: ColumnElement[bool] = tasks.c.dispatch_error.is_(None)
    if failed_before is not None:
        retry = or_(retry, tasks.c.dispatch_error_at < failed_before)
    rows = connection.execute(
        select(tasks)
        .where(or_(inbox, rework), tasks.c.hold_case_id.is_(None), retry, ROLE_NOT_PAUSED)
        .order_by(tasks.c.created_at)
        .limit(limit)
    ).all()
    return [from_row(row) for row in rows]

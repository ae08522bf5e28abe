"""TASK rows read: one TASK (or its row locked), a parent's children, lists and counts, and
the conditions every claim and sweep share (dependencies done, role not paused). Row building:
:mod:`.task_columns`; compare-and-set moves: :mod:`.task_moves`; what the dispatcher's sweep
publishes: :mod:`.task_publishing`."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Connection, bindparam, func, select

from surehand.model import Bucket, Task
from surehand.store.dependencies import unmet
from surehand.store.schema import role_pauses, tasks
from surehand.store.task_columns import TASK_COLUMNS, from_row

# Unclaimable until every dependency is done: a claim's compare-and-set, the sweep and the
# outbox drain check it in the store, so no publisher's view decides it.
READY = ~unmet(tasks.c.task_id)
# Hot-path statements: built once, executed with parameters (compiled once, then cached).
_GET = select(tasks).where(tasks.c.task_id == bindparam("task_id"))
_GET_IN_TENANT = _GET.where(tasks.c.tenant == bindparam("tenant"))
_GET_FOR_UPDATE = _GET.with_for_update()
# No session of a paused role starts: the claim's WHERE (and the sweep's) leaves its TASKs.
ROLE_NOT_PAUSED = ~(
    select(role_pauses.c.role)
    .where(role_pauses.c.tenant == tasks.c.tenant, role_pauses.c.role == tasks.c.recipient)
    .exists()
)


def get(connection: Connection, task_id: str, tenant: str | None = None) -> Task | None:
    if tenant is None:
        row = connection.execute(_GET, {"task_id": task_id}).one_or_none()
    else:
        row = connection.execute(
            _GET_IN_TENANT, {"task_id": task_id, "tenant": tenant}
        ).one_or_none()
    return from_row(row) if row is not None else None


def get_for_update(connection: Connection, task_id: str) -> Task | None:
    """Read a TASK and lock its row until the transaction ends (no-op lock on SQLite, whose
    write transactions are already exclusive)."""
    row = connection.execute(_GET_FOR_UPDATE, {"task_id": task_id}).one_or_none()
    return from_row(row) if row is not None else None


def ready(connection: Connection, task_id: str) -> bool:
    """Whether every dependency of ``task_id`` is done (True for a TASK without any)."""
    return not connection.execute(
        select(unmet(bindparam("task_id"))), {"task_id": task_id}
    ).scalar_one()


def children(
    connection: Connection, parent_id: str, limit: int = 1000, *, lock: bool = False
) -> list[Task]:
    """The TASKs whose ``parent`` is ``parent_id``, in its tenant only (a ``parent`` is a
    plain reference any caller may write: another tenant's TASK naming it is no child),
    oldest first (``ix_tasks_parent``). ``lock``: lock their rows until the transaction ends
    (Postgres), so none moves to done unseen."""
    tenant = select(tasks.c.tenant).where(tasks.c.task_id == parent_id).scalar_subquery()
    query = (
        select(*TASK_COLUMNS)
        .where(tasks.c.tenant == tenant, tasks.c.parent == parent_id)
        .order_by(tasks.c.created_at, tasks.c.task_id)
        .limit(limit)
    )
    if lock and connection.dialect.name == "postgresql":
        query = query.with_for_update(of=tasks)
    rows = connection.execute(query).all()
    return [from_row(row) for row in rows]


def document(connection: Connection, task_id: str) -> str | None:
    value = connection.execute(
        select(tasks.c.document).where(tasks.c.task_id == task_id)
    ).scalar_one_or_none()
    return None if value is None else str(value)


def list_tasks(
    connection: Connection,
    *,
    tenant: str | None,
    bucket: Bucket | None = None,
    recipient: str | None = None,
    held: bool | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Task]:
    """TASKs newest first, filtered; ``tenant=None`` lists every tenant (operator tools)."""
    conditions: list[ColumnElement[bool]] = []
    if tenant is not None:
        conditions.append(tasks.c.tenant == tenant)
    if bucket is not None:
        conditions.append(tasks.c.bucket == bucket.value)
    if recipient is not None:
        conditions.append(tasks.c.recipient == recipient)
    if held is not None:
        conditions.append(
            tasks.c.hold_case_id.isnot(None) if held else tasks.c.hold_case_id.is_(None)
        )
    rows = connection.execute(
        select(tasks)
        .where(*conditions)
        .order_by(tasks.c.created_at.desc(), tasks.c.task_id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return [from_row(row) for row in rows]


def cancel_requested(connection: Connection, task_ids: Sequence[str]) -> set[str]:
    """Of ``task_ids``, those with a cancel request (one indexed read by primary key)."""
    if not task_ids:
        return set()
    rows = connection.execute(
        select(tasks.c.task_id).where(
            tasks.c.task_id.in_(list(task_ids)), tasks.c.cancel_requested_at.isnot(None)
        )
    ).all()
    return {row.task_id for row in rows}


def count(connection: Connection, tenant: str | None = None) -> int:
    query = select(func.count()).select_from(tasks)
    if tenant is not None:
        query = query.where(tasks.c.tenant == tenant)
    return int(connection.execute(query).scalar_one())

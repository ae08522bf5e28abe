"""TASK rows: insert, read, list, and compare-and-set bucket moves that bump the revision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Update,
    and_,
    bindparam,
    func,
    insert,
    or_,
    select,
    update,
)

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
from surehand.store.dependencies import unmet
from surehand.store.fence import next_epoch
from surehand.store.schema import role_pauses, tasks

# Unclaimable until every dependency is done: a claim's compare-and-set, the sweep and the
# outbox drain check it in the store, so no publisher's view decides it.
_READY = ~unmet(tasks.c.task_id)


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


# Hot-path statements: built once, executed with parameters (compiled once, then cached).
_GET = select(tasks).where(tasks.c.task_id == bindparam("task_id"))
_GET_IN_TENANT = _GET.where(tasks.c.tenant == bindparam("tenant"))
_GET_FOR_UPDATE = _GET.with_for_update()
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
# No session of a paused role starts: the claim's WHERE (and the sweep's) leaves its TASKs.
ROLE_NOT_PAUSED = ~(
    select(role_pauses.c.role)
    .where(role_pauses.c.tenant == tasks.c.tenant, role_pauses.c.role == tasks.c.recipient)
    .exists()
)
CLAIM_INBOX = (
    update(tasks)
    .where(
        tasks.c.task_id == bindparam("b_task_id"),
        tasks.c.bucket == Bucket.INBOX.value,
        tasks.c.hold_case_id.is_(None),
        tasks.c.cancel_requested_at.is_(None),
        ROLE_NOT_PAUSED,
        _READY,
    )
    .values(
        bucket=Bucket.ACTIVE.value,
        epoch=next_epoch(tasks.c.epoch),
        revision=tasks.c.revision + 1,
        updated_at=bindparam("b_now"),
    )
    .returning(*TASK_COLUMNS)
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


_UPDATE_IF: dict[tuple[tuple[tuple[str, bool], ...], tuple[str, ...], bool], Update] = {}


def _update_if_statement(
    expect: Mapping[str, Any], values: Mapping[str, Any], returning: bool
) -> Update:
    """The compare-and-set for one shape of ``expect`` and ``values``, built once per shape."""
    shape = (
        tuple((column, expected is None) for column, expected in expect.items()),
        tuple(values),
        returning,
    )
    statement = _UPDATE_IF.get(shape)
    if statement is None:
        conditions = [tasks.c.task_id == bindparam("b_task_id")]
        for column, is_null in shape[0]:
            col = tasks.c[column]
            conditions.append(col.is_(None) if is_null else col == bindparam(f"expect_{column}"))
        statement = (
            update(tasks)
            .where(*conditions)
            .values(
                {
                    **{column: bindparam(f"set_{column}") for column in values},
                    "revision": tasks.c.revision + 1,
                    "updated_at": bindparam("b_now"),
                }
            )
        )
        if returning:
            statement = statement.returning(*tasks.c)
        _UPDATE_IF[shape] = statement
    return statement


def _update_if_params(
    task_id: str, expect: Mapping[str, Any], values: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    params: dict[str, Any] = {"b_task_id": task_id, "b_now": now}
    params.update({f"expect_{k}": v for k, v in expect.items() if v is not None})
    params.update({f"set_{k}": v for k, v in values.items()})
    return params


def update_if(
    connection: Connection,
    task_id: str,
    *,
    expect: Mapping[str, Any],
    values: Mapping[str, Any],
    now: datetime,
) -> bool:
    """Compare-and-set: apply ``values`` (and bump the revision) only where every column in
    ``expect`` still has the expected value. Returns whether the row matched."""
    result = connection.execute(
        _update_if_statement(expect, values, returning=False),
        _update_if_params(task_id, expect, values, now),
    )
    return result.rowcount == 1


def update_returning(
    connection: Connection,
    task_id: str,
    *,
    expect: Mapping[str, Any],
    values: Mapping[str, Any],
    now: datetime,
) -> Task | None:
    """:func:`update_if` that returns the TASK as written (None if nothing matched), in the
    same statement: no second read."""
    row = connection.execute(
        _update_if_statement(expect, values, returning=True),
        _update_if_params(task_id, expect, values, now),
    ).one_or_none()
    return from_row(row) if row is not None else None


def set_published(connection: Connection, task_id: str, now: datetime) -> None:
    """Record that a dispatch message was published (not a lifecycle change: no revision bump);
    clears a dispatch error recorded before."""
    set_published_many(connection, [task_id], now)


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
            _READY,
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
            _READY,
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
    inbox = and_(tasks.c.bucket == Bucket.INBOX.value, waiting, _READY)
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


def count(connection: Connection, tenant: str | None = None) -> int:
    query = select(func.count()).select_from(tasks)
    if tenant is not None:
        query = query.where(tasks.c.tenant == tenant)
    return int(connection.execute(query).scalar_one())

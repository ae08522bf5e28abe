"""A TASK's dependencies as rows (``task_dependencies``): written with the TASK, read by the
claim's compare-and-set (a TASK whose dependencies are not all ``done`` is not claimable), by
a move to ``done`` (the dependants it releases go to the outbox in the same transaction), by
the dispatcher sweep (a waiting TASK is not published) and by the doors ("waiting for …").
A dependency archived or cancelled holds its ``inbox`` dependants (:func:`hold_dependants`,
hold ``dependency:<id>``; the approver's release is :mod:`surehand.dispatcher.dependency_holds`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Connection, and_, delete, exists, insert, select, update

from surehand.model import SYSTEM, Bucket, EventKind, Task
from surehand.model.records import DEPENDENCY_HOLD
from surehand.store import events
from surehand.store.schema import outbox, task_dependencies, tasks

_dependency = tasks.alias("dependency")


def unmet(task_id: ColumnElement[str]) -> ColumnElement[bool]:
    """True where the TASK ``task_id`` (a column or a parameter) has a dependency that is not
    ``done``: the claim and the sweep use ``~unmet(tasks.c.task_id)``."""
    return exists(
        select(task_dependencies.c.task_id)
        .join(_dependency, _dependency.c.task_id == task_dependencies.c.dependency_id)
        .where(
            task_dependencies.c.task_id == task_id,
            _dependency.c.bucket != Bucket.DONE.value,
        )
    )


def insert_rows(connection: Connection, task_id: str, depends_on: Sequence[str]) -> None:
    """The rows of a new TASK's ``depends_on``, in its creating transaction."""
    if depends_on:
        rows = [{"dependency_id": d, "task_id": task_id} for d in dict.fromkeys(depends_on)]
        connection.execute(insert(task_dependencies), rows)


def add_missing(connection: Connection, task_id: str, depends_on: Sequence[str]) -> None:
    """Rows making ``task_id`` wait for ``depends_on`` too (those it has already are kept):
    a session that waits for its children (``delegation.wait_for``)."""
    have = set(
        connection.execute(
            select(task_dependencies.c.dependency_id).where(task_dependencies.c.task_id == task_id)
        ).scalars()
    )
    insert_rows(connection, task_id, [d for d in depends_on if d not in have])


def unknown(connection: Connection, tenant: str, ids: Sequence[str]) -> list[str]:
    """Of ``ids``, those that name no TASK of ``tenant`` (in their order)."""
    if not ids:
        return []
    found = set(
        connection.execute(
            select(tasks.c.task_id).where(tasks.c.task_id.in_(list(ids)), tasks.c.tenant == tenant)
        ).scalars()
    )
    return [task_id for task_id in ids if task_id not in found]


def release(connection: Connection, dependency_id: str, now: datetime) -> list[str]:
    """Queue the message of every dependant of ``dependency_id`` that is now ready (in
    ``inbox``, unheld, unpublished, every dependency done), in the caller's transaction, which
    just moved ``dependency_id`` to done. Returns their ids.

    The dependants are locked first (Postgres): two dependencies of one TASK moving to done at
    once are serialised on it, and the second, whose readiness check starts after the first
    committed, sees both done. (SQLite's write transactions are exclusive already.)"""
    waiting = (
        select(tasks.c.task_id)
        .join(task_dependencies, task_dependencies.c.task_id == tasks.c.task_id)
        .where(
            task_dependencies.c.dependency_id == dependency_id,
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.published.is_(False),
            tasks.c.hold_case_id.is_(None),
        )
        .order_by(tasks.c.task_id)
    )
    if connection.dialect.name == "postgresql":
        waiting = waiting.with_for_update(of=tasks)
    candidates = list(connection.execute(waiting).scalars())
    if not candidates:
        return []
    ready = list(
        connection.execute(
            select(tasks.c.task_id)
            .where(tasks.c.task_id.in_(candidates), ~unmet(tasks.c.task_id))
            .order_by(tasks.c.task_id)
        ).scalars()
    )
    if ready:
        connection.execute(insert(outbox), [{"task_id": t, "created_at": now} for t in ready])
    return ready


def not_done(connection: Connection, task_ids: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """For each of ``task_ids`` with dependencies not done: [(dependency id, its bucket)]."""
    ids = list(task_ids)
    if not ids:
        return {}
    rows = connection.execute(
        select(task_dependencies.c.task_id, _dependency.c.task_id, _dependency.c.bucket)
        .join(_dependency, _dependency.c.task_id == task_dependencies.c.dependency_id)
        .where(
            and_(
                task_dependencies.c.task_id.in_(ids),
                _dependency.c.bucket != Bucket.DONE.value,
            )
        )
        .order_by(task_dependencies.c.task_id, _dependency.c.task_id)
    ).all()
    found: dict[str, list[tuple[str, str]]] = {}
    for task_id, dependency, bucket in rows:
        found.setdefault(task_id, []).append((dependency, bucket))
    return found


def release_waiting_parent(connection: Connection, child: Task, now: datetime) -> str | None:
    """``child`` was held (its hold written in the caller's transaction): if its parent waits
    for it (``delegation.wait_for``), the parent stops waiting for any of its children and is
    queued to run again, its successor briefed with the hold. Returns the parent's id."""
    parent = child.fields.parent
    if not parent:
        return None
    waits = and_(
        task_dependencies.c.task_id == parent,
        task_dependencies.c.dependency_id.in_(
            select(tasks.c.task_id).where(tasks.c.parent == parent, tasks.c.tenant == child.tenant)
        ),
    )
    found = connection.execute(
        select(task_dependencies.c.dependency_id).where(
            waits, task_dependencies.c.dependency_id == child.task_id
        )
    ).first()
    if found is None:
        return None
    connection.execute(delete(task_dependencies).where(waits))
    waiting = connection.execute(
        select(tasks.c.task_id).where(
            tasks.c.task_id == parent,
            tasks.c.tenant == child.tenant,
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.published.is_(False),
            tasks.c.hold_case_id.is_(None),
            ~unmet(tasks.c.task_id),
        )
    ).first()
    if waiting is None:
        return None
    connection.execute(insert(outbox).values(task_id=parent, created_at=now))
    return parent


PREFIX = DEPENDENCY_HOLD


def is_dependency_hold(task: Task) -> bool:
    """Whether ``task`` is held by a dependency that will never be done (not by a case)."""
    return task.hold is not None and task.hold.dependency is not None


def hold_dependants(connection: Connection, dependency: Task, why: str, now: datetime) -> list[str]:
    """Hold every unheld dependant of ``dependency`` still in ``inbox`` (``why``: "was
    archived", "was cancelled: …"), in the caller's transaction; wake a parent waiting for
    it instead. Returns the ids held."""
    held = []
    for task_id in _waiting_on(connection, dependency.task_id):
        if task_id == dependency.fields.parent:
            release_waiting_parent(connection, dependency, now)
            continue
        reason = _hold_reason(task_id, dependency.task_id, why)
        if _set_hold(connection, task_id, PREFIX + dependency.task_id, reason, now):
            event(connection, task_id, EventKind.HOLD, SYSTEM, now, reason, dependency.task_id)
            held.append(task_id)
    return held


def unhold_done(connection: Connection, dependency: Task, now: datetime) -> None:
    """``dependency`` moved to done after all (its session settled before its cancel stopped
    it): the dependants it held are released, or held by another dead dependency instead;
    in the caller's transaction, before :func:`release` queues the ready ones."""
    held = connection.execute(
        select(tasks.c.task_id).where(
            tasks.c.hold_case_id == PREFIX + dependency.task_id,
            tasks.c.bucket == Bucket.INBOX.value,
        )
    ).scalars()
    for task_id in list(held):
        connection.execute(
            update(tasks)
            .where(tasks.c.task_id == task_id)
            .values(hold_case_id=None, hold_reason=None, revision=tasks.c.revision + 1)
        )
        why = f"dependency {dependency.task_id} is done after all"
        event(connection, task_id, EventKind.HOLD_RELEASED, SYSTEM, now, why, dependency.task_id)
        for other, other_why in dead(connection, task_id)[:1]:  # still held, by another
            reason = _hold_reason(task_id, other, other_why)
            _set_hold(connection, task_id, PREFIX + other, reason, now)
            event(connection, task_id, EventKind.HOLD, SYSTEM, now, reason, other)


def dead(connection: Connection, task_id: str) -> list[tuple[str, str]]:
    """The dependencies of ``task_id`` that will never be done (archived, or cancelled), with
    why: [(id, "was cancelled (…)" or "was archived")]."""
    rows = connection.execute(
        select(
            _dependency.c.task_id, _dependency.c.cancel_reason, _dependency.c.cancel_requested_at
        )
        .join(task_dependencies, _dependency.c.task_id == task_dependencies.c.dependency_id)
        .where(
            task_dependencies.c.task_id == task_id,
            _dependency.c.bucket != Bucket.DONE.value,
            (_dependency.c.bucket == Bucket.ARCHIVE.value)
            | _dependency.c.cancel_requested_at.isnot(None),
        )
        .order_by(_dependency.c.task_id)
    ).all()
    return [
        (found, f"was cancelled ({reason})" if at is not None else "was archived")
        for found, reason, at in rows
    ]


def dead_why(task: Task) -> str:
    """Why ``task`` will never be done, as a hold's reason says it."""
    if task.cancel is not None:
        return f"was cancelled ({task.cancel.reason})"
    return "was archived"


def _hold_reason(task_id: str, dependency_id: str, why: str) -> str:
    return (
        f"dependency {dependency_id} {why} and will never be done: its approver "
        f"runs this TASK anyway (surehand release {task_id}) or cancels it"
    )


def _waiting_on(connection: Connection, dependency_id: str) -> list[str]:
    query = (
        select(tasks.c.task_id)
        .join(task_dependencies, task_dependencies.c.task_id == tasks.c.task_id)
        .where(
            task_dependencies.c.dependency_id == dependency_id,
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.hold_case_id.is_(None),
        )
        .order_by(tasks.c.task_id)
    )
    return list(connection.execute(query).scalars())


def _set_hold(connection: Connection, task_id: str, hold: str, reason: str, now: datetime) -> bool:
    """Hold ``task_id`` if it is still an unheld ``inbox`` TASK (compare-and-set)."""
    written = connection.execute(
        update(tasks)
        .where(
            tasks.c.task_id == task_id,
            tasks.c.bucket == Bucket.INBOX.value,
            tasks.c.hold_case_id.is_(None),
        )
        .values(
            hold_case_id=hold,
            hold_reason=reason,
            revision=tasks.c.revision + 1,
            updated_at=now,
        )
    )
    return written.rowcount == 1


def event(
    connection: Connection,
    task_id: str,
    kind: EventKind,
    by: str,
    now: datetime,
    reason: str,
    dependency: str | None,
) -> None:
    data = {"dependency": dependency.removeprefix(PREFIX)} if dependency else {}
    events.insert(
        connection,
        events.row(task_id=task_id, kind=kind, by=by, at=now, reason=reason, data=data),
    )

"""A dependency that will never be done (archived, or cancelled) holds its dependants.

A TASK waiting in ``inbox`` for a dependency that is archived or whose cancel was requested
would wait for ever. Instead, in the transaction that archives the dependency
(:func:`surehand.dispatcher.lifecycle.apply`) or records its cancel request
(:mod:`surehand.dispatcher.cancel`), each such dependant is **held** in the store
(:func:`surehand.store.dependencies.hold_dependants`): its
``hold_case_id`` is ``dependency:<TASK id>`` (no interruption case: nothing ran) and its
``hold_reason`` names the dependency and why, with a ``hold`` event. Every door shows the hold
like any other. The approver decides:

* **run it anyway**: :func:`release` drops the dead dependencies (their rows), clears the hold
  and queues the TASK if its other dependencies are done;
* **cancel it**: the ordinary cancel (the hold is cleared as it is archived).

A parent waiting for its children (``wait_for``) is not held by a child that is cancelled or
archived: it is woken, as for a held child, and its next attempt sees the child's bucket. A
cancelled dependency that settles done after all (before its stop) releases what it held
(:func:`surehand.store.dependencies.unhold_done`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, insert

from surehand.call_requests import task_id_arg
from surehand.dispatcher import lifecycle
from surehand.dispatcher.context import Services
from surehand.errors import Conflict, IllegalTransition, TaskNotFound
from surehand.model import SYSTEM, Action, Bucket, EventKind, Task
from surehand.store import dependencies, task_moves, tasks
from surehand.store.schema import outbox, task_dependencies


def release(services: Services, task_id: str, *, actor: str, tenant: str | None) -> Task:
    """The approver runs ``task_id`` anyway: the dependencies that will never be done are
    dropped, the hold cleared, and the TASK queued if its other dependencies are done.
    NotAuthorized unless ``actor`` approves it; IllegalTransition unless it is so held;
    ValidationFailed naming ``task_id`` for a malformed id, on every store alike."""
    task_id = task_id_arg(task_id)
    with services.store.transaction() as connection:
        task = tasks.get_for_update(connection, task_id)
        if task is None or (tenant is not None and task.tenant != tenant):
            raise TaskNotFound(f"no {task_id} in tenant {tenant!r}; `surehand tasks` lists them")
        lifecycle.check_authority(task, Action.APPROVE, actor)
        if not dependencies.is_dependency_hold(task):
            raise IllegalTransition(
                f"{task_id} is not held by a dependency; a held case is answered with review",
                action="release",
                bucket=task.bucket.value,
            )
        dropped = _drop_dead(connection, task_id)
        return _unhold(connection, services, task, actor, dropped)


def _drop_dead(connection: Connection, task_id: str) -> list[str]:
    """Delete ``task_id``'s rows naming a dependency archived or cancelled; their ids."""
    dead = [dependency for dependency, _why in dependencies.dead(connection, task_id)]
    if dead:
        connection.execute(
            delete(task_dependencies).where(
                task_dependencies.c.task_id == task_id,
                task_dependencies.c.dependency_id.in_(dead),
            )
        )
    return dead


def _unhold(
    connection: Connection, services: Services, task: Task, by: str, dropped: list[str]
) -> Task:
    now = services.clock.now()
    assert task.hold is not None
    if not task_moves.update_if(
        connection,
        task.task_id,
        expect={"hold_case_id": task.hold.case_id},
        values={"hold_case_id": None, "hold_reason": None},
        now=now,
    ):
        raise Conflict(f"{task.task_id} changed while its hold was being released; ask again")
    why = "run anyway without " + ", ".join(dropped) if dropped else "run anyway"
    dependencies.event(
        connection, task.task_id, EventKind.HOLD_RELEASED, by, now, why, task.hold.case_id
    )
    if task.bucket is Bucket.INBOX and tasks.ready(connection, task.task_id):
        connection.execute(insert(outbox).values(task_id=task.task_id, created_at=now))
    released = tasks.get(connection, task.task_id)
    assert released is not None
    return released


def clear_for_cancel(connection: Connection, task: Task, now: datetime) -> Task:
    """Clear a dependency hold of ``task`` (being cancelled: the approver's other choice)."""
    if not dependencies.is_dependency_hold(task):
        return task
    assert task.hold is not None
    task_moves.update_if(
        connection,
        task.task_id,
        expect={"hold_case_id": task.hold.case_id},
        values={"hold_case_id": None, "hold_reason": None},
        now=now,
    )
    by = task.cancel.by if task.cancel else SYSTEM
    dependencies.event(
        connection, task.task_id, EventKind.HOLD_RELEASED, by, now, "cancelled", None
    )
    return tasks.get_for_update(connection, task.task_id) or task

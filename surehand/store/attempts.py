"""Attempts: one row per try at a TASK. ``number`` is the fencing epoch.

The fence is an UPDATE on the attempt's own row, so on Postgres it serialises with the
reconciler's ``running -> SESSION_LOST`` update of the same row: a session write either commits
before the loss is recorded or is refused after it, never both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Row,
    bindparam,
    exists,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy import insert as sql_insert

from surehand.model import Attempt, AttemptCause, AttemptState, Bucket, Fence
from surehand.store.fence import attempt_is_current, current_epoch
from surehand.store.schema import attempts, interruption_cases, operations, tasks

# The cause an ended attempt's state implies, for rows that do not record one: rows written
# before causes were recorded, and the writes that imply theirs (the one-statement settle,
# the reconciler's SESSION_LOST).
_IMPLIED_CAUSE = {
    AttemptState.SUCCEEDED: AttemptCause.RETURNED,
    AttemptState.FAILED: AttemptCause.AGENT_FAILED,
    AttemptState.SESSION_LOST: AttemptCause.SESSION_LOST,
}


def cause_of(state: AttemptState, recorded: str | None) -> AttemptCause | None:
    """Why an attempt in ``state`` ended: the recorded cause, else the one its state implies."""
    return AttemptCause(recorded) if recorded else _IMPLIED_CAUSE.get(state)


def _attempt(row: Row[Any]) -> Attempt:
    state = AttemptState(row.state)
    return Attempt(
        attempt_id=row.attempt_id,
        task_id=row.task_id,
        number=row.number,
        state=state,
        worker=row.worker,
        lease_id=row.lease_id,
        agent_returned=bool(row.agent_returned),
        result=row.result,
        error=row.error,
        bound_operation_id=row.bound_operation_id,
        case_id=row.case_id,
        lease_missing_since=row.lease_missing_since,
        started_at=row.started_at,
        ended_at=row.ended_at,
        cause=cause_of(state, row.cause),
        details=row.details,
    )


# Hot-path statements: built once, executed with parameters (compiled once, then cached).
_INSERT = sql_insert(attempts)
_GET = select(attempts).where(attempts.c.attempt_id == bindparam("attempt_id"))
# The fence's rule (surehand.store.fence): the attempt is running at the TASK's current epoch.
_FENCED = attempt_is_current(bindparam("b_attempt_id"), current_epoch(bindparam("b_task_id")))
_FENCE = update(attempts).where(*_FENCED).values(state=AttemptState.RUNNING.value)
_HAS_OPERATIONS = exists().where(  # task_id first: served by ix_operations_task_fingerprint
    operations.c.task_id == bindparam("b_task_id"),
    operations.c.attempt_id == attempts.c.attempt_id,
)
_FENCE_AND_RETURN = (
    update(attempts)
    .where(*_FENCED)
    .values(agent_returned=True, result=bindparam("b_result"))
    .returning(_HAS_OPERATIONS.label("has_operations"))
)
_FINISH = (
    update(attempts)
    .where(
        attempts.c.attempt_id == bindparam("b_attempt_id"),
        attempts.c.state == bindparam("b_expect"),
    )
    .values(
        state=bindparam("b_state"),
        ended_at=bindparam("b_now"),
        error=bindparam("b_error"),
        cause=bindparam("b_cause"),
    )
)
_RECORD_RETURN = (
    update(attempts)
    .where(attempts.c.attempt_id == bindparam("b_attempt_id"))
    .values(agent_returned=True, result=bindparam("b_result"))
)


def insert(connection: Connection, attempt: Attempt) -> None:
    """Insert a running attempt (from :func:`new_running`); DuplicateKey if its TASK already
    has an attempt with its number."""
    connection.execute(_INSERT, running_row(attempt))


def new_running(
    *,
    attempt_id: str,
    task_id: str,
    number: int,
    worker: str,
    now: datetime,
    bound_operation_id: int | None = None,
    case_id: str | None = None,
) -> Attempt:
    """A running attempt as a claim writes it (its lease id is its attempt id)."""
    return Attempt(
        attempt_id=attempt_id,
        task_id=task_id,
        number=number,
        state=AttemptState.RUNNING,
        worker=worker,
        lease_id=attempt_id,
        agent_returned=False,
        result=None,
        error=None,
        bound_operation_id=bound_operation_id,
        case_id=case_id,
        lease_missing_since=None,
        started_at=now,
        ended_at=None,
    )


RUNNING_COLUMNS = (
    *("attempt_id", "task_id", "number", "state", "worker", "lease_id", "agent_returned"),
    *("bound_operation_id", "case_id", "started_at"),
)


def running_row(attempt: Attempt) -> dict[str, Any]:
    """The row inserted for a running attempt (:data:`RUNNING_COLUMNS`; the rest start empty)."""
    return {
        "attempt_id": attempt.attempt_id,
        "task_id": attempt.task_id,
        "number": attempt.number,
        "state": AttemptState.RUNNING.value,
        "worker": attempt.worker,
        "lease_id": attempt.lease_id,
        "agent_returned": False,
        "bound_operation_id": attempt.bound_operation_id,
        "case_id": attempt.case_id,
        "started_at": attempt.started_at,
    }


def get(connection: Connection, attempt_id: str) -> Attempt | None:
    row = connection.execute(_GET, {"attempt_id": attempt_id}).one_or_none()
    return _attempt(row) if row is not None else None


def for_task(connection: Connection, task_id: str) -> list[Attempt]:
    rows = connection.execute(
        select(attempts).where(attempts.c.task_id == task_id).order_by(attempts.c.number)
    ).all()
    return [_attempt(row) for row in rows]


def current(connection: Connection, task_id: str) -> Attempt | None:
    """The attempt whose number is the task's epoch, if any."""
    row = connection.execute(
        select(attempts)
        .join(tasks, tasks.c.task_id == attempts.c.task_id)
        .where(attempts.c.task_id == task_id, attempts.c.number == tasks.c.epoch)
    ).one_or_none()
    return _attempt(row) if row is not None else None


def fence(connection: Connection, fence: Fence) -> bool:
    """Lock the attempt's row if ``fence`` holds (the attempt is still the TASK's current
    running attempt). Returns False when it does not: the write is a stale owner's."""
    params = {"b_attempt_id": fence.attempt_id, "b_task_id": fence.task_id}
    return connection.execute(_FENCE, params).rowcount == 1


def fence_and_record_return(connection: Connection, fence: Fence, result: Any) -> bool | None:
    """:func:`fence` and :func:`record_return` in one statement.

    Returns None when fenced out (nothing written); otherwise whether the attempt has any
    operation recorded, which tells the caller whether the return must commit on its own
    before a REPORT (admission reads ``agent_returned`` only for attempts with operations).
    """
    row = connection.execute(
        _FENCE_AND_RETURN,
        {"b_attempt_id": fence.attempt_id, "b_task_id": fence.task_id, "b_result": result},
    ).one_or_none()
    return None if row is None else bool(row.has_operations)


def finish(
    connection: Connection,
    attempt_id: str,
    *,
    expect: AttemptState,
    state: AttemptState,
    now: datetime,
    error: str | None = None,
    cause: AttemptCause | None = None,
) -> bool:
    """Compare-and-set an attempt's state (e.g. running -> succeeded / SESSION_LOST), with why
    it ended (None: the cause its state implies, see :func:`cause_of`)."""
    result = connection.execute(
        _FINISH,
        {
            "b_attempt_id": attempt_id,
            "b_expect": expect.value,
            "b_state": state.value,
            "b_now": now,
            "b_error": error,
            "b_cause": cause.value if cause else None,
        },
    )
    return result.rowcount == 1


def record_return(connection: Connection, attempt_id: str, result: Any) -> None:
    """Record that the agent returned, with its result (for a REPORT written from records)."""
    connection.execute(_RECORD_RETURN, {"b_attempt_id": attempt_id, "b_result": result})


def set_details(connection: Connection, attempt_id: str, details: Mapping[str, Any]) -> None:
    """Record what the worker saw of an attempt besides its error (``Attempt.details``)."""
    connection.execute(
        update(attempts).where(attempts.c.attempt_id == attempt_id).values(details=dict(details))
    )


def running(connection: Connection, *, limit: int = 10_000, after: str = "") -> list[Attempt]:
    """Running attempts in attempt_id order (keyset pages), served by a partial index."""
    rows = connection.execute(
        select(attempts)
        .where(attempts.c.state == AttemptState.RUNNING.value, attempts.c.attempt_id > after)
        .order_by(attempts.c.attempt_id)
        .limit(limit)
    ).all()
    return [_attempt(row) for row in rows]


class RunningLease(NamedTuple):
    """What the reconciler's scan needs of a running attempt, and nothing more."""

    attempt_id: str
    task_id: str
    lease_missing_since: datetime | None


def running_pages(connection: Connection, *, page_size: int) -> Iterator[list[RunningLease]]:
    """Every running attempt, three columns only, streamed in pages of ``page_size``.

    One query over the partial index on running attempts, so its cost follows the running
    attempts, not all attempts ever made; no ORDER BY, so nothing is sorted; streamed, so
    memory stays one page. The scan reads every running attempt on every pass, so it must not
    pay for columns it does not need either (results, errors, timestamps).
    """
    result = connection.execution_options(yield_per=page_size).execute(
        select(attempts.c.attempt_id, attempts.c.task_id, attempts.c.lease_missing_since).where(
            attempts.c.state == AttemptState.RUNNING.value
        )
    )
    try:
        for rows in result.partitions():
            yield [RunningLease(row[0], row[1], row[2]) for row in rows]
    finally:  # a scan abandoned mid-way (Redis failed) closes its server-side cursor now
        result.close()


def count(
    connection: Connection, task_id: str | None = None, states: Sequence[AttemptState] = ()
) -> int:
    query = select(func.count()).select_from(attempts)
    if task_id is not None:
        query = query.where(attempts.c.task_id == task_id)
    if states:
        query = query.where(attempts.c.state.in_([state.value for state in states]))
    return int(connection.execute(query).scalar_one())


def mark_lease_missing(connection: Connection, attempt_ids: Sequence[str], now: datetime) -> None:
    """Note ``now`` as the first pass that found these running attempts without a lease (one
    UPDATE; an attempt already noted keeps its earlier time)."""
    if attempt_ids:
        connection.execute(
            update(attempts)
            .where(
                attempts.c.attempt_id.in_(list(attempt_ids)),
                attempts.c.state == AttemptState.RUNNING.value,
                attempts.c.lease_missing_since.is_(None),
            )
            .values(lease_missing_since=now)
        )


def clear_lease_missing(connection: Connection, attempt_ids: Sequence[str]) -> None:
    """The lease is back (e.g. a heartbeat restored it after a Redis restart): not a suspect."""
    if attempt_ids:
        connection.execute(
            update(attempts)
            .where(attempts.c.attempt_id.in_(list(attempt_ids)))
            .values(lease_missing_since=None)
        )


# Ended attempts that leave their TASK waiting on something else: a rework (review -> active)
# or a reopen waits for a new session after a settled attempt; a running attempt is the lease
# scan's. Every other end is an agent failure or an interruption and needs a case or a hold.
_SETTLED_OR_RUNNING = (AttemptState.RUNNING.value, AttemptState.SUCCEEDED.value)
_STRANDED = (
    select(attempts)
    .join(tasks, (tasks.c.task_id == attempts.c.task_id) & (attempts.c.number == tasks.c.epoch))
    .where(
        # These two conditions are the predicate of ix_tasks_active_unheld: the scan reads only
        # the TASKs in flight. A literal, not a parameter: Postgres uses a partial index only
        # when the query's own text implies its predicate (a prepared statement's generic plan
        # cannot know what a parameter will hold).
        tasks.c.bucket == literal_column(f"'{Bucket.ACTIVE.value}'"),
        tasks.c.hold_case_id.is_(None),
        attempts.c.state.not_in(_SETTLED_OR_RUNNING),
        ~exists().where(interruption_cases.c.interrupted_attempt_id == attempts.c.attempt_id),
    )
    .order_by(tasks.c.task_id)
    .limit(bindparam("b_limit"))
)


def stranded(connection: Connection, *, limit: int) -> list[Attempt]:
    """The last attempts of TASKs stranded in ``active``: no running attempt, no hold, and the
    last attempt ended (failed or interrupted) without an interruption case. At most ``limit``.

    An attempt with a *resolved* case is not listed: its case was decided (a REPORT written
    from records, or a successor started), and whatever moved its TASK since has its own path.
    """
    rows = connection.execute(_STRANDED, {"b_limit": limit}).all()
    return [_attempt(row) for row in rows]


def of_tenant(
    connection: Connection, *, tenant: str, state: AttemptState, limit: int = 200
) -> list[Attempt]:
    """A tenant's attempts in ``state``, the most recently started first (the console's
    workers page: running sessions, lost ones)."""
    rows = connection.execute(
        select(attempts)
        .join(tasks, tasks.c.task_id == attempts.c.task_id)
        .where(tasks.c.tenant == tenant, attempts.c.state == state.value)
        .order_by(attempts.c.started_at.desc(), attempts.c.attempt_id)
        .limit(limit)
    ).all()
    return [_attempt(row) for row in rows]

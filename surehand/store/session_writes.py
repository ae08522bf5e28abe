"""A session's two hot writes -- claim a fresh TASK, settle an attempt with its first REPORT --
in as few statements as the backend allows.

Postgres runs each as ONE statement of data-modifying CTEs on an autocommit connection
(``Store.one_write``): one round trip and one commit, applied completely or not at all. SQLite
runs the same writes as a few statements in the caller's transaction (its statements run
in-process, and BEGIN IMMEDIATE already makes the transaction exclusive).

Both writes are guarded. When a guard does not hold they write nothing and return None, and
the caller takes the general path, which explains why (claimed already, held, fenced out, an
existing REPORT series, recorded operations). The rows they write are exactly the general
path's: the settle's are built for both paths by one ``Settlement``
(:mod:`surehand.dispatcher.settling`), and ``tests/store/test_session_fastpath.py`` checks that both
paths leave the same rows.

Why these are written by hand and not generated from ``lifecycle``'s rules: the fence is
shared (:mod:`surehand.store.fence`) and the edge comes from ``lifecycle.EDGES`` through the
caller, but the general path checks everything else in Python after reading the rows, so that
a refusal raises the typed error that explains it (IllegalTransition, TaskHeld, StaleOwner,
Conflict). A WHERE clause can only say *that* something does not hold; the fast path needs no
more, because it then hands over to the general path, which says *what*. Generating SQL for
the explanations would make the fast path as slow as the general one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import (
    CTE,
    JSON,
    Boolean,
    ColumnElement,
    Connection,
    Integer,
    Select,
    String,
    Table,
    bindparam,
    exists,
    insert,
    literal,
    select,
    union_all,
    update,
)

from surehand.model import AttemptState, Bucket, Task
from surehand.store import attempts as attempt_rows
from surehand.store import task_columns, task_moves
from surehand.store.column_types import UTCDateTime
from surehand.store.driver import DriverStatement, common_binds, own_params
from surehand.store.fence import attempt_is_current, task_is_owned
from surehand.store.schema import (
    attempts,
    operations,
    reports,
    task_dependencies,
    task_events,
    tasks,
)

_EVENT_COLUMNS = tuple(c.name for c in task_events.c if c.name != "id")
_EVENT_TYPES: dict[str, Any] = {"at": UTCDateTime(), "epoch": Integer(), "data": JSON()}


def _insert(table: Table, columns: Sequence[str]) -> DriverStatement:
    return DriverStatement(insert(table).values({name: bindparam(name) for name in columns}))


_INSERT_ATTEMPT = _insert(attempts, attempt_rows.RUNNING_COLUMNS)
_INSERT_EVENT = _insert(task_events, _EVENT_COLUMNS)
_INSERT_REPORT = _insert(reports, [c.name for c in reports.c])


def _insert_events(source: CTE, prefixes: Sequence[str], shared: Mapping[str, Any]) -> CTE:
    """INSERT the events whose parameters start with ``prefixes``, in that order, once per row
    of ``source`` (the CTE whose output says the write happened). ``shared`` gives columns
    that every event takes from one place (a column of ``source``, a common parameter):
    fewer parameters keep the statement within psycopg's cache of converted queries."""

    def value(prefix: str, name: str) -> Any:
        if name in shared:
            return shared[name].label(name)
        return bindparam(f"{prefix}{name}", type_=_EVENT_TYPES.get(name, String())).label(name)

    rows = [
        select(*(value(prefix, name) for name in _EVENT_COLUMNS)).select_from(source)
        for prefix in prefixes
    ]
    # UNION ALL runs its branches in order, so the events' ids follow ``prefixes``.
    chosen = rows[0] if len(rows) == 1 else union_all(*rows)
    return insert(task_events).from_select(list(_EVENT_COLUMNS), chosen).cte("new_events")


# -- claim ----------------------------------------------------------------------------------


def _claim_statement() -> Select[Any]:
    moved = task_moves.CLAIM_INBOX.cte("claimed")
    # The row attempts.running_row describes, with the number read from the UPDATE's output.
    running: dict[str, Any] = {
        "attempt_id": bindparam("a_attempt_id", type_=String()),
        "task_id": moved.c.task_id,
        "number": moved.c.epoch,
        "state": literal(AttemptState.RUNNING.value, String()),
        "worker": bindparam("a_worker", type_=String()),
        "lease_id": bindparam("a_attempt_id", type_=String()),
        "agent_returned": literal(False, Boolean()),
        "bound_operation_id": literal(None, Integer()),
        "case_id": literal(None, String()),
        "started_at": bindparam("b_now", type_=UTCDateTime()),
    }
    columns = list(attempt_rows.RUNNING_COLUMNS)
    values = select(*(running[name] for name in columns)).select_from(moved)
    attempt = insert(attempts).from_select(columns, values).cte("attempt")
    event = _insert_events(moved, ["e1_"], {"epoch": moved.c.epoch})
    return select(moved).add_cte(attempt, event)


_CLAIM_PG = DriverStatement(_claim_statement(), task_columns.TASK_COLUMNS)
_CLAIM_SQLITE = DriverStatement(task_moves.CLAIM_INBOX, task_columns.TASK_COLUMNS)


def claim_fresh(
    connection: Connection,
    *,
    task_id: str,
    attempt_id: str,
    worker: str,
    now: datetime,
    event: Mapping[str, Any],
) -> Task | None:
    """Move an unheld ``inbox`` TASK to ``active`` with the next epoch, and insert its running
    attempt (number = that epoch) and the claim's ``event`` (an ``events.row``; its epoch is
    filled in). Returns the TASK as written, or None with nothing written."""
    if connection.dialect.name == "postgresql":
        params = {"b_task_id": task_id, "b_now": now, "a_attempt_id": attempt_id}
        params.update({"a_worker": worker, **own_params("e1_", event, {"epoch": ""}, {})})
        row = _CLAIM_PG.one_or_none(connection, params)
        return task_columns.from_row(row) if row is not None else None
    row = _CLAIM_SQLITE.one_or_none(connection, {"b_task_id": task_id, "b_now": now})
    if row is None:
        return None
    moved = task_columns.from_row(row)
    attempt = attempt_rows.new_running(
        attempt_id=attempt_id, task_id=task_id, number=moved.epoch, worker=worker, now=now
    )
    _INSERT_ATTEMPT.rowcount(connection, attempt_rows.running_row(attempt))
    _INSERT_EVENT.rowcount(connection, {**event, "epoch": moved.epoch})
    return moved


# -- settle ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstReport:
    """Everything settling an attempt with its series' first REPORT writes, known up front.

    ``task`` is the TASK as the attempt claimed it; ``report`` the REPORT's row (revision 1,
    superseding nothing); ``events`` are ``events.row`` dicts in history order (REPORT,
    TRANSITION, ATTEMPT_FINISHED).
    """

    task: Task
    epoch: int
    attempt_id: str
    result: Any
    target: Bucket
    now: datetime
    report: Mapping[str, Any]
    events: tuple[Mapping[str, Any], ...]


def _guards() -> tuple[ColumnElement[bool], ...]:
    """The attempt is running, is epoch ``s_epoch``, recorded no operation, the REPORT
    series it writes to is empty, and no TASK depends on its TASK. (The TASK's side of the
    fence is the caller's.)"""
    series = (
        reports.c.task_id == bindparam("s_task_id"),
        reports.c.reporter == bindparam("s_reporter"),
        reports.c.recipient == bindparam("s_recipient"),
        reports.c.status == bindparam("s_status"),
    )
    return (
        *attempt_is_current(bindparam("s_attempt_id"), bindparam("s_epoch")),
        ~exists().where(  # task_id first: served by ix_operations_task_fingerprint
            operations.c.task_id == bindparam("s_task_id"),
            operations.c.attempt_id == attempts.c.attempt_id,
        ),
        ~exists().where(*series),
        # A TASK others depend on settles the general way, whose move to done queues the
        # dependants it releases in the same transaction (lifecycle.apply).
        ~exists().where(task_dependencies.c.dependency_id == bindparam("s_task_id")),
    )


_OWNED_TASK = select(tasks.c.task_id).where(
    *task_is_owned(bindparam("s_task_id"), bindparam("s_epoch"), bindparam("s_rework_round"))
)


def _finish(*extra: ColumnElement[bool]) -> Any:
    return (
        update(attempts)
        .where(*_guards(), *extra)
        .values(
            agent_returned=True,
            result=bindparam("s_result", type_=JSON()),
            state=AttemptState.SUCCEEDED.value,
            ended_at=bindparam("s_now", type_=UTCDateTime()),
        )
    )


_MOVE = update(tasks).values(
    bucket=bindparam("s_target", type_=String()),
    revision=tasks.c.revision + 1,
    updated_at=bindparam("s_now", type_=UTCDateTime()),
)
_MOVED = (tasks.c.revision,)

# Columns of the REPORT and of its events that are common parameters of the statement.
_REPORT_SHARED = {
    "task_id": "s_task_id",
    "reporter": "s_reporter",
    "recipient": "s_recipient",
    "status": "s_status",
    "rework_round": "s_rework_round",
    "attempt_id": "s_attempt_id",
    "created_at": "s_now",
}
_EVENT_SHARED = {"task_id": "s_task_id", "at": "s_now", "attempt_id": "s_attempt_id"}
_PREFIXES = ("e1_", "e2_", "e3_")


def _settle_statement() -> Select[Any]:
    # The TASK row is locked first (FOR UPDATE re-checks the newest version), so nothing can
    # move it between the fence and the move: either every part below applies or none does.
    locked = _OWNED_TASK.with_for_update().cte("owned")
    finished = _finish(exists(select(locked.c.task_id))).returning(attempts.c.attempt_id)
    finished_cte = finished.cte("finished")
    moved = (
        _MOVE.where(
            tasks.c.task_id == bindparam("s_task_id"),
            exists(select(finished_cte.c.attempt_id)),
        )
        .returning(*_MOVED)
        .cte("settled")
    )
    shared = common_binds(_REPORT_SHARED, {c.name: c.type for c in reports.c})
    report_values = [
        (shared[c.name] if c.name in shared else bindparam(f"r_{c.name}", type_=c.type)).label(
            c.name
        )
        for c in reports.c
    ]
    report = (
        insert(reports)
        .from_select([c.name for c in reports.c], select(*report_values).select_from(moved))
        .cte("new_report")
    )
    event_types = {c.name: c.type for c in task_events.c}
    events = _insert_events(moved, _PREFIXES, common_binds(_EVENT_SHARED, event_types))
    return select(moved).add_cte(report, events)


_SETTLE_PG = DriverStatement(_settle_statement(), _MOVED)
_FINISH_SQLITE = DriverStatement(_finish(exists(_OWNED_TASK)))
_MOVE_SQLITE = DriverStatement(
    _MOVE.where(tasks.c.task_id == bindparam("s_task_id")).returning(*_MOVED), _MOVED
)


def _settle_params(settled: FirstReport) -> dict[str, Any]:
    report = settled.report
    return {
        "s_task_id": settled.task.task_id,
        "s_epoch": settled.epoch,
        "s_rework_round": settled.task.rework_round,
        "s_attempt_id": settled.attempt_id,
        "s_reporter": report["reporter"],
        "s_recipient": report["recipient"],
        "s_status": report["status"],
        "s_result": settled.result,
        "s_now": settled.now,
        "s_target": settled.target.value,
    }


def settle_first_report(connection: Connection, settled: FirstReport) -> Task | None:
    """Fence the attempt, record its return and end it as succeeded, insert the REPORT, move
    the TASK to ``settled.target`` and append the events. Returns the TASK as written, or None
    with nothing written when a guard does not hold. DuplicateKey if a REPORT with this id or
    content landed concurrently (nothing written either)."""
    params = _settle_params(settled)
    if connection.dialect.name == "postgresql":
        own = own_params("r_", settled.report, _REPORT_SHARED, params)
        for prefix, event in zip(_PREFIXES, settled.events, strict=True):
            own.update(own_params(prefix, event, _EVENT_SHARED, params))
        row = _SETTLE_PG.one_or_none(connection, {**params, **own})
    else:
        row = _settle_sqlite(connection, settled, params)
    if row is None:
        return None
    # Only this attempt moves its TASK while it owns it (the guards above): the TASK as
    # written is the claimed one with the new bucket and revision.
    return replace(
        settled.task, bucket=settled.target, revision=row.revision, updated_at=settled.now
    )


def _settle_sqlite(connection: Connection, settled: FirstReport, params: Mapping[str, Any]) -> Any:
    if _FINISH_SQLITE.rowcount(connection, params) != 1:
        return None
    row = _MOVE_SQLITE.one_or_none(connection, params)
    _INSERT_REPORT.rowcount(connection, settled.report)
    for event in settled.events:
        _INSERT_EVENT.rowcount(connection, event)
    return row

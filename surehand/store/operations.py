"""Operations: the effect facts. An intent row is committed before the effect runs, and the
outcome is written onto it afterwards; an intent without an outcome is an *open* intent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, func, insert, select, update

from surehand.model import Attempt, Declaration, Operation, OperationState, RetryPolicy
from surehand.store import opaque
from surehand.store.schema import operations


def _operation(connection: Connection, row: Row[Any]) -> Operation:
    return Operation(
        operation_id=opaque.shown(connection, row.id),
        task_id=row.task_id,
        attempt_id=row.attempt_id,
        epoch=row.epoch,
        name=row.name,
        fingerprint=row.fingerprint,
        args=row.args,
        idempotency_key=row.idempotency_key,
        retry_policy=RetryPolicy(row.retry_policy),
        probe=row.probe,
        state=OperationState(row.state),
        outcome=row.outcome,
        external_receipt=row.external_receipt,
        error=row.error,
        started_at=row.started_at,
        settled_at=row.settled_at,
        declared_within=tuple(row.declared_within or ()),
        probe_args=row.probe_args,
    )


# Hot-path statements: built once, executed with parameters (compiled once, then cached).
_INSERT_INTENT = insert(operations).returning(operations.c.id)
_SETTLE = (
    update(operations)
    .where(
        operations.c.id == bindparam("b_operation_id"),
        operations.c.state == OperationState.INTENT.value,
    )
    .values(
        state=bindparam("b_state"),
        outcome=bindparam("b_outcome"),
        external_receipt=bindparam("b_external_receipt"),
        error=bindparam("b_error"),
        settled_at=bindparam("b_now"),
    )
)
_LATEST_BY_FINGERPRINT = (
    select(operations)
    .where(
        operations.c.task_id == bindparam("task_id"),
        operations.c.fingerprint == bindparam("fingerprint"),
    )
    .order_by(operations.c.id.desc())
    .limit(1)
)


def insert_intent(
    connection: Connection,
    declaration: Declaration,
    attempt: Attempt,
    *,
    fingerprint: str,
    now: datetime,
    declared_within: Sequence[int] = (),
) -> int:
    """Record ``attempt``'s intent (under its epoch); returns the operation id (as shown:
    ``store/opaque.py``). ``declared_within``: the open declared effects a journaled call ran
    within (their ids)."""
    result = connection.execute(
        _INSERT_INTENT,
        {
            "task_id": attempt.task_id,
            "attempt_id": attempt.attempt_id,
            "epoch": attempt.number,
            "name": declaration.name,
            "fingerprint": fingerprint,
            "args": dict(declaration.args),
            "idempotency_key": declaration.idempotency_key,
            "retry_policy": declaration.retry_policy.value,
            "probe": declaration.probe,
            "state": OperationState.INTENT.value,
            "started_at": now,
            "declared_within": list(declared_within) or None,
            "probe_args": dict(declaration.probe_args) if declaration.probe_args else None,
        },
    )
    return opaque.shown(connection, int(result.scalar_one()))


def settle(
    connection: Connection,
    operation_id: int,
    *,
    state: OperationState,
    outcome: Mapping[str, Any] | None,
    external_receipt: str | None,
    error: str | None,
    now: datetime,
) -> bool:
    """Write the outcome onto an open intent (compare-and-set on ``state = 'intent'``)."""
    result = connection.execute(
        _SETTLE,
        {
            "b_operation_id": opaque.internal(connection, operation_id),
            "b_state": state.value,
            "b_outcome": dict(outcome) if outcome is not None else None,
            "b_external_receipt": external_receipt,
            "b_error": error,
            "b_now": now,
        },
    )
    return result.rowcount == 1


def rebind(connection: Connection, operation_id: int, *, attempt_id: str, epoch: int) -> bool:
    """Hand an open intent to the successor attempt admitted to repeat it (single_verified)."""
    result = connection.execute(
        update(operations)
        .where(
            operations.c.id == opaque.internal(connection, operation_id),
            operations.c.state == OperationState.INTENT.value,
        )
        .values(attempt_id=attempt_id, epoch=epoch)
    )
    return result.rowcount == 1


def latest_by_fingerprint(
    connection: Connection, task_id: str, fingerprint: str
) -> Operation | None:
    """The newest record of this operation on this task, from any attempt."""
    row = connection.execute(
        _LATEST_BY_FINGERPRINT, {"task_id": task_id, "fingerprint": fingerprint}
    ).one_or_none()
    return _operation(connection, row) if row is not None else None


def get(connection: Connection, operation_id: int) -> Operation | None:
    row = connection.execute(
        select(operations).where(operations.c.id == opaque.internal(connection, operation_id))
    ).one_or_none()
    return _operation(connection, row) if row is not None else None


def for_attempt(connection: Connection, attempt_id: str) -> list[Operation]:
    rows = connection.execute(
        select(operations).where(operations.c.attempt_id == attempt_id).order_by(operations.c.id)
    ).all()
    return [_operation(connection, row) for row in rows]


def open_for_attempt(connection: Connection, attempt_id: str) -> list[int]:
    """The ids of ``attempt_id``'s open intents, oldest first."""
    rows = connection.execute(
        select(operations.c.id)
        .where(
            operations.c.attempt_id == attempt_id,
            operations.c.state == OperationState.INTENT.value,
        )
        .order_by(operations.c.id)
    ).all()
    return [opaque.shown(connection, row.id) for row in rows]


def probes_of_open_intents(connection: Connection) -> list[tuple[str, str]]:
    """(probe name, TASK id) of every open intent that names a probe, oldest first (what
    ``surehand check`` asks the registry for)."""
    query = (
        select(operations.c.probe, operations.c.task_id)
        .where(operations.c.state == OperationState.INTENT.value)
        .where(operations.c.probe.is_not(None))
        .order_by(operations.c.id)
    )
    return [(str(probe), str(task_id)) for probe, task_id in connection.execute(query)]


def for_task(connection: Connection, task_id: str) -> list[Operation]:
    rows = connection.execute(
        select(operations).where(operations.c.task_id == task_id).order_by(operations.c.id)
    ).all()
    return [_operation(connection, row) for row in rows]


def count(connection: Connection, task_id: str | None = None) -> int:
    query = select(func.count()).select_from(operations)
    if task_id is not None:
        query = query.where(operations.c.task_id == task_id)
    return int(connection.execute(query).scalar_one())


def confirm(
    connection: Connection,
    operation_id: int,
    *,
    present: bool,
    source: Mapping[str, Any],
    now: datetime,
) -> bool:
    """Turn an open (or effect-raised) operation into a confirmed fact from a probe or review.

    Present: succeeded, never to run again. Absent: failed with ``probe: absent`` in its
    outcome, which lets a successor run the effect again.
    """
    state = OperationState.SUCCEEDED if present else OperationState.FAILED
    outcome = {"probe": "present" if present else "absent", **dict(source)}
    result = connection.execute(
        update(operations)
        .where(
            operations.c.id == opaque.internal(connection, operation_id),
            operations.c.state.in_([OperationState.INTENT.value, OperationState.FAILED.value]),
        )
        .values(state=state.value, outcome=outcome, settled_at=now)
    )
    return result.rowcount == 1

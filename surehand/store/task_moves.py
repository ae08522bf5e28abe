"""Compare-and-set moves of TASK rows: the claim of an ``inbox`` TASK and the general
:func:`update_if`, each applied only where the row still has what the caller read, and each
bumping the revision."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Update, bindparam, update

from surehand.model import Bucket, Task
from surehand.store.fence import next_epoch
from surehand.store.schema import tasks
from surehand.store.task_columns import TASK_COLUMNS, from_row
from surehand.store.tasks import READY, ROLE_NOT_PAUSED

CLAIM_INBOX = (
    update(tasks)
    .where(
        tasks.c.task_id == bindparam("b_task_id"),
        tasks.c.bucket == Bucket.INBOX.value,
        tasks.c.hold_case_id.is_(None),
        tasks.c.cancel_requested_at.is_(None),
        ROLE_NOT_PAUSED,
        READY,
    )
    .values(
        bucket=Bucket.ACTIVE.value,
        epoch=next_epoch(tasks.c.epoch),
        revision=tasks.c.revision + 1,
        updated_at=bindparam("b_now"),
    )
    .returning(*TASK_COLUMNS)
)


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
